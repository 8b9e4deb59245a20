"""Import resolution per language, on the sample projects in fixtures/projects."""

from __future__ import annotations

import pytest
from depgraph_helpers import PROJECTS, edges, unresolved

from projections.depgraph import DepGraph


@pytest.fixture(scope="module")
def python_app() -> DepGraph:
    return DepGraph.build(PROJECTS / "python_app")


def test_python_relative_absolute_and_nested_imports(python_app: DepGraph) -> None:
    got = edges(python_app)
    # ``from .models import User`` names the package; ``from . import util`` the module.
    assert ("app/core.py", "app/models/__init__.py") in got
    assert ("app/core.py", "app/util.py") in got
    # imports under TYPE_CHECKING and inside functions count, as they do for grimp
    assert ("app/core.py", "app/plugins/base.py") in got
    assert ("app/util.py", "app/models/__init__.py") in got
    # ``from ..util import log`` two levels up; ``import app.models.user`` the module itself
    assert ("app/models/group.py", "app/util.py") in got
    assert ("app/plugins/base.py", "app/models/user.py") in got
    assert ("app/plugins/base.py", "app/core.py") in got
    # a wildcard import depends on the module it empties
    assert ("app/models/__init__.py", "app/models/group.py") in got
    # a script outside any package imports its neighbour and the package
    assert ("scripts/run.py", "scripts/helpers.py") in got
    assert ("scripts/run.py", "app/core.py") in got


def test_python_unresolved_are_libraries_and_escapes(python_app: DepGraph) -> None:
    assert unresolved(python_app, "app/util.py") == ["os", "json"]  # in line order
    # three dots from app/models climbs out of the workspace
    assert unresolved(python_app, "app/models/group.py") == ["...outside"]
    assert not python_app.unresolved("app/plugins/base.py")


def test_gitignore_and_vendored_dirs_are_skipped(python_app: DepGraph) -> None:
    files = set(python_app.files)
    assert "build/out.py" not in files  # ``build/``
    assert "app/skip.gen.py" not in files  # ``*.gen.py``
    assert "app/keep.gen.py" in files  # re-included by ``!keep.gen.py``
    assert not any(f.startswith(".venv/") for f in files)


def test_src_layout() -> None:
    graph = DepGraph.build(PROJECTS / "src_layout")
    assert edges(graph) == {
        ("src/mylib/__init__.py", "src/mylib/api.py"),
        ("src/mylib/api.py", "src/mylib/_impl/__init__.py"),
        ("tests/test_api.py", "src/mylib/__init__.py"),
        ("tests/test_api.py", "src/mylib/api.py"),
        ("tests/test_api.py", "tests/conftest.py"),
    }


def test_package_as_workspace_root_keeps_stdlib_names_external() -> None:
    graph = DepGraph.from_sources(
        {
            "__init__.py": b"from mypkg.abc import thing\n",
            "abc.py": b"thing = 1\n",
            "user.py": b"from abc import ABC\nimport mypkg\nfrom . import abc\n",
        },
        root_name="mypkg",
    )
    assert edges(graph) == {
        ("__init__.py", "abc.py"),
        ("user.py", "__init__.py"),
        ("user.py", "abc.py"),
    }
    assert unresolved(graph, "user.py") == ["abc"]


def test_javascript_and_typescript() -> None:
    graph = DepGraph.build(PROJECTS / "web")
    assert edges(graph) == {
        # relative with extension probing and a CommonJS require of an .mjs file
        ("legacy/app.js", "legacy/util.mjs"),
        # tsconfig paths (a wildcard and an exact alias), an export-from of a directory index,
        # a dynamic import written with .js for a .ts file (TypeScript's ESM convention)
        ("src/main.ts", "src/config.ts"),
        ("src/main.ts", "src/lib/index.ts"),
        ("src/main.ts", "src/ui/index.tsx"),
        ("src/main.ts", "src/ui/render.ts"),
        ("src/main.ts", "src/lazy.ts"),
        ("src/ui/index.tsx", "src/ui/render.ts"),
        # baseUrl: ``src/config`` from the tsconfig's directory
        ("src/ui/render.ts", "src/config.ts"),
    }
    assert unresolved(graph, "src/main.ts") == ["react"]
    assert unresolved(graph, "legacy/app.js") == ["./missing"]
    assert not any("node_modules" in f for f in graph.files)


def test_go_module_paths_and_same_package_files() -> None:
    graph = DepGraph.build(PROJECTS / "gosvc")
    assert edges(graph) == {
        ("main.go", "internal/store/store.go"),
        ("main.go", "internal/store/db.go"),
        ("main.go", "helper.go"),  # same package, calls helper()
        ("internal/store/store.go", "internal/store/db.go"),  # uses DB and newDB
        ("internal/store/store_test.go", "internal/store/store.go"),
    }
    assert unresolved(graph, "main.go") == ["fmt"]


def test_rust_mod_and_use() -> None:
    graph = DepGraph.build(PROJECTS / "rustcrate")
    assert edges(graph) == {
        ("src/lib.rs", "src/net/mod.rs"),  # pub mod net; -> net/mod.rs
        ("src/lib.rs", "src/util.rs"),
        ("src/lib.rs", "src/net/client.rs"),  # pub use crate::net::client::Client
        ("src/net/mod.rs", "src/net/client.rs"),
        ("src/net/mod.rs", "src/lib.rs"),  # use super::Config
        ("src/net/client.rs", "src/util.rs"),  # use crate::util::{helper, Thing}
        ("src/net/client.rs", "src/lib.rs"),  # use super::super::Config
        ("src/util.rs", "src/util/inner/deep.rs"),  # mod inner { mod deep; }
        ("tests/it.rs", "src/net/client.rs"),  # the crate by its name
    }
    assert unresolved(graph, "src/net/client.rs") == ["std::collections::HashMap"]


def test_to_json_is_sorted_and_complete() -> None:
    graph = DepGraph.build(PROJECTS / "gosvc")
    data = graph.to_json()
    assert [n["id"] for n in data["nodes"]] == sorted(graph.files)
    assert data["edges"] == sorted(data["edges"], key=lambda e: (e["source"], e["target"]))
    assert {"source": "main.go", "target": "helper.go"} in data["edges"]
    main = next(n for n in data["nodes"] if n["id"] == "main.go")
    assert main["language"] == "go"
    assert main["unresolved"] == [{"line": 4, "module": "fmt"}]
    assert DepGraph.build(PROJECTS / "gosvc").to_json() == data
