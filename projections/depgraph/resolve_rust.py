"""Rust ``mod`` declarations and ``use`` paths to files.

A crate's source directory is ``src/`` next to the nearest ``Cargo.toml`` (its root file
``lib.rs`` or ``main.rs``); a file outside it (``tests/``, ``examples/``, ``build.rs``) is a
crate root of its own. Modules follow the standard file layout: module ``a::b`` is
``src/a/b.rs`` or ``src/a/b/mod.rs``, and ``mod x;`` in ``src/a.rs`` is ``src/a/x.rs``.
``#[path]`` attributes are not followed. A ``use`` path (``crate::``, ``self::``, ``super::``,
a child module, or the name of another crate in the workspace) depends on the most specific
module file that exists: ``use crate::a::B`` is ``src/a.rs`` when ``B`` is an item in it.
"""

from __future__ import annotations

import re

from projections.depgraph.context import Lookups, Resolved
from projections.depgraph.model import FileImports, Import
from projections.depgraph.paths import child, dirname

_PACKAGE_NAME = re.compile(rb"^\[package\][^\[]*?^\s*name\s*=\s*\"([^\"]+)\"", re.M | re.S)


def crate_name(cargo_toml: bytes) -> str | None:
    m = _PACKAGE_NAME.search(cargo_toml)
    return m.group(1).decode("utf-8", "replace").replace("-", "_") if m else None


class _Crate:
    def __init__(self, src: str, root_file: str | None) -> None:
        self.src = src
        self.root_file = root_file

    def module_file(self, segments: list[str], ctx: Lookups) -> str | None:
        if not segments:
            return self.root_file
        stem = child(self.src, "/".join(segments))
        for candidate in (stem + ".rs", stem + "/mod.rs"):
            if ctx.exists(candidate):
                return candidate
        return None

    def most_specific(self, segments: list[str], floor: int, ctx: Lookups) -> str | None:
        for k in range(len(segments), floor - 1, -1):
            found = self.module_file(segments[:k], ctx)
            if found is not None:
                return found
        return None


def _crate_of(path: str, ctx: Lookups) -> _Crate:
    directory = dirname(path)
    while True:
        if ctx.exists(child(directory, "Cargo.toml")):
            src = child(directory, "src")
            if path.startswith(src + "/") and not path.startswith(src + "/bin/"):
                for name in ("lib.rs", "main.rs"):
                    if ctx.exists(child(src, name)):
                        return _Crate(src, child(src, name))
                return _Crate(src, None)
            return _Crate(dirname(path), path)
        if not directory:
            return _Crate(dirname(path), path)
        directory = dirname(directory)


def _module_path(path: str, crate: _Crate) -> list[str]:
    if path == crate.root_file:
        return []
    rel = path[len(crate.src) + 1 :] if crate.src else path
    parts = rel[: -len(".rs")].split("/")
    if parts[-1] == "mod":
        parts.pop()
    return parts


def resolve(path: str, parsed: FileImports, ctx: Lookups) -> Resolved:
    targets: set[str] = set()
    unresolved: list[Import] = []
    crate = _crate_of(path, ctx)
    here = _module_path(path, crate)
    for imp in parsed.imports:
        segments = [s for s in imp.module.split("::") if s]
        found: str | None = None
        if imp.kind == "mod":
            found = crate.module_file([*here, *segments], ctx)
        elif segments:
            found = _use(segments, here, crate, ctx)
        if found is not None:
            if found != path:
                targets.add(found)
        else:
            unresolved.append(imp)
    return targets, unresolved


def _use(segments: list[str], here: list[str], crate: _Crate, ctx: Lookups) -> str | None:
    first = segments[0]
    if first == "crate":
        return crate.most_specific(segments[1:], 0, ctx)
    if first in ("self", "super"):
        base = list(here)
        rest = segments
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                if not base:
                    return None
                base.pop()
            rest = rest[1:]
        return crate.most_specific([*base, *rest], len(base), ctx)
    # A child module of the current one (or of the crate root, in the root file) ...
    found = crate.most_specific([*here, *segments], len(here) + 1, ctx)
    if found is not None:
        return found
    # ... or another crate of the workspace.
    other = ctx.crates().get(first)
    if other is not None:
        root = None
        for name in ("lib.rs", "main.rs"):
            if ctx.exists(child(child(other, "src"), name)):
                root = child(child(other, "src"), name)
                break
        return _Crate(child(other, "src"), root).most_specific(segments[1:], 0, ctx)
    return None
