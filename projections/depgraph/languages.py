"""Which grammar parses which file, and the compiled tree-sitter objects (built once per process).

Grammars come only from the installed wheels; nothing is downloaded at run time. The tags queries
are the ones the grammar wheels ship (TypeScript's adds to JavaScript's, as upstream intends); the
import queries are ours, in ``queries/``.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from typing import Any

from tree_sitter import Language, Parser, Query

_EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
}

LANGUAGES = ("go", "javascript", "python", "rust", "tsx", "typescript")

_QUERY_DIR = Path(__file__).parent / "queries"


def language_for(path: str) -> str | None:
    """The language of a source file by its name, or None for files the graph does not parse."""
    dot = path.rfind(".")
    if dot < 0 or dot < path.rfind("/"):
        return None
    return _EXTENSIONS.get(path[dot:])


def _module(language: str) -> Any:
    name = {"tsx": "typescript"}.get(language, language)
    return importlib.import_module(f"tree_sitter_{name}")


@functools.cache
def grammar(language: str) -> Language:
    mod = _module(language)
    if language == "typescript":
        return Language(mod.language_typescript())
    if language == "tsx":
        return Language(mod.language_tsx())
    return Language(mod.language())


@functools.cache
def parser(language: str) -> Parser:
    return Parser(grammar(language))


def _wheel_tags(module_language: str) -> str:
    mod = _module(module_language)
    path = Path(os.path.dirname(mod.__file__)) / "queries" / "tags.scm"
    if path.is_file():
        return path.read_text()
    # A grammar wheel without tags: fall back to the copy kept here (taken from the wheels).
    return (_QUERY_DIR / f"tags-{module_language}.scm").read_text()


@functools.cache
def tags_query(language: str) -> Query:
    if language in ("typescript", "tsx"):
        source = _wheel_tags("javascript") + "\n" + _wheel_tags("typescript")
    else:
        source = _wheel_tags(language)
    return Query(grammar(language), source)


@functools.cache
def imports_query(language: str) -> Query:
    name = {"tsx": "typescript"}.get(language, language)
    return Query(grammar(language), (_QUERY_DIR / f"imports-{name}.scm").read_text())
