"""JavaScript and TypeScript import specifiers to files.

Relative specifiers (``./x``, ``../x``) are tried as written, with each source extension, with
TypeScript's ESM convention (``./x.js`` written for ``x.ts``), and as a directory's ``index``
file. Bare specifiers go through the nearest ``tsconfig.json``/``jsconfig.json``: its
``compilerOptions.paths`` patterns (longest prefix wins, as in TypeScript), then ``baseUrl``.
``extends`` is followed for relative paths. Anything else is a package from ``node_modules`` and
stays unresolved (outside the workspace graph).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from projections.depgraph.context import Lookups, Resolved
from projections.depgraph.model import FileImports, Import
from projections.depgraph.paths import child, dirname, join

_EXTENSIONS = (".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")
_ESM_TS = {".js": (".ts", ".tsx"), ".jsx": (".tsx",), ".mjs": (".mts",), ".cjs": (".cts",)}
_CONFIG_NAMES = ("tsconfig.json", "jsconfig.json")


def resolve(path: str, parsed: FileImports, ctx: Lookups) -> Resolved:
    targets: set[str] = set()
    unresolved: list[Import] = []
    config: _Config | bool | None = False  # False: not looked up yet
    for imp in parsed.imports:
        spec = imp.module.split("?", 1)[0]
        found: str | None = None
        if spec.startswith("./") or spec.startswith("../") or spec in (".", ".."):
            base = join(dirname(path), spec)
            found = _file_or_dir(base, ctx) if base is not None else None
        elif not spec.startswith("/"):
            if config is False:
                config = _nearest_config(dirname(path), ctx)
            if isinstance(config, _Config):
                found = config.resolve(spec, ctx)
        if found is not None and found != path:
            targets.add(found)
        elif found is None:
            unresolved.append(imp)
    return targets, unresolved


def _file_or_dir(base: str, ctx: Lookups) -> str | None:
    if base and ctx.exists(base) and base.endswith(_EXTENSIONS):
        return base
    for ext in _EXTENSIONS:
        if ctx.exists(base + ext):
            return base + ext
    dot = base.rfind(".")
    if dot > base.rfind("/"):
        for ext in _ESM_TS.get(base[dot:], ()):
            if ctx.exists(base[:dot] + ext):
                return base[:dot] + ext
    for ext in _EXTENSIONS:
        candidate = child(base, "index" + ext)
        if ctx.exists(candidate):
            return candidate
    return None


class _Config:
    def __init__(
        self, base_url: str | None, paths: list[tuple[str, list[str]]], paths_base: str
    ) -> None:
        self.base_url = base_url
        self.paths = paths
        self.paths_base = paths_base

    def resolve(self, spec: str, ctx: Lookups) -> str | None:
        best: tuple[int, str, list[str]] | None = None
        for pattern, substitutions in self.paths:
            star = pattern.find("*")
            if star < 0:
                if spec == pattern:
                    best = (len(pattern) + 1, "", substitutions)
                    break
                continue
            prefix, suffix = pattern[:star], pattern[star + 1 :]
            fits = len(spec) >= len(prefix) + len(suffix)
            matches = fits and spec.startswith(prefix) and spec.endswith(suffix)
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), spec[len(prefix) : len(spec) - len(suffix)], substitutions)
        if best is not None:
            for substitution in best[2]:
                target = join(self.paths_base, substitution.replace("*", best[1]))
                found = _file_or_dir(target, ctx) if target is not None else None
                if found is not None:
                    return found
        if self.base_url is not None:
            target = join(self.base_url, spec)
            if target is not None:
                return _file_or_dir(target, ctx)
        return None


def _nearest_config(directory: str, ctx: Lookups) -> _Config | None:
    while True:
        for name in _CONFIG_NAMES:
            candidate = child(directory, name)
            if ctx.exists(candidate):
                return _load(candidate, ctx, 0)
        if not directory:
            return None
        directory = dirname(directory)


def _load(path: str, ctx: Lookups, depth: int) -> _Config | None:
    raw = ctx.config(path)
    data = _parse_jsonc(raw) if raw is not None else None
    if not isinstance(data, dict):
        return None
    here = dirname(path)
    inherited: _Config | None = None
    extends = data.get("extends")
    if isinstance(extends, str) and extends.startswith(".") and depth < 8:
        parent = join(here, extends if extends.endswith(".json") else extends + ".json")
        if parent is not None:
            inherited = _load(parent, ctx, depth + 1)
    options = data.get("compilerOptions")
    options = options if isinstance(options, dict) else {}
    base_url = inherited.base_url if inherited else None
    if isinstance(options.get("baseUrl"), str):
        base_url = join(here, options["baseUrl"])
    paths = inherited.paths if inherited else []
    paths_base = inherited.paths_base if inherited else here
    if isinstance(options.get("paths"), dict):
        paths = [
            (str(k), [str(s) for s in v if isinstance(s, str)])
            for k, v in sorted(options["paths"].items())
            if isinstance(v, list)
        ]
        # ``paths`` are relative to baseUrl when set, else to the config declaring them.
        paths_base = base_url if base_url is not None else here
    return _Config(base_url, paths, paths_base)


_JSONC_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/|,(?=\s*[}\]])', re.S)


@functools.lru_cache(maxsize=256)
def _parse_jsonc(raw: bytes) -> Any:
    """tsconfig files are JSON with comments and trailing commas."""
    text = raw.decode("utf-8", "replace")

    def keep_strings(m: re.Match[str]) -> str:
        return m.group() if m.group().startswith('"') else ""

    try:
        return json.loads(_JSONC_TOKENS.sub(keep_strings, text))
    except ValueError:
        return None
