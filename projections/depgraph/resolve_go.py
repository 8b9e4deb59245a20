"""Go import paths to files, and the files of one package to each other.

An import path is matched against the module paths of every ``go.mod`` in the workspace
(longest module path wins, so nested modules work); the rest of the path names a directory,
and the import depends on that directory's non-test ``.go`` files. Files of the same package
(same directory and package clause) need no import to use each other, so a file also depends
on the sibling files defining a function or type it references (tests may depend on non-test
files, not the other way round).
"""

from __future__ import annotations

import re

from projections.depgraph.context import Lookups, Resolved
from projections.depgraph.model import FileImports, Import
from projections.depgraph.paths import child, dirname

_MODULE_LINE = re.compile(rb"^\s*module\s+\"?([^\s\"]+)\"?", re.M)


def module_path(go_mod: bytes) -> str | None:
    m = _MODULE_LINE.search(go_mod)
    return m.group(1).decode("utf-8", "replace") if m else None


def resolve(path: str, parsed: FileImports, ctx: Lookups) -> Resolved:
    targets: set[str] = set()
    unresolved: list[Import] = []
    modules = ctx.go_modules()
    for imp in parsed.imports:
        found = _package_files(imp.module, modules, ctx)
        if found:
            targets.update(found)
        else:
            unresolved.append(imp)
    targets.update(_same_package(path, parsed, ctx))
    targets.discard(path)
    return targets, unresolved


def _package_files(spec: str, modules: tuple[tuple[str, str], ...], ctx: Lookups) -> list[str]:
    best: tuple[str, str] | None = None
    for mod_path, mod_dir in modules:
        inside = spec == mod_path or spec.startswith(mod_path + "/")
        if inside and (best is None or len(mod_path) > len(best[0])):
            best = (mod_path, mod_dir)
    if best is None:
        return []
    rest = spec[len(best[0]) :].strip("/")
    directory = child(best[1], rest) if rest else best[1]
    return [f for f in ctx.dir_files(directory) if f.endswith(".go") and not f.endswith("_test.go")]


def _same_package(path: str, parsed: FileImports, ctx: Lookups) -> list[str]:
    used = ctx.tags_of(path).referenced_names()
    if not used:
        return []
    is_test = path.endswith("_test.go")
    out = []
    for sibling in ctx.dir_files(dirname(path)):
        if sibling == path or not sibling.endswith(".go"):
            continue
        if sibling.endswith("_test.go") and not is_test:
            continue
        package, names = ctx.go_unit(sibling)
        if package == parsed.package and not used.isdisjoint(names):
            out.append(sibling)
    return out
