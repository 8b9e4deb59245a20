"""Dependencies, dependents, topological order, related files and errors."""

from __future__ import annotations

import pytest
from depgraph_helpers import PROJECTS

from projections.depgraph import BadPathError, DepGraph, Reached, UnknownFileError

CHAIN = {
    "a.py": b"import b\n",
    "b.py": b"import c\n",
    "c.py": b"import d\n",
    "d.py": b"def base():\n    pass\n",
    # a cycle: x <-> y, both using d
    "x.py": b"import y\nimport d\n",
    "y.py": b"import x\n",
}


@pytest.fixture
def chain() -> DepGraph:
    return DepGraph.from_sources(CHAIN, root_name="ws")


def test_dependencies_and_dependents_with_depth(chain: DepGraph) -> None:
    assert chain.dependencies("a.py") == (
        Reached(1, "b.py"),
        Reached(2, "c.py"),
        Reached(3, "d.py"),
    )
    assert chain.dependencies("a.py", depth=2) == (Reached(1, "b.py"), Reached(2, "c.py"))
    assert chain.dependents("d.py", depth=1) == (Reached(1, "c.py"), Reached(1, "x.py"))
    assert [r.path for r in chain.dependents("d.py")] == ["c.py", "x.py", "b.py", "y.py", "a.py"]
    # a cycle does not loop and does not list the start
    assert chain.dependencies("x.py") == (Reached(1, "d.py"), Reached(1, "y.py"))


def test_topological_order_puts_definitions_first_and_keeps_cycles_together(
    chain: DepGraph,
) -> None:
    assert chain.topological_order(["a.py", "d.py", "b.py", "c.py"]) == (
        "d.py",
        "c.py",
        "b.py",
        "a.py",
    )
    # a and d are ordered through files outside the set
    assert chain.topological_order(["a.py", "d.py"]) == ("d.py", "a.py")
    order = chain.topological_order(chain.files)
    assert order.index("d.py") < order.index("x.py")
    assert abs(order.index("x.py") - order.index("y.py")) == 1
    assert order == DepGraph.from_sources(
        dict(reversed(CHAIN.items())), root_name="ws"
    ).topological_order(reversed(chain.files))


def test_related_files_rank_neighbours_first_and_fit_the_budget() -> None:
    graph = DepGraph.build(PROJECTS / "python_app")
    repo_map = graph.related_files(["app/plugins/base.py"], budget_tokens=10_000)
    paths = [f.path for f in repo_map.files]
    assert "app/plugins/base.py" not in paths  # the seed is already in the conversation
    # direct dependencies of the seed outrank files two steps away
    assert paths.index("app/core.py") < paths.index("app/util.py")
    assert paths.index("app/models/user.py") < paths.index("app/models/group.py")
    scores = [f.score for f in repo_map.files]
    assert scores == sorted(scores, reverse=True)
    assert "app/core.py:\n" in repo_map.text and "class Engine:" in repo_map.text
    # reached only through a file that imports a dependency of the seed: ranked last
    assert paths[-1] == "scripts/helpers.py"
    isolated = DepGraph.from_sources({"a.py": b"import b\n", "b.py": b"", "c.py": b""})
    assert [f.path for f in isolated.related_files(["a.py"], 1000).files] == ["b.py"]

    for budget in (5, 20, 40, 80):
        small = graph.related_files(["app/plugins/base.py"], budget_tokens=budget)
        assert small.tokens <= budget
        assert [f.path for f in small.files] == paths[: len(small.files)]
    assert graph.related_files(["app/plugins/base.py"], budget_tokens=0).files == ()


def test_related_files_with_a_real_tokenizer_shape() -> None:
    graph = DepGraph.build(PROJECTS / "python_app")

    def words(text: str) -> int:  # a counter whose pieces do not add up exactly
        return len(text.split()) + 1

    repo_map = graph.related_files(["app/core.py"], budget_tokens=12, token_counter=words)
    assert repo_map.tokens == words(repo_map.text) <= 12
    assert repo_map.files


def test_repo_map_without_seeds_ranks_the_whole_repository() -> None:
    graph = DepGraph.build(PROJECTS / "python_app")
    repo_map = graph.related_files([], budget_tokens=10_000)
    assert {f.path for f in repo_map.files} == set(graph.files)
    assert repo_map.files[0].path in {"app/core.py", "app/util.py", "app/models/__init__.py"}


def test_unknown_files_and_bad_paths_are_usage_errors(chain: DepGraph) -> None:
    with pytest.raises(UnknownFileError, match=r"nope\.py"):
        chain.dependencies("nope.py")
    with pytest.raises(UnknownFileError):
        chain.related_files(["nope.py"], 100)
    for bad in ("/etc/passwd", "../outside.py", "a/../../x.py", ""):
        with pytest.raises(BadPathError):
            chain.update({bad: b"import a\n"})
    assert chain.dependencies("a.py")  # nothing was lost


def test_tags_come_from_the_grammar_queries() -> None:
    graph = DepGraph.build(PROJECTS / "rustcrate")
    tags = graph.tags("src/lib.rs")
    assert [(d.name, d.kind) for d in tags.definitions] == [
        ("net", "module"),
        ("util", "module"),
        ("Config", "class"),
    ]
    web = DepGraph.build(PROJECTS / "web")
    assert ("Config", "interface") in {
        (d.name, d.kind) for d in web.tags("src/config.ts").definitions
    }
    assert "render" in web.tags("src/ui/index.tsx").referenced_names()
