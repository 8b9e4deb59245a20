"""``eventsourcing.domain`` imported without tokenizing ``object.__init__``'s signature text.

While its module is executed, eventsourcing's ``Aggregate`` class asks for
``inspect.signature(cls.__init__)``, which is ``object.__init__``: inspect parses that builtin's
text signature with ``tokenize``, whose regular expressions are compiled for it. That costs
about 14 million instructions (~4 ms, measured with callgrind), in every command that reads
the store, and nothing else in such a command tokenizes (issue 35).

The command line (``run``, never the library) imports that one module with ``inspect.signature``
answering for ``object.__init__`` alone the signature inspect gives it, built directly
(``OBJECT_INIT``, checked equal by tests/cli/test_esdomain.py); every other callable goes to
inspect as before, and inspect's own function is put back once the module is loaded.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

MODULE = "eventsourcing.domain"

_P = inspect.Parameter
OBJECT_INIT = inspect.Signature(
    [
        _P("self", _P.POSITIONAL_ONLY),
        _P("args", _P.VAR_POSITIONAL),
        _P("kwargs", _P.VAR_KEYWORD),
    ]
)


@contextmanager
def object_init_signature() -> Iterator[None]:
    real = inspect.signature

    def signature(obj: Any, *args: Any, **kwargs: Any) -> inspect.Signature:
        if obj is object.__init__ and not args and not kwargs:
            return OBJECT_INIT
        return real(obj, *args, **kwargs)

    inspect.signature = signature
    try:
        yield
    finally:
        inspect.signature = real


class _Hook:
    """A finder for ``MODULE`` only: the spec the other finders give, its loader executing the
    module within ``object_init_signature``. It leaves ``sys.meta_path`` when first asked."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != MODULE:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        execute: Callable[[ModuleType], None] | None = getattr(loader, "exec_module", None)
        if execute is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            with object_init_signature():
                execute(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    """Import ``MODULE`` as above, when this process first imports it."""
    if MODULE not in sys.modules:
        sys.meta_path.insert(0, _Hook())
