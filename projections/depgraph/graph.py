"""The workspace dependency graph: a projection of file contents, updated incrementally.

``DepGraph.build(root)`` scans a workspace; ``DepGraph.update(changes)`` applies file-change
events (path -> new content, None = deleted). An update re-parses only the changed files (and
even those come from the content-hash cache when seen before) and re-resolves only the files
whose last resolution read something the update changed (see ``context``): a new file makes
the imports that looked for it resolve, a deleted one makes them fail, a changed tsconfig or
go.mod re-resolves the files that consulted it. A full build is the same code path applied to
an empty graph, so an incrementally maintained graph equals a rebuilt one (a property test
checks this on random edit sequences).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from projections.depgraph import resolve_go, resolve_js, resolve_python, resolve_rust
from projections.depgraph.cache import ParseCache
from projections.depgraph.context import Resolved
from projections.depgraph.errors import UnknownFileError
from projections.depgraph.languages import language_for
from projections.depgraph.model import (
    Edge,
    FileImports,
    FileTags,
    Import,
    Reached,
    RepoMap,
    UpdateResult,
)
from projections.depgraph.parse import extract_imports, extract_tags
from projections.depgraph.paths import dirname, normalize
from projections.depgraph.scan import (
    MAX_FILE_BYTES,
    IgnoreRules,
    in_vendored_dir,
    is_tracked_kind,
    scan,
)
from projections.depgraph.traverse import dependency_order, reach

_RESOLVERS: dict[str, Callable[[str, FileImports, Any], Resolved]] = {
    "python": resolve_python.resolve,
    "javascript": resolve_js.resolve,
    "typescript": resolve_js.resolve,
    "tsx": resolve_js.resolve,
    "go": resolve_go.resolve,
    "rust": resolve_rust.resolve,
}
_GO_UNIT_KINDS = frozenset({"function", "type"})
T = TypeVar("T")


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


class _View:
    """The resolvers' window onto the graph (the ``context.Lookups`` protocol), recording the
    key of every fact read."""

    def __init__(self, graph: DepGraph, memo: dict[Hashable, tuple[Any, frozenset[str]]]) -> None:
        self._g = graph
        self._memo = memo
        self.root_name = graph.root_name
        self.read: set[str] = set()

    def remembered(self, key: Hashable, compute: Callable[[], T]) -> T:
        hit = self._memo.get(key)
        if hit is not None:
            self.read.update(hit[1])
            return hit[0]  # type: ignore[no-any-return,unused-ignore]
        outer = self.read
        self.read = set()
        try:
            value = compute()
        finally:
            inner, self.read = self.read, outer
        outer.update(inner)
        self._memo[key] = (value, frozenset(inner))
        return value

    def exists(self, path: str) -> bool:
        self.read.add("e:" + path)
        return path in self._g._content

    def python_module(self, stem: str) -> str | None:
        self.read.add("m:" + stem)
        content = self._g._content
        for suffix in resolve_python.MODULE_SUFFIXES:
            candidate = stem + suffix
            if candidate in content:
                return candidate
        return None

    def dir_files(self, directory: str) -> tuple[str, ...]:
        self.read.add("d:" + directory)
        return tuple(sorted(self._g._dirs.get(directory, ())))

    def config(self, path: str) -> bytes | None:
        self.read.add("c:" + path)
        return self._g._content.get(path)

    def go_modules(self) -> tuple[tuple[str, str], ...]:
        self.read.add("gomods")
        return self._g._go_modules()

    def crates(self) -> dict[str, str]:
        self.read.add("crates")
        return self._g._crates()

    def go_unit(self, path: str) -> tuple[str, frozenset[str]]:
        self.read.add("defs:" + dirname(path))
        return self._g._go_units.get(path, ("", frozenset()))

    def imports_of(self, path: str) -> FileImports:
        return self._g._imports[path]

    def tags_of(self, path: str) -> FileTags:
        return self._g.tags(path)


class DepGraph:
    """Files as nodes, resolved imports as edges, for Python, JS, TS/TSX, Go and Rust."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        cache: ParseCache | None = None,
        *,
        root_name: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.root_name = root_name or Path(os.path.abspath(root)).name
        self.cache = cache if cache is not None else ParseCache()
        self._content: dict[str, bytes] = {}
        self._digest: dict[str, str] = {}
        self._dirs: dict[str, set[str]] = {}
        self._imports: dict[str, FileImports] = {}
        self._go_units: dict[str, tuple[str, frozenset[str]]] = {}
        self._targets: dict[str, tuple[str, ...]] = {}
        self._dependents: dict[str, set[str]] = {}
        self._unresolved: dict[str, tuple[Import, ...]] = {}
        self._probes: dict[str, frozenset[str]] = {}
        self._probe_index: dict[str, set[str]] = {}
        self._gitignores: dict[str, bytes] = {}
        self._ignore = IgnoreRules({})
        self._go_mod_files: set[str] = set()
        self._cargo_files: set[str] = set()
        self._go_modules_memo: tuple[tuple[str, str], ...] | None = None
        self._crates_memo: dict[str, str] | None = None
        self._order_memo: dict[str, int] | None = None
        # Graphs built from in-memory sources keep every file they were given, ignored ones
        # too, so a .gitignore change can bring files back without a disk.
        self._universe: dict[str, bytes] | None = None

    # -- building ------------------------------------------------------------------------------

    @classmethod
    def build(cls, root: str | os.PathLike[str], cache: ParseCache | None = None) -> DepGraph:
        """A full scan of the workspace at ``root`` (honouring .gitignore, skipping vendored
        directories)."""
        graph = cls(root, cache)
        graph._apply(dict(scan(graph.root)))
        return graph

    @classmethod
    def from_sources(
        cls,
        files: Mapping[str, bytes],
        *,
        root: str | os.PathLike[str] = ".",
        root_name: str | None = None,
        cache: ParseCache | None = None,
    ) -> DepGraph:
        """A graph of in-memory files (relative path -> content), e.g. a snapshot from the
        blob store; updates never touch the disk."""
        graph = cls(root, cache, root_name=root_name)
        graph._universe = {}
        for path, data in files.items():
            norm = normalize(path)
            if is_tracked_kind(norm):
                graph._universe[norm] = data
        graph._apply(graph._visible(graph._universe))
        return graph

    def update(self, changes: Mapping[str, bytes | None]) -> UpdateResult:
        """Apply file changes (relative path -> new content, None = deleted)."""
        norm: dict[str, bytes | None] = {}
        for path, data in changes.items():
            norm[normalize(path)] = data
        if self._universe is not None:
            for path, data in norm.items():
                if not is_tracked_kind(path):
                    continue
                if data is None:
                    self._universe.pop(path, None)
                else:
                    self._universe[path] = data
        if any(_basename(p) == ".gitignore" and not in_vendored_dir(p) for p in norm):
            return self._apply(self._diff(self._after_ignore_change(norm)))
        wanted: dict[str, bytes | None] = {}
        for path, data in norm.items():
            if not is_tracked_kind(path) or in_vendored_dir(path) or self._ignore.ignored(path):
                continue
            if data is not None and len(data) > MAX_FILE_BYTES:
                data = None
            if data is None and path not in self._content:
                continue
            if data is not None and self._content.get(path) == data:
                continue
            wanted[path] = data
        return self._apply(wanted)

    def _visible(self, files: Mapping[str, bytes]) -> dict[str, bytes]:
        rules = IgnoreRules(
            {
                p: d
                for p, d in files.items()
                if _basename(p) == ".gitignore" and not in_vendored_dir(p)
            }
        )
        return {
            p: d
            for p, d in sorted(files.items())
            if not in_vendored_dir(p) and len(d) <= MAX_FILE_BYTES and not rules.ignored(p)
        }

    def _after_ignore_change(self, norm: Mapping[str, bytes | None]) -> dict[str, bytes]:
        if self._universe is not None:
            return self._visible(self._universe)
        # The rules changed what is visible: re-read the workspace, with the event contents
        # taking precedence over what the disk says.
        files = dict(scan(self.root)) if self.root.is_dir() else dict(self._content)
        for path, data in norm.items():
            if not is_tracked_kind(path):
                continue
            if data is None:
                files.pop(path, None)
            else:
                files[path] = data
        return self._visible(files)

    def _diff(self, desired: Mapping[str, bytes]) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for path in set(self._content) | set(desired):
            new = desired.get(path)
            if self._content.get(path) != new:
                out[path] = new
        return out

    def _apply(self, changes: Mapping[str, bytes | None]) -> UpdateResult:
        added: list[str] = []
        removed: list[str] = []
        modified: list[str] = []
        reparsed: list[str] = []
        dirty: set[str] = set()
        to_resolve: set[str] = set()
        for path in sorted(changes):
            data = changes[path]
            existed = path in self._content
            directory = dirname(path)
            if data is None:
                if not existed:
                    continue
                removed.append(path)
                self._forget(path)
                dirty.update(("e:" + path, "c:" + path, "d:" + directory, "defs:" + directory))
                stem = resolve_python.module_stem(path)
                if stem is not None:
                    dirty.add("m:" + stem)
            else:
                self._content[path] = data
                if existed:
                    modified.append(path)
                    dirty.add("c:" + path)
                else:
                    added.append(path)
                    self._dirs.setdefault(directory, set()).add(path)
                    dirty.update(("e:" + path, "c:" + path, "d:" + directory))
                    stem = resolve_python.module_stem(path)
                    if stem is not None:
                        dirty.add("m:" + stem)
                language = language_for(path)
                if language is not None:
                    reparsed.append(path)
                    if self._parse(path, language, data, dirty) or not existed:
                        to_resolve.add(path)
            self._note_config(path, data, dirty)
        for key in dirty:
            to_resolve.update(self._probe_index.get(key, ()))
        to_resolve.difference_update(removed)
        reresolved = sorted(p for p in to_resolve if p in self._imports)
        memo: dict[Hashable, tuple[Any, frozenset[str]]] = {}
        for path in reresolved:
            self._resolve(path, memo)
        for path in removed:
            if not self._dependents.get(path):
                self._dependents.pop(path, None)
        if added or removed or reresolved:
            self._order_memo = None
        return UpdateResult(
            tuple(added), tuple(removed), tuple(modified), tuple(reparsed), tuple(reresolved)
        )

    def _parse(self, path: str, language: str, data: bytes, dirty: set[str]) -> bool:
        """Parse (or fetch from the cache) one file; True if its resolution may have changed."""
        digest = hashlib.sha256(data).hexdigest()
        self._digest[path] = digest
        parsed = self.cache.imports(language, digest, lambda: extract_imports(language, data))
        changed = self._imports.get(path) != parsed
        self._imports[path] = parsed
        if language == "go":
            tags = self.tags(path)
            unit = (
                parsed.package,
                frozenset(d.name for d in tags.definitions if d.kind in _GO_UNIT_KINDS),
            )
            if self._go_units.get(path) != unit:
                dirty.add("defs:" + dirname(path))
                self._go_units[path] = unit
            changed = True  # what it references from its own package may have changed
        return changed

    def _note_config(self, path: str, data: bytes | None, dirty: set[str]) -> None:
        name = _basename(path)
        if name == "go.mod":
            (self._go_mod_files.add if data is not None else self._go_mod_files.discard)(path)
            self._go_modules_memo = None
            dirty.add("gomods")
        elif name == "Cargo.toml":
            (self._cargo_files.add if data is not None else self._cargo_files.discard)(path)
            self._crates_memo = None
            dirty.add("crates")
        elif name == ".gitignore":
            if data is None:
                self._gitignores.pop(path, None)
            else:
                self._gitignores[path] = data
            self._ignore = IgnoreRules(self._gitignores)

    def _forget(self, path: str) -> None:
        del self._content[path]
        self._digest.pop(path, None)
        siblings = self._dirs.get(dirname(path))
        if siblings is not None:
            siblings.discard(path)
            if not siblings:
                del self._dirs[dirname(path)]
        self._imports.pop(path, None)
        self._go_units.pop(path, None)
        if path in self._targets:
            self._store(path, (), (), frozenset())
            del self._targets[path]
            del self._unresolved[path]
            del self._probes[path]

    def _resolve(self, path: str, memo: dict[Hashable, tuple[Any, frozenset[str]]]) -> None:
        parsed = self._imports[path]
        view = _View(self, memo)
        targets, unresolved = _RESOLVERS[parsed.language](path, parsed, view)
        self._store(path, tuple(sorted(targets)), tuple(sorted(unresolved)), frozenset(view.read))

    def _store(
        self,
        path: str,
        targets: tuple[str, ...],
        unresolved: tuple[Import, ...],
        probes: frozenset[str],
    ) -> None:
        old_targets = self._targets.get(path, ())
        if old_targets != targets:
            for t in set(old_targets) - set(targets):
                users = self._dependents.get(t)
                if users is not None:
                    users.discard(path)
                    if not users and t not in self._content:
                        del self._dependents[t]
            for t in targets:
                self._dependents.setdefault(t, set()).add(path)
            self._order_memo = None
        self._targets[path] = targets
        self._unresolved[path] = unresolved
        old_probes = self._probes.get(path)
        index = self._probe_index
        if old_probes:
            for key in old_probes - probes:
                readers = index.get(key)
                if readers is not None:
                    readers.discard(path)
                    if not readers:
                        del index[key]
            added: Iterable[str] = probes - old_probes
        else:
            added = probes  # a new file (every file of a full build)
        for key in added:
            readers = index.get(key)
            if readers is None:
                index[key] = {path}
            else:
                readers.add(path)
        self._probes[path] = probes

    def _go_modules(self) -> tuple[tuple[str, str], ...]:
        if self._go_modules_memo is None:
            found = []
            for path in sorted(self._go_mod_files):
                module = resolve_go.module_path(self._content[path])
                if module:
                    found.append((module, dirname(path)))
            self._go_modules_memo = tuple(found)
        return self._go_modules_memo

    def _crates(self) -> dict[str, str]:
        if self._crates_memo is None:
            found: dict[str, str] = {}
            for path in sorted(self._cargo_files):
                name = resolve_rust.crate_name(self._content[path])
                if name and name not in found:
                    found[name] = dirname(path)
            self._crates_memo = found
        return self._crates_memo

    # -- reading ---------------------------------------------------------------------------------

    @property
    def files(self) -> tuple[str, ...]:
        """The source files in the graph, sorted."""
        return tuple(sorted(self._imports))

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and path in self._imports

    def __len__(self) -> int:
        return len(self._imports)

    def _check(self, path: str) -> str:
        norm = normalize(path)
        if norm not in self._imports:
            raise UnknownFileError(path)
        return norm

    def language(self, path: str) -> str:
        return self._imports[self._check(path)].language

    def digest(self, path: str) -> str:
        return self._digest[self._check(path)]

    def imports(self, path: str) -> tuple[Import, ...]:
        return self._imports[self._check(path)].imports

    def unresolved(self, path: str) -> tuple[Import, ...]:
        """Imports of ``path`` naming nothing in the workspace (libraries, or mistakes)."""
        return self._unresolved[self._check(path)]

    def direct_dependencies(self, path: str) -> tuple[str, ...]:
        return self._targets[self._check(path)]

    def direct_dependents(self, path: str) -> tuple[str, ...]:
        return tuple(sorted(self._dependents.get(self._check(path), ())))

    def edges(self) -> tuple[Edge, ...]:
        return tuple(Edge(s, t) for s in sorted(self._targets) for t in self._targets[s])

    def dependencies(self, path: str, depth: int | None = None) -> tuple[Reached, ...]:
        """Files ``path`` depends on, transitively (up to ``depth`` steps), nearest first."""
        return reach(self._targets, self._check(path), depth)

    def dependents(self, path: str, depth: int | None = None) -> tuple[Reached, ...]:
        """Files depending on ``path``, transitively (up to ``depth`` steps), nearest first."""
        start = self._check(path)
        return reach(self._dependents, start, depth)

    def topological_order(self, paths: Iterable[str]) -> tuple[str, ...]:
        """``paths`` ordered so each file comes after the files it depends on (also through
        files outside the set). The files of an import cycle are kept together, by path."""
        wanted = {self._check(p) for p in paths}
        if self._order_memo is None:
            ordered = dependency_order(self._targets, self._imports)
            self._order_memo = {p: i for i, p in enumerate(p for comp in ordered for p in comp)}
        memo = self._order_memo
        return tuple(sorted(wanted, key=lambda p: memo[p]))

    def tags(self, path: str) -> FileTags:
        """Definitions and references of a file (parsed on first use, cached by content)."""
        norm = self._check(path)
        language = self._imports[norm].language
        data = self._content[norm]
        return self.cache.tags(language, self._digest[norm], lambda: extract_tags(language, data))

    def related_files(
        self,
        seeds: Iterable[str],
        budget_tokens: int,
        token_counter: Callable[[str], int] | None = None,
        *,
        include_seeds: bool = False,
    ) -> RepoMap:
        """Files related to ``seeds`` ranked by personalized PageRank, rendered as a repo map
        of their definitions that fits ``budget_tokens``."""
        from projections.depgraph.rank import related_files

        return related_files(
            self,
            [self._check(s) for s in seeds],
            budget_tokens,
            token_counter,
            include_seeds=include_seeds,
        )

    def to_json(self) -> dict[str, Any]:
        """``{"root", "nodes", "edges"}`` for ``coder-es deps --json`` (sorted, stable)."""
        nodes = []
        for path in sorted(self._imports):
            nodes.append(
                {
                    "id": path,
                    "language": self._imports[path].language,
                    "imports": len(self._imports[path].imports),
                    "unresolved": [
                        {"line": i.line, "module": ("." * i.level) + i.module}
                        for i in self._unresolved.get(path, ())
                    ],
                }
            )
        edges = [{"source": e.source, "target": e.target} for e in self.edges()]
        return {"root": self.root_name, "nodes": nodes, "edges": edges}
