"""MCP without a server: [mcp_servers] validation and trust, tool names and schemas as providers
accept them, and how annotations and rules decide a call."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coder_es.config import ConfigError, load_config
from coder_es.config.trust import TrustStore, digest
from coder_es.config.values import McpServerConfig
from coder_es.mcp.catalog import effect_of, offered_name, sanitize_schema
from coder_es.permissions.policy import Policy
from coder_es.permissions.rules import RuleSyntaxError, parse_rule
from coder_es.permissions.subject import Subject

PROVIDER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _load(tmp_path: Path, user: str = "", project: str = ""):  # type: ignore[no-untyped-def]
    ws = tmp_path / "ws"
    (ws / ".coder-es").mkdir(parents=True, exist_ok=True)
    xdg = tmp_path / "xdg"
    (xdg / "coder-es").mkdir(parents=True, exist_ok=True)
    (xdg / "coder-es" / "config.toml").write_text(user)
    if project:
        (ws / ".coder-es" / "config.toml").write_text(project)
    env = {"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path)}
    return ws, env, lambda: load_config(ws, env)


def test_servers_are_read_with_every_setting(tmp_path: Path) -> None:
    _, _, load = _load(
        tmp_path,
        """
[mcp_servers.docs]
command = "docs-mcp"
args = ["--stdio", ""]
env = { DOCS_TOKEN = "abc" }
cwd = "/srv"
startup_timeout_s = 5
tool_timeout_s = 2.5
enabled_tools = ["search", "fetch"]
disabled_tools = ["fetch"]

[mcp_servers.remote]
url = "https://mcp.example/mcp"
headers = { Authorization = "Bearer xyz" }
enabled = false
""",
    )
    config = load()
    docs, remote = config.mcp_servers["docs"], config.mcp_servers["remote"]
    assert (docs.kind, docs.command, docs.args, dict(docs.env), docs.cwd) == (
        "stdio",
        "docs-mcp",
        ("--stdio", ""),
        {"DOCS_TOKEN": "abc"},
        "/srv",
    )
    assert (docs.startup_timeout_s, docs.tool_timeout_s) == (5.0, 2.5)
    assert [docs.offers(t) for t in ("search", "fetch", "other")] == [True, False, False]
    assert (remote.kind, remote.url, dict(remote.headers), remote.enabled) == (
        "http",
        "https://mcp.example/mcp",
        {"Authorization": "Bearer xyz"},
        False,
    )
    # What is recorded or shown names the secrets, never their values.
    assert "abc" not in repr(docs.describe()) and "xyz" not in repr(remote.describe())
    assert "abc" not in repr(docs) and "xyz" not in repr(remote)


def test_mistakes_are_named_with_file_and_line(tmp_path: Path) -> None:
    _, _, load = _load(
        tmp_path,
        """
[mcp_servers.both]
command = "x"
url = "https://a.example"

[mcp_servers.none]
args = ["y"]

[mcp_servers."bad__name"]
command = "z"

[mcp_servers.typo]
comand = "z"
tool_timeout_s = "slow"
""",
    )
    with pytest.raises(ConfigError) as caught:
        load()
    text = str(caught.value)
    assert "mcp_servers.both: has both 'command' and 'url'" in text
    assert "mcp_servers.none: has neither 'command' nor 'url'" in text
    assert "bad__name" in text and "no '__'" in text
    assert "unknown key 'comand'; did you mean 'command'?" in text
    assert "tool_timeout_s: expected a number of at least 0, got a string" in text
    assert "config.toml:3:" in text


def test_an_untrusted_project_cannot_add_servers_until_trusted(tmp_path: Path) -> None:
    project = '[mcp_servers.evil]\ncommand = "curl"\nargs = ["https://evil.example"]\n'
    ws, env, load = _load(tmp_path, project=project)
    config = load()
    assert config.mcp_servers == {}
    assert [i.path for i in config.ignored] == ["mcp_servers.evil.command", "mcp_servers.evil.args"]
    path = ws / ".coder-es" / "config.toml"
    TrustStore(environ=env).trust(path, digest(path.read_bytes()))
    assert load().mcp_servers["evil"].command == "curl"


def test_rules_name_mcp_tools(tmp_path: Path) -> None:
    _, _, load = _load(
        tmp_path,
        '[permissions.rules]\n"mcp__docs__*" = "allow"\nmcp__docs__delete = "deny"\n',
    )
    rules = {(r.tool, r.action) for r in load().permissions.rules}
    assert rules == {("mcp__docs__*", "allow"), ("mcp__docs__delete", "deny")}
    assert parse_rule("mcp__docs__*", "allow").tool == "mcp__docs__*"
    with pytest.raises(RuleSyntaxError):
        parse_rule("mcp__nope", "allow")


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=200))
def test_offered_names_are_valid_deterministic_and_distinct(server: str, tool: str) -> None:
    name = offered_name(server, tool)
    assert PROVIDER_NAME.match(name)
    assert name == offered_name(server, tool)
    assert name != offered_name(server, tool + "x")


def test_a_name_that_fits_is_kept() -> None:
    assert offered_name("fs", "read_file") == "mcp__fs__read_file"
    long = offered_name("fs", "t" * 80)
    assert len(long) == 64 and long.startswith("mcp__fs__ttt")
    assert offered_name("fs", "get.file") != offered_name("fs", "get_file")


def test_schemas_become_object_schemas() -> None:
    assert sanitize_schema(None) == {"type": "object", "properties": {}}
    schema = sanitize_schema(
        {"$schema": "http://json-schema.org/draft-07/schema#", "anyOf": [{}], "required": "x"}
    )
    assert schema == {"type": "object", "properties": {}}
    kept = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert sanitize_schema(kept) == kept


def test_effects_follow_the_spec_defaults() -> None:
    assert effect_of({"readOnlyHint": True}) == "read_only"
    assert effect_of({"readOnlyHint": False, "destructiveHint": False}) == "write"
    assert effect_of({"readOnlyHint": False}) == "destructive"
    assert effect_of(None) == "destructive"


def _decide(policy: Policy, tool: str, effect: str) -> str:
    return policy.evaluate(tool, Subject("mcp", tool, effect=effect)).action


@pytest.mark.parametrize(
    ("agent", "effect", "action", "offered"),
    [
        ("build", "read_only", "allow", True),
        ("build", "write", "allow", True),
        ("build", "destructive", "ask", True),
        ("plan", "read_only", "allow", True),
        ("plan", "write", "deny", False),
        ("explore", "destructive", "deny", False),
    ],
)
def test_presets_decide_by_annotations(agent: str, effect: str, action: str, offered: bool) -> None:
    policy = Policy.for_agent(agent)
    assert _decide(policy, "mcp__s__t", effect) == action
    assert policy.offers_mcp("mcp__s__t", effect) is offered


def test_rules_override_the_preset_per_tool_and_per_server() -> None:
    rules = [parse_rule("mcp__s__*", "allow"), parse_rule("mcp__s__drop", "deny")]
    plan = Policy.for_agent("plan", rules)
    assert _decide(plan, "mcp__s__write_it", "write") == "allow"
    assert plan.offers_mcp("mcp__s__write_it", "write")
    assert _decide(plan, "mcp__s__drop", "destructive") == "deny"
    assert _decide(plan, "mcp__other__x", "write") == "deny"
    build = Policy.for_agent("build", [parse_rule("mcp__s__drop", "allow")])
    assert _decide(build, "mcp__s__drop", "destructive") == "allow"
    # A rule for one server's tools does not reach another server whose name extends it.
    assert _decide(Policy.for_agent("plan", rules), "mcp__s2__x", "write") == "deny"


def test_secrets_of_mcp_servers_are_redacted_from_the_record(tmp_path: Path) -> None:
    from coder_es.cli.context import with_mcp_secrets
    from coder_es.redaction import Redactor

    _, _, load = _load(
        tmp_path, '[mcp_servers.a]\ncommand = "x"\nenv = { TOKEN = "tok-1234567890" }\n'
    )
    redactor = with_mcp_secrets(Redactor.from_rules([]), load())
    assert redactor.redact_text("got tok-1234567890") == "got [REDACTED:mcp:mcp.a.env.TOKEN]"
    assert McpServerConfig(name="a").secrets() == []


@pytest.mark.parametrize("name", ["docs_", "_docs", "do__cs", "docs__", "_"])
def test_a_server_name_that_splits_two_ways_is_a_config_error(tmp_path: Path, name: str) -> None:
    """Issue 29 item 9: with ``docs_`` accepted, ``mcp__docs___delete_all`` was both
    ``docs``/``_delete_all`` and ``docs_``/``delete_all``, and a rule ``mcp__docs__*`` allowed
    the other server's tools."""
    _, _, load = _load(tmp_path, f'[mcp_servers."{name}"]\ncommand = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load()
    text = str(caught.value)
    assert f"'{name}'" in text and "mcp__SERVER__TOOL" in text


def test_names_that_split_one_way_are_accepted(tmp_path: Path) -> None:
    _, _, load = _load(tmp_path, '[mcp_servers."do_cs-2"]\ncommand = "x"\n')
    assert "do_cs-2" in load().mcp_servers


def test_two_tools_that_map_to_one_name_are_both_refused_and_named() -> None:
    from coder_es.mcp.catalog import server_entry, tool_entry, without_collisions

    def server(name: str, *tools: str) -> dict[str, object]:
        entries = [tool_entry(name, t, "", {}, None) for t in tools]
        return server_entry({"name": name}, "ready", tools=entries)

    # "a.b" is mapped to a name with a hash; a tool literally named like the mapping collides.
    mapped = offered_name("docs", "a.b").removeprefix("mcp__docs__")
    servers = [server("docs", "a.b", mapped, "search"), server("other", "x")]
    out = without_collisions(servers)
    assert [t["tool"] for t in out[0]["tools"]] == ["search"]
    assert "'a.b' of server 'docs'" in out[0]["error"] and repr(mapped) in out[0]["error"]
    assert out[1] == servers[1]


def test_a_client_server_with_an_ambiguous_name_is_not_started() -> None:
    import asyncio

    from coder_es.mcp.manager import McpManager

    manager = McpManager([McpServerConfig(name="docs_", command="definitely-not-run")])
    entries = asyncio.run(manager.catalog())
    assert entries is not None
    [entry] = entries
    assert entry["status"] == "failed" and "'docs_' refused" in entry["error"]
    assert manager.connections == {}
