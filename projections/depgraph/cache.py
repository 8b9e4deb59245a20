"""Parse results cached by content hash, shareable across branches and sessions.

A key is ``<pass>/<language>/<sha256 of the content>/<extractor version>``; the same content
parses the same way wherever it occurs, so one cache serves every branch, session and
workspace copy. The in-memory layer holds the decoded values; an optional ``CacheBacking``
(anything with ``get(key) -> bytes | None`` and ``put(key, bytes)``) persists them as JSON.
``DirectoryBacking`` is the one shipped here (one small file per entry, written atomically, so
concurrent processes can share it).

A ``BlobStore`` cannot be the backing directly: it is keyed by the hash of the *stored* value,
while this cache is looked up by the hash of the *source*.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from projections.depgraph.model import Definition, FileImports, FileTags, Import, Reference

# Bump when extraction changes, so old cached results are not reused.
EXTRACTOR_VERSION = "1"

T = TypeVar("T", FileImports, FileTags)


class CacheBacking(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...


class DirectoryBacking:
    """Cache entries as files under a directory (e.g. ``.coder-es/depgraph-cache``)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / key.replace("/", "-")

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, value: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(value)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class ParseCache:
    """Content-hash keyed memo of parse results, with an optional persistent backing."""

    def __init__(self, backing: CacheBacking | None = None) -> None:
        self.backing = backing
        self._memory: dict[str, Any] = {}
        self.hits = 0
        self.misses = 0

    def imports(
        self, language: str, digest: str, compute: Callable[[], FileImports]
    ) -> FileImports:
        return self._get(
            f"imports/{language}/{digest}/{EXTRACTOR_VERSION}",
            compute,
            _load_imports,
            _dump_imports,
        )

    def tags(self, language: str, digest: str, compute: Callable[[], FileTags]) -> FileTags:
        return self._get(
            f"tags/{language}/{digest}/{EXTRACTOR_VERSION}", compute, _load_tags, _dump_tags
        )

    def _get(
        self,
        key: str,
        compute: Callable[[], T],
        load: Callable[[Any], T],
        dump: Callable[[T], Any],
    ) -> T:
        found = self._memory.get(key)
        if found is not None:
            self.hits += 1
            return found  # type: ignore[no-any-return,unused-ignore]
        value: T | None = None
        if self.backing is not None:
            raw = self.backing.get(key)
            if raw is not None:
                try:
                    value = load(json.loads(raw))
                except (ValueError, TypeError, KeyError, IndexError):
                    value = None  # a damaged entry is recomputed and rewritten, never trusted
        if value is None:
            self.misses += 1
            value = compute()
            if self.backing is not None:
                self.backing.put(key, json.dumps(dump(value), separators=(",", ":")).encode())
        else:
            self.hits += 1
        self._memory[key] = value
        return value


def _dump_imports(value: FileImports) -> Any:
    return {
        "language": value.language,
        "package": value.package,
        "imports": [[i.line, i.kind, i.module, list(i.names), i.level] for i in value.imports],
    }


def _load_imports(raw: Any) -> FileImports:
    return FileImports(
        str(raw["language"]),
        tuple(
            Import(int(a), str(b), str(c), tuple(str(n) for n in d), int(e))
            for a, b, c, d, e in raw["imports"]
        ),
        str(raw["package"]),
    )


def _dump_tags(value: FileTags) -> Any:
    return {
        "definitions": [[d.line, d.name, d.kind, d.text] for d in value.definitions],
        "references": [[r.name, r.kind, r.line] for r in value.references],
    }


def _load_tags(raw: Any) -> FileTags:
    return FileTags(
        tuple(Definition(int(a), str(b), str(c), str(d)) for a, b, c, d in raw["definitions"]),
        tuple(Reference(str(a), str(b), int(c)) for a, b, c in raw["references"]),
    )
