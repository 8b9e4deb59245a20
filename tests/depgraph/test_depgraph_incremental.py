"""Incremental updates: only changed files are re-parsed, and the result equals a rebuild."""

from __future__ import annotations

import shutil
from pathlib import Path

from depgraph_helpers import PROJECTS, edges, unresolved
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.depgraph import DepGraph, ParseCache


def test_new_file_makes_an_unresolved_import_resolve_and_deleting_it_undoes_that() -> None:
    graph = DepGraph.from_sources(
        {"pkg/__init__.py": b"", "pkg/a.py": b"from pkg import later\nimport os\n"}, root_name="ws"
    )
    assert ("pkg/a.py", "pkg/__init__.py") in edges(graph)
    result = graph.update({"pkg/later.py": b"x = 1\n"})
    assert result.added == ("pkg/later.py",)
    assert result.reparsed == ("pkg/later.py",)  # a.py is not parsed again ...
    assert "pkg/a.py" in result.reresolved  # ... but re-resolved: it had looked for later.py
    assert ("pkg/a.py", "pkg/later.py") in edges(graph)
    assert graph.direct_dependents("pkg/later.py") == ("pkg/a.py",)
    graph.update({"pkg/later.py": None})
    assert ("pkg/a.py", "pkg/later.py") not in edges(graph)
    assert ("pkg/a.py", "pkg/__init__.py") in edges(graph)
    assert "pkg/later.py" not in graph


def test_an_edit_that_keeps_the_imports_resolves_nothing() -> None:
    graph = DepGraph.build(PROJECTS / "python_app")
    before = edges(graph)
    text = b"from . import util\nfrom .models import User, Group\n\n\ndef changed():\n    pass\n"
    graph.update({"app/core.py": text})
    result = graph.update({"app/core.py": text + b"# only a comment more\n"})
    assert result.reparsed == ("app/core.py",)
    assert result.reresolved == ()
    assert ("app/core.py", "app/plugins/base.py") not in edges(graph)
    assert edges(graph) <= before


def test_adding_an_init_turns_a_directory_into_a_package() -> None:
    graph = DepGraph.from_sources(
        {"tools/a.py": b"import b\nimport tools.b\n", "tools/b.py": b""}, root_name="ws"
    )
    # Not a package: ``import b`` is the neighbour, ``tools.b`` resolves from the root anyway.
    assert edges(graph) == {("tools/a.py", "tools/b.py")}
    graph.update({"tools/__init__.py": b""})
    assert edges(graph) == {("tools/a.py", "tools/b.py")}
    assert unresolved(graph, "tools/a.py") == ["b"]  # now absolute: there is no top-level b


def test_tsconfig_change_re_resolves_its_users() -> None:
    graph = DepGraph.build(PROJECTS / "web")
    config = (PROJECTS / "web" / "tsconfig.json").read_bytes()
    result = graph.update({"tsconfig.json": config.replace(b'"src/*"', b'"src/ui/*"')})
    assert result.reparsed == ()
    assert set(result.reresolved) >= {"src/main.ts", "src/ui/render.ts"}
    assert ("src/main.ts", "src/config.ts") not in edges(graph)
    assert "@/config" in unresolved(graph, "src/main.ts")


def test_go_mod_rename_and_go_definitions_moving_between_files() -> None:
    graph = DepGraph.build(PROJECTS / "gosvc")
    graph.update({"go.mod": b"module example.com/other\n"})
    assert ("main.go", "internal/store/store.go") not in edges(graph)
    graph.update({"go.mod": b"module example.com/svc\n"})
    assert ("main.go", "internal/store/store.go") in edges(graph)
    # newDB moves from db.go to store.go: store.go no longer needs db.go for it, but DB stays.
    graph.update(
        {
            "internal/store/db.go": b"package store\n\ntype DB struct{}\n",
            "internal/store/store.go": b"package store\n\nfunc Open() *DB { return newDB() }\n"
            b"\nfunc newDB() *DB { return &DB{} }\n",
        }
    )
    assert ("internal/store/store.go", "internal/store/db.go") in edges(graph)
    graph.update({"internal/store/db.go": b"package store\n\nfunc unrelated() {}\n"})
    assert ("internal/store/store.go", "internal/store/db.go") not in edges(graph)


def test_gitignore_change_hides_and_restores_files(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(PROJECTS / "python_app", root)
    graph = DepGraph.build(root)
    assert "scripts/run.py" in graph
    (root / ".gitignore").write_text("build/\nscripts/\n")
    graph.update({".gitignore": (root / ".gitignore").read_bytes()})
    assert "scripts/run.py" not in graph
    assert "app/skip.gen.py" in graph  # no longer ignored
    (root / ".gitignore").write_text("build/\n")
    graph.update({".gitignore": (root / ".gitignore").read_bytes()})
    assert ("scripts/run.py", "app/core.py") in edges(graph)
    assert graph.to_json() == DepGraph.build(root).to_json()


def test_ignored_and_unknown_paths_in_changes_are_skipped() -> None:
    graph = DepGraph.build(PROJECTS / "python_app")
    result = graph.update(
        {"node_modules/x/index.js": b"", "build/new.py": b"import app\n", "README.md": b"hi"}
    )
    assert result.added == () and result.reparsed == ()


def test_the_parse_cache_is_shared_between_graphs() -> None:
    cache = ParseCache()
    DepGraph.build(PROJECTS / "python_app", cache)
    misses = cache.misses
    second = DepGraph.build(PROJECTS / "python_app", cache)
    assert cache.misses == misses  # a second branch/session parses nothing again
    assert second.to_json() == DepGraph.build(PROJECTS / "python_app").to_json()


# -- property: incremental == full rebuild -----------------------------------------------------

# Modules that shadow each other (``sub.py`` beside ``sub/``, stubs beside sources) check that
# adding or removing any one of a module's files re-resolves its importers.
_PY_PATHS = ["pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/sub/__init__.py", "pkg/sub/c.py",
             "src/lib2/__init__.py", "src/lib2/d.py", "tools/e.py", "tools/f.py", "pkg/sub.py",
             "pkg/b.pyi", "pkg/a/__init__.pyi", "pkg/a/c.py"]  # fmt: skip
_PY_IMPORTS = ["import pkg.a", "from pkg import b", "from pkg import sub", "from . import c",
               "from .sub import c", "from .. import a", "import lib2.d", "from lib2 import d",
               "import e", "import f", "from .b import *", "import os",
               "from pkg.a import c", "import pkg.sub.c"]  # fmt: skip
_TS_PATHS = ["web/a.ts", "web/b/index.ts", "web/c.js", "web/d.tsx"]
_TS_IMPORTS = ["./a", "../a", "@/b", "./b", "./c.js", "./d", "react", "lib/c"]
_GO_PATHS = ["cmd/main.go", "lib/x.go", "lib/y.go", "lib/x_test.go"]
_GO_NAMES = ["Alpha", "Beta", "Gamma"]
_RS_PATHS = ["src/lib.rs", "src/m.rs", "src/m/n.rs", "src/m/mod.rs"]
_RS_ITEMS = ["mod m;", "mod n;", "use crate::m::n::Item;", "use super::Thing;", "use self::n;"]


def _python() -> st.SearchStrategy[tuple[str, bytes]]:
    body = st.lists(st.sampled_from(_PY_IMPORTS), max_size=4).map(lambda xs: "\n".join(xs) + "\n")
    return st.tuples(st.sampled_from(_PY_PATHS), body.map(str.encode))


def _typescript() -> st.SearchStrategy[tuple[str, bytes]]:
    body = st.lists(st.sampled_from(_TS_IMPORTS), max_size=3).map(
        lambda xs: "".join(f"import x{i} from '{x}';\n" for i, x in enumerate(xs))
    )
    return st.tuples(st.sampled_from(_TS_PATHS), body.map(str.encode))


def _tsconfig() -> st.SearchStrategy[tuple[str, bytes]]:
    target = st.sampled_from(["b/*", "c/*", "*"])
    base = st.sampled_from(['"baseUrl": ".",', ""])
    return st.tuples(
        st.just("web/tsconfig.json"),
        st.builds(
            lambda t, b: f'{{"compilerOptions": {{{b} "paths": {{"@/*": ["{t}"]}}}}}}', target, base
        ).map(str.encode),
    )


def _go() -> st.SearchStrategy[tuple[str, bytes]]:
    def render(package: str, imports: list[str], defines: list[str], calls: list[str]) -> bytes:
        lines = [f"package {package}", ""]
        lines += [f'import "{i}"' for i in imports]
        lines += [f"func {d}() {{}}" for d in defines]
        lines += [f"func use{n}() {{ {c}() }}" for n, c in enumerate(calls)]
        return ("\n".join(lines) + "\n").encode()

    return st.tuples(
        st.sampled_from(_GO_PATHS),
        st.builds(
            render,
            st.sampled_from(["lib", "main", "lib_test"]),
            st.lists(
                st.sampled_from(["example.com/m/lib", "example.com/n/lib", "fmt"]), max_size=2
            ),
            st.lists(st.sampled_from(_GO_NAMES), max_size=2, unique=True),
            st.lists(st.sampled_from(_GO_NAMES), max_size=2),
        ),
    )


def _rust() -> st.SearchStrategy[tuple[str, bytes]]:
    body = st.lists(st.sampled_from(_RS_ITEMS), max_size=3).map(lambda xs: "\n".join(xs) + "\n")
    return st.tuples(st.sampled_from(_RS_PATHS), body.map(str.encode))


_CONFIGS = st.one_of(
    _tsconfig(),
    st.tuples(
        st.just("go.mod"), st.sampled_from([b"module example.com/m\n", b"module example.com/n\n"])
    ),
    st.tuples(st.just("Cargo.toml"), st.just(b'[package]\nname = "k"\n')),
    st.tuples(st.just(".gitignore"), st.sampled_from([b"", b"tools/\n", b"*.js\n", b"lib/y.go\n"])),
)
_WRITE = st.one_of(_python(), _typescript(), _go(), _rust(), _CONFIGS)
_ALL_PATHS = (
    _PY_PATHS
    + _TS_PATHS
    + _GO_PATHS
    + _RS_PATHS
    + ["web/tsconfig.json", "go.mod", "Cargo.toml", ".gitignore"]
)
_DELETE = st.tuples(st.sampled_from(_ALL_PATHS), st.none())
_BATCH = st.lists(st.one_of(_WRITE, _WRITE, _DELETE), min_size=1, max_size=4).map(dict)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.lists(_WRITE, max_size=12).map(dict),
    batches=st.lists(_BATCH, min_size=1, max_size=6),
)
def test_incremental_updates_equal_a_full_rebuild(
    initial: dict[str, bytes], batches: list[dict[str, bytes | None]]
) -> None:
    cache = ParseCache()
    graph = DepGraph.from_sources(initial, root_name="ws", cache=cache)
    files: dict[str, bytes] = dict(initial)
    for batch in batches:
        graph.update(batch)
        for path, data in batch.items():
            if data is None:
                files.pop(path, None)
            else:
                files[path] = data
        rebuilt = DepGraph.from_sources(files, root_name="ws", cache=cache)
        assert graph.to_json() == rebuilt.to_json()
        assert graph.topological_order(graph.files) == rebuilt.topological_order(rebuilt.files)
