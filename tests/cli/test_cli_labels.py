"""Labels as a user sees them: one label names one node, everywhere; HEAD names the head."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import Cli, script, text, tool, turn

from coder_es.domain.refs import check_label_name, label_positions, labels_by_node
from coder_es.errors import UsageError


def _session(cli: Cli, tmp_path: Path) -> tuple[str, list[str]]:
    s = script(tmp_path / "s.json", turn(tool("bash", command="echo hi")), turn(text("done")))
    r, sid = cli.run_script("look", s)
    assert r.code == 0, r.err
    nodes = [n["id"] for n in cli("tree", sid, "--json").json_lines()[0]["nodes"]]
    return sid, nodes


def test_moving_a_label_says_so_and_every_view_shows_it_once(cli: Cli, tmp_path: Path) -> None:
    sid, nodes = _session(cli, tmp_path)
    first, last = nodes[0], nodes[-1]
    r = cli("label", sid, first, "debug-off")
    assert (r.code, r.out.strip()) == (0, f"labelled {first} debug-off")
    r = cli("label", sid, last, "debug-off")
    assert (r.code, r.out.strip()) == (0, f"moved label debug-off from {first} to {last}")
    r = cli("label", sid, last, "debug-off", "--json")
    assert r.json_lines() == [{"name": "debug-off", "node": last, "previous": last}]

    tree = cli("tree", sid, "--json").json_lines()[0]
    assert tree["labels"] == {"debug-off": last}
    by_node = {n["id"]: n["labels"] for n in tree["nodes"]}
    assert by_node[first] == [] and by_node[last] == ["debug-off"]
    assert cli("tree", sid).out.count("[debug-off]") == 1

    md = cli("export", sid, "--format", "md").out
    md_tree = md.split("## Conversation tree")[1].split("## Transcript")[0]
    assert md_tree.count("debug-off") == 1 and f"{last} [debug-off]" in md_tree
    html = cli("export", sid, "--format", "html").out
    svg = html[html.index("<svg") : html.index("</svg>")]
    assert svg.count("debug-off") == 1 and f"{last} [debug-off]" in svg
    # The branch filter resolves the label where it is now.
    branch = cli("export", sid, "--format", "jsonl", "--branch", "debug-off")
    assert branch.code == 0
    trailer = [json.loads(x) for x in branch.out.splitlines()][-1]
    assert str(trailer).count(last)


def test_a_label_that_looks_like_a_node_reference_is_refused(cli: Cli, tmp_path: Path) -> None:
    sid, nodes = _session(cli, tmp_path)
    for name in ("7", nodes[0], "-2", "HEAD", " "):
        r = cli("label", sid, nodes[0], name)
        assert r.code == 2, name
        assert "label" in r.err and "Traceback" not in r.err
    assert cli("tree", sid, "--json").json_lines()[0]["labels"] == {}


def test_head_names_the_head_everywhere(cli: Cli, tmp_path: Path) -> None:
    sid, nodes = _session(cli, tmp_path)
    r = cli("label", sid, "HEAD", "tip")
    assert r.out.strip() == f"labelled {nodes[-1]} tip"
    r = cli("diff", sid, nodes[0], "HEAD", "--json")
    assert r.code == 0 and r.json_lines()[0]["b"] == nodes[-1]
    r = cli("rewind", sid, nodes[0], "--conversation")
    assert r.code == 0
    assert cli("tree", sid, "--json").json_lines()[0]["head"] == nodes[0]
    r = cli("diff", sid, "HEAD", "tip", "--json")
    assert (r.json_lines()[0]["a"], r.json_lines()[0]["b"]) == (nodes[0], nodes[-1])
    assert cli("export", sid, "--format", "md", "--branch", "HEAD").code == 0


def test_label_rules() -> None:
    assert label_positions([("a", "1"), ("b", "2"), ("a", "3"), ("a", "3")]) == {
        "b": "2",
        "a": "3",
    }
    assert labels_by_node({"b": "2", "a": "3", "c": "3"}) == {"2": ["b"], "3": ["a", "c"]}
    for bad in ("12", "-1", "HEAD", "", "  "):
        try:
            check_label_name(bad)
        except UsageError:
            continue
        raise AssertionError(bad)
    check_label_name("v1")
    check_label_name("head")
