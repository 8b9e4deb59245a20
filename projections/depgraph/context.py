"""What a resolver may look at, with every look-up recorded.

Resolution depends on the workspace only through these calls. Each call records a key naming
the fact it read; the graph keeps, per file, the keys its last resolution read, and after an
update re-resolves exactly the files that read a fact the update changed. A new file can thus
make an import resolve that did not before: the importer had looked for that path.

Keys: ``e:<path>`` a file exists, ``c:<path>`` a config file's content, ``d:<dir>`` the files
directly in a directory, ``m:<stem>`` which of a Python module's files exist (``stem.py``,
``stem/__init__.py`` and the stubs: one key, as a missing module is the common case and costs
four look-ups), ``gomods`` the set of Go modules, ``crates`` the set of Rust crates,
``defs:<dir>`` the package clauses and top-level names of the Go files in a directory.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar

from projections.depgraph.model import FileImports, FileTags, Import

T = TypeVar("T")


class Lookups(Protocol):
    root_name: str

    def remembered(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, shared by all resolutions of one update (the workspace does not
        change while they run); the facts it read are recorded for each caller."""
        ...

    def exists(self, path: str) -> bool: ...

    def python_module(self, stem: str) -> str | None:
        """The first of ``stem.py``, ``stem/__init__.py``, ``stem.pyi``, ``stem/__init__.pyi``
        that exists."""
        ...

    def dir_files(self, directory: str) -> tuple[str, ...]: ...

    def config(self, path: str) -> bytes | None: ...

    def go_modules(self) -> tuple[tuple[str, str], ...]: ...

    def crates(self) -> dict[str, str]: ...

    def go_unit(self, path: str) -> tuple[str, frozenset[str]]: ...

    def imports_of(self, path: str) -> FileImports: ...

    def tags_of(self, path: str) -> FileTags: ...


Resolved = tuple[set[str], list[Import]]
"""What resolving one file gives: the files it depends on, and the imports that named no file
of the workspace (the standard library, third-party packages, typos)."""
