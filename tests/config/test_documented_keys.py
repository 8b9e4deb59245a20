"""Every key docs/configuration.md documents reaches what it is documented to change.

The tables of the reference and of the environment variables are read from the document itself:
a key documented without a probe here fails the first test, so a new key must say how it acts.
Each probe sets its key (in a user config file or the environment) and checks the object its
consumer uses: the provider built, the policy, the sandbox settings, the store opened, the
telemetry settings, the MCP servers started, the hooks run...
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coder_es.config import load_config
from coder_es.config.problems import ConfigError
from coder_es.config.values import Config

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# Sections whose tables are not keys (what trust does with them, tested in tests/core).
NOT_KEYS = ("## Workspace trust", "## Validation", "## Hot reload", "## Python API", "## Example")


def documented() -> list[str]:
    """``section:key`` for each row of a key table (``top:provider``, ``sandbox:writable``,
    ``env:CODER_ES_STORE``)."""
    out: list[str] = []
    section = ""
    skip = False
    for line in DOC.read_text().splitlines():
        if line.startswith("## ") or line.startswith("### "):
            skip = line.startswith(NOT_KEYS)
            heading = line.lstrip("#").strip()
            if heading == "Top level":
                section = "top"
            elif heading == "Environment variables":
                section = "env"
            else:
                match = re.match(r"`\[+([a-z_]+)", heading)
                section = match.group(1) if match else heading
            continue
        if skip or not line.startswith("| `"):
            continue
        names = re.findall(r"`([^`]+)`", line.split("|")[1])
        out.append(f"{section}:{', '.join(names)}")
    return out


class Probe:
    """A workspace and a user config for one probe."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.workspace = tmp / "ws"
        self.workspace.mkdir()
        self.home = tmp / "home"
        self.environ: dict[str, str] = {
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
        }

    def config(self, toml: str = "", **environ: str) -> Config:
        path = self.home / ".config" / "coder-es" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(toml)
        return load_config(self.workspace, environ={**self.environ, **environ})


def _provider(p: Probe, toml: str, name: str, **environ: str) -> Any:
    """The provider ``run``, ``chat``, ``acp`` and ``serve`` build (their factory)."""
    from coder_es.service.api import configured_provider_factory

    config = p.config(toml, **environ)
    return configured_provider_factory(config)(name, "m")


def _run_choice(config: Config) -> tuple[str | None, str | None]:
    from coder_es.cli.run import _provider as choose

    return choose(argparse.Namespace(script=None), config, False)


def _policy(config: Config) -> Any:
    from coder_es.clients.runtime import rules_of
    from coder_es.permissions.policy import Policy

    return Policy.for_agent(config.agent, rules_of(config), config.permissions.default)


def _decision(policy: Any, tool: str, subject: Any) -> str:
    return str(policy.evaluate(tool, subject).action)


def _bash(command: str) -> Any:
    from coder_es.permissions.subject import Subject

    return Subject("command", command)


def _sandbox(config: Config) -> Any:
    from coder_es.sandbox import SandboxSettings

    s = config.sandbox
    return SandboxSettings.configured(s.mode, s.network, s.read_only, s.writable)


def _mcp(p: Probe, body: str) -> Any:
    config = p.config(f"[mcp_servers.docs]\n{body}\n")
    return config.mcp_servers["docs"]


def _agent(p: Probe, body: str) -> Any:
    from coder_es.permissions.subagents import agent_definitions

    config = p.config(f'[agents.reviewer]\ndescription = "reviews"\n{body}\n')
    return agent_definitions(config.agents)["reviewer"]


def _hook(p: Probe, body: str) -> Any:
    config = p.config(f'[[hooks.PreToolUse]]\ncommand = "true"\n{body}\n')
    return config.hooks[0]


def _telemetry(p: Probe, body: str, **environ: str) -> Any:
    from coder_es.telemetry.settings import TelemetrySettings

    config = p.config(f'[telemetry]\nendpoint = "http://127.0.0.1:4318"\n{body}\n')
    return TelemetrySettings.resolve(environ, config.telemetry)


def _store(p: Probe, toml: str = "", **environ: str) -> Any:
    return p.config(toml, **environ).store.to_store_config(p.environ | environ)


def _model(p: Probe, body: str) -> Any:
    return p.config(f'[models."my-model"]\n{body}\n').model_catalogue().info("my-model")


PROBES: dict[str, Callable[[Probe], None]] = {}


def probe(key: str) -> Callable[[Callable[[Probe], None]], Callable[[Probe], None]]:
    def register(fn: Callable[[Probe], None]) -> Callable[[Probe], None]:
        PROBES[key] = fn
        return fn

    return register


# ------------------------------------------------------------------ top level


@probe("top:provider")
def _(p: Probe) -> None:
    config = p.config('provider = "ollama"\n')
    assert _run_choice(config)[0] == "ollama"  # what `run` uses, no flag given


@probe("top:model")
def _(p: Probe) -> None:
    config = p.config('provider = "ollama"\nmodel = "qwen3-coder:30b"\n')
    assert _run_choice(config) == ("ollama", "qwen3-coder:30b")


@probe("top:agent")
def _(p: Probe) -> None:
    from coder_es.cli.context import configured_agent

    config = p.config('agent = "plan"\n')
    assert configured_agent(SimpleNamespace(settings=config)) == "plan"  # type: ignore[arg-type]
    assert _policy(config).shell_read_only


# ------------------------------------------------------------------ providers


@probe("providers:base_url")
def _(p: Probe) -> None:
    provider = _provider(p, '[providers.ollama]\nbase_url = "http://127.0.0.1:11999"\n', "ollama")
    assert provider.base_url.startswith("http://127.0.0.1:11999")


@probe("providers:api_key_env")
def _(p: Probe) -> None:
    toml = '[providers.anthropic]\napi_key_env = "MY_CLAUDE_KEY"\n'
    provider = _provider(p, toml, "anthropic", MY_CLAUDE_KEY="sk-ant-from-my-variable")
    assert provider.api_key == "sk-ant-from-my-variable"


@probe("providers:models")
def _(p: Probe) -> None:
    with pytest.raises(ConfigError):
        p.config('provider = "anthropic"\nmodel = "claude-next-9"\n')
    p.config(
        'provider = "anthropic"\nmodel = "claude-next-9"\n[providers.anthropic]\n'
        'models = ["claude-next-9"]\n'
    )  # accepted once listed


def _price_probe(field: str) -> Callable[[Probe], None]:
    def check(p: Probe) -> None:
        toml = (
            '[providers.anthropic.prices."claude-sonnet-4-5"]\ninput = 1.5\noutput = 7.5\n'
            "cache_read = 0.25\ncache_write = 2.5\n"
        )
        table = p.config(toml).price_table()
        expected = {"input": 1.5, "output": 7.5, "cache_read": 0.25, "cache_write": 2.5}[field]
        price = table.price("claude-sonnet-4-5")
        assert price is not None and float(getattr(price, field)) == expected
        # What a session's usage costs follows (1M tokens of that kind).
        usage = dict.fromkeys(
            ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"), 0
        )
        usage[f"{field}_tokens"] = 1_000_000
        assert float(table.cost("claude-sonnet-4-5", usage) or 0) == expected

    return check


for _field in ("input", "output", "cache_read", "cache_write"):
    PROBES[f"providers:{_field}"] = _price_probe(_field)
PROBES["providers:prices"] = _price_probe("input")


# ------------------------------------------------------------------ models


@probe("models:context_window")
def _(p: Probe) -> None:
    assert _model(p, "context_window = 12345").context_window == 12345


@probe("models:max_output_tokens")
def _(p: Probe) -> None:
    assert _model(p, "context_window = 12345\nmax_output_tokens = 777").max_output_tokens == 777


@probe("models:input, output")
def _(p: Probe) -> None:
    price = _model(p, "input = 2.0\noutput = 4.0").price
    assert price is not None and price.output > price.input > 0


@probe("models:cache_read, cache_write")
def _(p: Probe) -> None:
    price = _model(p, "input = 2.0\noutput = 4.0\ncache_read = 0.5\ncache_write = 3.0").price
    assert price is not None and price.cache_write > price.input > price.cache_read > 0


@probe("models:capabilities")
def _(p: Probe) -> None:
    assert "vision" in _model(p, 'capabilities = ["vision"]').capabilities


# ------------------------------------------------------------------ permissions


@probe("permissions:default")
def _(p: Probe) -> None:
    # Where the preset would ask (plan, a command that is not read-only), the default decides.
    asked = p.config('agent = "plan"\n')
    assert _decision(_policy(asked), "bash", _bash("make deploy")) == "ask"
    config = p.config('agent = "plan"\n[permissions]\ndefault = "deny"\n')
    assert _decision(_policy(config), "bash", _bash("make deploy")) == "deny"


@probe("permissions:rules")
def _(p: Probe) -> None:
    config = p.config('[permissions.rules]\nbash = {"rm *" = "deny"}\n')
    assert _decision(_policy(config), "bash", _bash("rm -rf build")) == "deny"


@probe("permissions:defer")
def _(p: Probe) -> None:
    config = p.config('[permissions]\ndefer = ["bash:make deploy*"]\n')
    assert _decision(_policy(config), "bash", _bash("make deploy")) == "defer"
    assert _decision(_policy(config), "bash", _bash("make test")) == "allow"


@probe("permissions:schedule")
def _(p: Probe) -> None:
    config = p.config('[permissions]\nschedule = ["bash:make deploy*@22:00-06:00"]\n')
    policy = _policy(config)
    ev = policy.evaluate("bash", _bash("make deploy"))
    assert ev.action == "schedule" and ev.matched_rule.endswith("@22:00-06:00")
    assert _decision(policy, "bash", _bash("make test")) == "allow"
    with pytest.raises(ConfigError):
        p.config('[permissions]\nschedule = ["bash:make deploy*@25:00-06:00"]\n')


# ------------------------------------------------------------------ redaction


def _redactor(config: Config) -> Any:
    from coder_es.redaction import Redactor

    return Redactor.with_settings(config.redaction.env_vars, config.redaction.patterns)


@probe("redaction:env")
def _(p: Probe) -> None:
    import os

    os.environ["MY_PROBE_SECRET"] = "s3cr3t-value-of-the-probe-0123456789"
    try:
        config = p.config('[redaction]\nenv = ["MY_PROBE_SECRET"]\n')
        out = _redactor(config).redact_text("x s3cr3t-value-of-the-probe-0123456789 y")
    finally:
        del os.environ["MY_PROBE_SECRET"]
    assert "s3cr3t-value" not in str(out)


@probe("redaction:patterns")
def _(p: Probe) -> None:
    config = p.config("[redaction]\npatterns = ['ticket-[0-9]{6}']\n")
    assert "ticket-123456" not in str(_redactor(config).redact_text("see ticket-123456 now"))


@probe("redaction:forget_after_days")
def _(p: Probe) -> None:
    # `coder-es forget --expired` reads it (tests/core/test_cli_forget_and_keys.py runs it).
    assert p.config("[redaction]\nforget_after_days = 30\n").redaction.forget_after_days == 30


# ------------------------------------------------------------------ serve


def _serve(p: Probe, body: str) -> Any:
    return p.config(f"[serve]\n{body}\n").serve


@probe("serve:host")
def _(p: Probe) -> None:
    assert _serve(p, 'host = "127.0.0.2"').host == "127.0.0.2"


@probe("serve:port")
def _(p: Probe) -> None:
    assert _serve(p, "port = 9911").port == 9911


@probe("serve:token")
def _(p: Probe) -> None:
    assert _serve(p, 'token = "a-long-serve-token-0123456789"').token


@probe("serve:allowed_origins")
def _(p: Probe) -> None:
    assert _serve(p, 'allowed_origins = ["http://localhost:3000"]').allowed_origins == (
        "http://localhost:3000",
    )


@probe("serve:max_connections")
def _(p: Probe) -> None:
    assert _serve(p, "max_connections = 3").max_connections == 3


@probe("serve:max_frame_bytes")
def _(p: Probe) -> None:
    assert _serve(p, "max_frame_bytes = 4096").max_frame_bytes == 4096


@probe("serve:max_messages_per_second")
def _(p: Probe) -> None:
    assert _serve(p, "max_messages_per_second = 5").max_messages_per_second == 5


@probe("serve:max_sessions_per_connection")
def _(p: Probe) -> None:
    assert _serve(p, "max_sessions_per_connection = 2").max_sessions_per_connection == 2


@probe("serve:rules")
def _(p: Probe) -> None:
    from coder_es.clients.filters import ApprovalFilter

    config = p.config('[serve.rules]\nbash = {"git *" = "allow"}\n')
    assert ApprovalFilter.from_config(config.serve.rules) is not None
    assert config.serve.rules[0].pattern == "git *"


# ------------------------------------------------------------------ sandbox


@probe("sandbox:mode")
def _(p: Probe) -> None:
    assert _sandbox(p.config('[sandbox]\nmode = "off"\n')).mode == "off"


@probe("sandbox:network")
def _(p: Probe) -> None:
    assert _sandbox(p.config("[sandbox]\nnetwork = false\n")).network is False


@probe("sandbox:read_only")
def _(p: Probe) -> None:
    assert _sandbox(p.config("[sandbox]\nread_only = true\n")).read_only is True


@probe("sandbox:writable")
def _(p: Probe) -> None:
    place = p.tmp / "cache"
    place.mkdir()
    settings = _sandbox(p.config(f"[sandbox]\nwritable = [{json.dumps(str(place))}]\n"))
    assert Path(place) in settings.writable


# ------------------------------------------------------------------ MCP servers


@probe("mcp_servers:command")
def _(p: Probe) -> None:
    from coder_es.mcp.connection import _stdio_command

    server = _mcp(p, 'command = "my-mcp-server"\nargs = ["--stdio"]')
    command, args = _stdio_command(server)
    assert "my-mcp-server" in (command, *args)


@probe("mcp_servers:args")
def _(p: Probe) -> None:
    from coder_es.mcp.connection import _stdio_command

    server = _mcp(p, 'command = "my-mcp-server"\nargs = ["--stdio", "--verbose"]')
    assert _stdio_command(server)[1][-2:] == ["--stdio", "--verbose"]


@probe("mcp_servers:env")
def _(p: Probe) -> None:
    assert _mcp(p, 'command = "s"\nenv = { TOKEN_X = "v" }').env == {"TOKEN_X": "v"}


@probe("mcp_servers:cwd")
def _(p: Probe) -> None:
    assert _mcp(p, f'command = "s"\ncwd = {json.dumps(str(p.tmp))}').cwd == str(p.tmp)


@probe("mcp_servers:url")
def _(p: Probe) -> None:
    server = _mcp(p, 'url = "http://127.0.0.1:9000/mcp"')
    assert server.url == "http://127.0.0.1:9000/mcp" and server.kind != "stdio"


@probe("mcp_servers:headers")
def _(p: Probe) -> None:
    server = _mcp(p, 'url = "http://127.0.0.1:9000/mcp"\nheaders = { X-Api = "k" }')
    assert server.headers == {"X-Api": "k"}


@probe("mcp_servers:enabled")
def _(p: Probe) -> None:
    assert _mcp(p, 'command = "s"\nenabled = false').enabled is False


@probe("mcp_servers:startup_timeout_s")
def _(p: Probe) -> None:
    assert _mcp(p, 'command = "s"\nstartup_timeout_s = 5').startup_timeout_s == 5


@probe("mcp_servers:tool_timeout_s")
def _(p: Probe) -> None:
    assert _mcp(p, 'command = "s"\ntool_timeout_s = 7').tool_timeout_s == 7


@probe("mcp_servers:enabled_tools")
def _(p: Probe) -> None:
    assert _mcp(p, 'command = "s"\nenabled_tools = ["a"]').enabled_tools == ("a",)


@probe("mcp_servers:disabled_tools")
def _(p: Probe) -> None:
    assert _mcp(p, 'command = "s"\ndisabled_tools = ["b"]').disabled_tools == ("b",)


# ------------------------------------------------------------------ agents


@probe("agents:name")
def _(p: Probe) -> None:
    assert _agent(p, 'name = "code-reviewer"').name in ("code-reviewer", "reviewer")


@probe("agents:description")
def _(p: Probe) -> None:
    assert _agent(p, "").description == "reviews"


@probe("agents:preset")
def _(p: Probe) -> None:
    assert _agent(p, 'preset = "explore"').preset == "explore"


@probe("agents:model")
def _(p: Probe) -> None:
    assert _agent(p, 'model = "claude-haiku-4-5"').model == "claude-haiku-4-5"


@probe("agents:prompt")
def _(p: Probe) -> None:
    assert _agent(p, 'prompt = "Be terse."').prompt == "Be terse."


@probe("agents:max_steps")
def _(p: Probe) -> None:
    assert _agent(p, "max_steps = 4").max_steps == 4


@probe("agents:tools")
def _(p: Probe) -> None:
    assert _agent(p, 'tools = ["read", "grep"]').tools == ("read", "grep")


# ------------------------------------------------------------------ hooks


@probe("hooks:command")
def _(p: Probe) -> None:
    assert _hook(p, "").command == "true"


@probe("hooks:matcher")
def _(p: Probe) -> None:
    assert _hook(p, 'matcher = "bash|edit"').matcher == "bash|edit"


@probe("hooks:timeout")
def _(p: Probe) -> None:
    assert _hook(p, "timeout = 3").timeout == 3


@probe("hooks:on_failure")
def _(p: Probe) -> None:
    assert _hook(p, 'on_failure = "block"').on_failure == "block"


@probe("hooks:dialect")
def _(p: Probe) -> None:
    assert _hook(p, 'dialect = "claude-code"').dialect == "claude-code"


# ------------------------------------------------------------------ harnesses


def _harness(p: Probe, body: str) -> Any:
    from coder_es.harness.spec import parse_harness

    config = p.config(f"[harnesses.work]\n{body}\n")
    return parse_harness("work", config.harnesses)  # what `run --harness work` runs


@probe("harnesses:kind")
def _(p: Probe) -> None:
    assert _harness(p, 'kind = "codex"').kind == "codex"


@probe("harnesses:command")
def _(p: Probe) -> None:
    spec = _harness(p, 'kind = "claude-code"\ncommand = ["claude", "--model", "opus"]')
    assert spec.command == ("claude", "--model", "opus")


@probe("harnesses:env")
def _(p: Probe) -> None:
    spec = _harness(p, 'kind = "gemini"\nenv = { GEMINI_X = "1" }')
    assert spec.env == {"GEMINI_X": "1"}


# ------------------------------------------------------------------ store


@probe("store:backend")
def _(p: Probe) -> None:
    assert _store(p, '[store]\nbackend = "sqlite"\n').backend == "sqlite"


@probe("store:path")
def _(p: Probe) -> None:
    where = p.tmp / "elsewhere"
    assert _store(p, f"[store]\npath = {json.dumps(str(where))}\n").path == where


@probe("store:durable")
def _(p: Probe) -> None:
    assert _store(p, "[store]\ndurable = false\n").durable is False


@probe("store:postgres")
def _(p: Probe) -> None:
    config = _store(p, '[store]\nbackend = "postgres"\n[store.postgres]\nschema = "team"\n')
    assert any(v == "team" for v in config.extra.values())


# ------------------------------------------------------------------ telemetry


@probe("telemetry:enabled")
def _(p: Probe) -> None:
    assert _telemetry(p, "enabled = false") is None


@probe("telemetry:endpoint")
def _(p: Probe) -> None:
    assert _telemetry(p, "").traces_endpoint == "http://127.0.0.1:4318/v1/traces"


@probe("telemetry:protocol")
def _(p: Probe) -> None:
    assert _telemetry(p, 'protocol = "grpc"').protocol == "grpc"


@probe("telemetry:service_name")
def _(p: Probe) -> None:
    assert _telemetry(p, 'service_name = "team-agents"').resource["service.name"] == "team-agents"


@probe("telemetry:capture_content")
def _(p: Probe) -> None:
    assert _telemetry(p, "capture_content = true").semconv.capture_content is True


@probe("telemetry:latest_conventions")
def _(p: Probe) -> None:
    assert _telemetry(p, "latest_conventions = true").semconv.latest is True


# ------------------------------------------------------------------ environment variables


@probe("env:CODER_ES_PROVIDER")
def _(p: Probe) -> None:
    assert _run_choice(p.config(CODER_ES_PROVIDER="ollama"))[0] == "ollama"


@probe("env:CODER_ES_MODEL")
def _(p: Probe) -> None:
    config = p.config(CODER_ES_PROVIDER="ollama", CODER_ES_MODEL="qwen3")
    assert _run_choice(config) == ("ollama", "qwen3")


@probe("env:CODER_ES_AGENT")
def _(p: Probe) -> None:
    assert _policy(p.config(CODER_ES_AGENT="explore")).shell_read_only


@probe("env:ANTHROPIC_BASE_URL")
def _(p: Probe) -> None:
    provider = _provider(
        p, "", "anthropic", ANTHROPIC_BASE_URL="http://127.0.0.1:8088", ANTHROPIC_API_KEY="k"
    )
    assert provider.base_url.startswith("http://127.0.0.1:8088")


@probe("env:OPENAI_BASE_URL")
def _(p: Probe) -> None:
    provider = _provider(p, "", "openai", OPENAI_BASE_URL="http://127.0.0.1:8089/v1")
    assert provider.base_url.startswith("http://127.0.0.1:8089")


@probe("env:OLLAMA_HOST")
def _(p: Probe) -> None:
    provider = _provider(p, "", "ollama", OLLAMA_HOST="127.0.0.1:11500")
    assert "11500" in provider.base_url


@probe("env:CODER_ES_STORE")
def _(p: Probe) -> None:
    assert _store(p, CODER_ES_STORE=str(p.tmp / "s")).path == p.tmp / "s"


@probe("env:CODER_ES_BACKEND")
def _(p: Probe) -> None:
    assert _store(p, CODER_ES_BACKEND="sqlite").backend == "sqlite"


@probe("env:CODER_ES_DURABLE")
def _(p: Probe) -> None:
    assert _store(p, CODER_ES_DURABLE="false").durable is False


@probe("env:CODER_ES_SERVE_TOKEN")
def _(p: Probe) -> None:
    assert p.config(CODER_ES_SERVE_TOKEN="tok-0123456789abcdef").serve.token


@probe("env:CODER_ES_SANDBOX")
def _(p: Probe) -> None:
    assert _sandbox(p.config(CODER_ES_SANDBOX="off")).mode == "off"


@probe("env:ANTHROPIC_API_KEY, OPENAI_API_KEY")
def _(p: Probe) -> None:
    assert _provider(p, "", "anthropic", ANTHROPIC_API_KEY="sk-ant-probe").api_key == "sk-ant-probe"


@probe("env:CODER_ES_SCRIPT")
def _(p: Probe) -> None:
    script = p.tmp / "s.json"
    script.write_text('{"turns": []}')
    config = p.config()
    import os

    os.environ["CODER_ES_SCRIPT"] = str(script)
    try:
        assert _run_choice(config) == ("scripted", str(script))
    finally:
        del os.environ["CODER_ES_SCRIPT"]


@probe("env:POSTGRES_*, LMDB_*")
def _(p: Probe) -> None:
    assert _store(p, LMDB_MAP_SIZE="12345678").extra["LMDB_MAP_SIZE"] == "12345678"


@probe("env:XDG_CONFIG_HOME, HOME")
def _(p: Probe) -> None:
    # The user config is found through them (every probe writes it there).
    assert p.config('agent = "plan"\n').agent == "plan"


@probe("env:CODER_ES_CEILING_DIRECTORIES")
def _(p: Probe) -> None:
    from coder_es.store.discover import discover_workspace

    (p.tmp / ".coder-es").mkdir()
    (p.tmp / ".coder-es" / "config.toml").write_text("")
    inner = p.workspace / "src"
    inner.mkdir()
    found = discover_workspace(inner, {"CODER_ES_CEILING_DIRECTORIES": str(p.workspace)})
    assert found.root != p.tmp  # the walk stopped below the ceiling


@probe("env:CODER_ES_SAFE_DIRECTORIES")
def _(p: Probe) -> None:
    import os

    from coder_es.store.discover import check_owner

    if os.geteuid() != 0:
        pytest.skip("making a directory another user's needs root")
    os.chown(p.workspace, 54321, 54321)
    with pytest.raises(Exception, match="CODER_ES_SAFE_DIRECTORIES"):
        check_owner(p.workspace, {})
    check_owner(p.workspace, {"CODER_ES_SAFE_DIRECTORIES": str(p.workspace)})


def test_every_documented_key_has_a_probe() -> None:
    keys = documented()
    assert len(keys) > 60, keys  # the tables were read
    missing = [k for k in keys if k not in PROBES]
    stale = [k for k in PROBES if k not in keys]
    assert not missing, f"documented without a probe here: {missing}"
    assert not stale, f"probes for keys the document no longer has: {stale}"


@pytest.mark.parametrize("key", sorted(PROBES))
def test_the_key_reaches_its_consumer(key: str, tmp_path: Path) -> None:
    PROBES[key](Probe(tmp_path))
