"""The plain-statement reader: it must read exactly what tree-sitter reads, or step aside."""

from __future__ import annotations

import pytest

from projections.depgraph.parse import (
    _outside,
    _statement_starts,
    _triple_quoted_spans,
    python_imports,
    python_imports_full,
)
from projections.depgraph.python_lines import plain_imports


def _plain(data: bytes) -> list[tuple[object, ...]] | None:
    spans = _triple_quoted_spans(data)
    assert spans is not None
    found = plain_imports(data, _outside(_statement_starts(data), spans))
    return None if found is None else [tuple(k) for k in found]


COMMON = [
    b"import os\n",
    b"import os.path as p, sys\n",
    b"import a.b.c\n\n\nimport d  # trailing comment\n",
    b"from . import x\n",
    b"from .. import (x, y,)\n",
    b"from ..a.b import c as d, e\n",
    b"from.a import b\n",
    b"from x import *\n",
    b"from x import*  # all\n",
    b"from x import (\n    a,  # a, comma in a comment\n    b as c,\n)\n",
    b"from __future__ import annotations\nimport os\n",
    b"from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import b\n",
    b"def f():\n    import json\n    return json\n",
    b"from re import match, case, type, print\n",
    b"import os\r\nimport sys\r\n",
    b"from x import (\r\n    a,  # note\r\n    b,\r\n)\r\n",
    b"import last_line_without_newline",
]


@pytest.mark.parametrize("data", COMMON)
def test_common_statements_are_read_from_text_as_tree_sitter_reads_them(data: bytes) -> None:
    assert _plain(data) is not None, "the common shapes must take the fast path"
    assert python_imports(data) == python_imports_full(data)


ODD = [
    b"import a, \\\n    b\n",  # a backslash continuation
    b"from x import None\n",  # a keyword as a name: an error tree-sitter recovers from
    b"import async\n",
    b"from import x\n",
    b"import a,\n",
    b"from x import a,\n",
    b"from x import ()\n",
    b"from x import a.b\n",
    b"from x import (a\nimport y\n",  # never closed
    b"import caf\xc3\xa9\n",  # a non-ASCII identifier
    b"import os; import sys\n",
    b"from x import (\n    a,\n    import_b,\n)\nimport c\n",
]


@pytest.mark.parametrize("data", ODD)
def test_anything_unusual_goes_to_the_parser_and_reads_the_same(data: bytes) -> None:
    assert python_imports(data) == python_imports_full(data)


@pytest.mark.parametrize("data", [*ODD[:9], b"import a . b\n", b"import a\rimport b\n"])
def test_the_reader_steps_aside_for_statements_it_cannot_vouch_for(data: bytes) -> None:
    assert _plain(data) is None
