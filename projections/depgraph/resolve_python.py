"""Python imports to files.

Absolute imports are looked up under a list of source roots, first match wins: the directory
above the file's top-level package (the chain of ``__init__.py`` directories it sits in), the
workspace root and ``src/`` (the src layout), and for a file outside any package its own
directory first (scripts and test helpers importing their neighbours). When the workspace root
is itself a package, only names under its own name are looked up (``httpx._models`` is
``_models.py``). Relative imports are resolved by path from the file's directory.

Like grimp, an import points at the most specific module that exists: ``from a.b import c`` is
``a/b/c.py`` when that module exists and ``a/b`` otherwise, and ``import a.b.c`` names ``a.b.c``
only (not the packages above it). Stub files (``.pyi``) count when no ``.py`` is there.
"""

from __future__ import annotations

from functools import partial

from projections.depgraph.context import Lookups, Resolved
from projections.depgraph.model import FileImports, Import
from projections.depgraph.paths import child, dirname

MODULE_SUFFIXES = (".py", "/__init__.py", ".pyi", "/__init__.pyi")


def module_stem(path: str) -> str | None:
    """The module path whose files ``path`` may be (``a/b`` for ``a/b.py`` and
    ``a/b/__init__.pyi``); None for a file that is no Python module."""
    if path.endswith(".py"):
        stem = path[:-3]
    elif path.endswith(".pyi"):
        stem = path[:-4]
    else:
        return None
    if stem.endswith("/__init__"):
        return stem[:-9]
    return "" if stem == "__init__" else stem


def resolve(path: str, parsed: FileImports, ctx: Lookups) -> Resolved:
    targets: set[str] = set()
    unresolved: list[Import] = []
    roots: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    for imp in parsed.imports:
        if imp.level:
            found = _relative(path, imp, ctx)
        else:
            if roots is None:
                directory = dirname(path)
                roots = ctx.remembered(("py-roots", directory), partial(_roots, directory, ctx))
            found = ctx.remembered(
                ("py-abs", imp.module, imp.names, roots), partial(_absolute, imp, roots, ctx)
            )
        if found:
            targets.update(found)
        else:
            unresolved.append(imp)
    targets.discard(path)
    return targets, unresolved


def _module_file(base: str, parts: list[str] | tuple[str, ...], ctx: Lookups) -> str | None:
    """The file of module ``parts`` under directory ``base`` (no parts: the package at base)."""
    if not parts:
        for suffix in ("__init__.py", "__init__.pyi"):
            candidate = child(base, suffix)
            if ctx.exists(candidate):
                return candidate
        return None
    return ctx.python_module(child(base, "/".join(parts)))


def _most_specific(
    base: str, parts: list[str], names: tuple[str, ...], ctx: Lookups, floor: int
) -> list[str]:
    """For ``from parts import names`` (or ``import parts`` with no names): each name's own
    module if it is one, else the longest prefix of ``parts`` (at least ``floor`` long) that is a
    module."""
    out: list[str] = []
    rest = []
    for name in names:
        if name == "*":
            rest.append(name)
            continue
        found = _module_file(base, [*parts, *name.split(".")], ctx)
        if found is not None:
            out.append(found)
        else:
            rest.append(name)
    if rest or not names:
        for k in range(len(parts), floor - 1, -1):
            found = _module_file(base, parts[:k], ctx)
            if found is not None:
                out.append(found)
                break
    return out


def _relative(path: str, imp: Import, ctx: Lookups) -> list[str]:
    base = dirname(path)
    for _ in range(imp.level - 1):
        if not base:
            return []  # climbs above the workspace
        base = dirname(base)
    parts = imp.module.split(".") if imp.module else []
    return _most_specific(base, parts, imp.names, ctx, 0)


def _absolute(
    imp: Import, roots: tuple[tuple[str, tuple[str, ...]], ...], ctx: Lookups
) -> list[str]:
    parts = imp.module.split(".")
    for base, prefix in roots:
        if prefix:
            if tuple(parts[: len(prefix)]) != prefix:
                continue
            local = parts[len(prefix) :]
            floor = 0  # ``import pkg`` with the root being ``pkg`` is the root's __init__
        else:
            local = parts
            floor = 1
        found = _most_specific(base, local, imp.names, ctx, floor)
        if found:
            return found
    return []


def _roots(file_dir: str, ctx: Lookups) -> tuple[tuple[str, tuple[str, ...]], ...]:
    roots: list[tuple[str, tuple[str, ...]]] = []
    directory = file_dir
    top: str | None = None
    while True:
        if not ctx.exists(child(directory, "__init__.py")):
            break
        top = directory
        if not directory:
            break
        directory = dirname(directory)
    if top is None:
        roots.append((file_dir, ()))
    elif top:
        roots.append((dirname(top), ()))
    if top == "" or (top is None and ctx.exists("__init__.py")):
        # The workspace is a package itself: its parent directory, outside the workspace, is
        # the import root, so only names under the package's own name are ours (``abc`` is
        # the standard library even when the package has an ``abc.py``).
        roots.append(("", (ctx.root_name,)))
        return tuple(roots)
    for base in ("", "src"):
        if (base, ()) not in roots:
            roots.append((base, ()))
    return tuple(roots)
