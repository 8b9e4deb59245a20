"""The configuration schema and the walker that checks one layer (a file, the environment, the
command line) against it.

The schema is a tree of ``Table`` (fixed keys), ``Entries`` (keys the user chooses, such as model
names), ``Rules`` (tool -> action, or tool -> pattern -> action) and ``Leaf`` (one value of a
``Kind``). The walker never stops at the first problem: it records every one with its key path
and line, and flattens the values it accepted into ``{key path: Setting}``, so that layers merge
with a plain dict update and every merged value still knows where it came from.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from coder_es.config.catalog import ACTIONS, AGENTS, ANY_TOOL, PROVIDERS, TOOLS
from coder_es.config.layers import Key, Layer
from coder_es.config.mcp_names import server_name_problem
from coder_es.config.problems import format_path
from coder_es.store.config import BACKENDS


def toml_type(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, dt.date | dt.time):
        return "a date/time"
    return type(value).__name__


class Kind:
    """A type of leaf value. ``check`` takes a TOML value; ``parse`` takes the text of an
    environment variable or flag. Both return (normalized value, error message or None)."""

    expected = "a value"

    def check(self, value: object) -> tuple[Any, str | None]:
        raise NotImplementedError

    def parse(self, text: str) -> tuple[Any, str | None]:
        return self.check(text)

    def wrong_type(self, value: object) -> tuple[Any, str]:
        return None, f"expected {self.expected}, got {toml_type(value)}"


class Text(Kind):
    expected = "a string"

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        if not value.strip():
            return None, "must not be empty"
        return value, None


class PlacePath(Text):
    """A place on disk named by the user: absolute, or under the home directory (``~/...``,
    expanded where it is used)."""

    expected = "a path"

    def check(self, value: object) -> tuple[Any, str | None]:
        text, err = super().check(value)
        if err:
            return text, err
        if not os.path.isabs(os.path.expanduser(text)):
            return None, "must be an absolute path or start with ~/"
        return text, None


class Choice(Kind):
    def __init__(self, options: Iterable[str], noun: str) -> None:
        self.options = tuple(options)
        self.noun = noun
        self.expected = f"a string, one of {', '.join(self.options)}"

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        if value in self.options:
            return value, None
        from coder_es.config.suggest import did_you_mean  # only with a problem (start-up time)

        hint = did_you_mean(value, self.options) or f"; expected one of {', '.join(self.options)}"
        return None, f"unknown {self.noun} '{value}'{hint}"


class Integer(Kind):
    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high
        self.expected = f"an integer from {low} to {high}"

    def check(self, value: object) -> tuple[Any, str | None]:
        # TOML booleans are Python ints; true is not a port number.
        if isinstance(value, bool) or not isinstance(value, int):
            return self.wrong_type(value)
        if not self.low <= value <= self.high:
            return None, f"expected {self.expected}, got {value}"
        return value, None

    def parse(self, text: str) -> tuple[Any, str | None]:
        try:
            return self.check(int(text.strip()))
        except ValueError:
            return None, f"expected {self.expected}, got '{text}'"


class Number(Kind):
    expected = "a number of at least 0"

    def check(self, value: object) -> tuple[Any, str | None]:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return self.wrong_type(value)
        if value < 0 or value != value:
            return None, f"expected {self.expected}, got {value}"
        return float(value), None

    def parse(self, text: str) -> tuple[Any, str | None]:
        try:
            return self.check(float(text.strip()))
        except ValueError:
            return None, f"expected {self.expected}, got '{text}'"


class Boolean(Kind):
    expected = "true or false"
    _TRUE = ("1", "true", "yes", "on")
    _FALSE = ("0", "false", "no", "off")

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, bool):
            return self.wrong_type(value)
        return value, None

    def parse(self, text: str) -> tuple[Any, str | None]:
        t = text.strip().lower()
        if t in self._TRUE:
            return True, None
        if t in self._FALSE:
            return False, None
        return None, f"expected one of {', '.join(self._TRUE + self._FALSE)}, got '{text}'"


class Url(Kind):
    expected = "an http(s) URL"

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        try:
            parts = urlsplit(value.strip())
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError as e:
            return None, f"expected {self.expected}, got '{value}' ({e})"
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None, f"expected {self.expected} such as https://host:port, got '{value}'"
        return value.strip().rstrip("/"), None


class EnvName(Kind):
    expected = "an environment variable name"
    _NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        if not self._NAME.match(value):
            return None, f"expected {self.expected} (letters, digits, _), got '{value}'"
        return value, None


class AnyText(Kind):
    """Any string, empty included (a program argument, an environment value)."""

    expected = "a string"

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        return value, None


class ServerName(Kind):
    """An MCP server's name: it becomes part of tool names (``mcp__NAME__TOOL``)."""

    expected = "a server name (letters, digits, _ and -, no '__', no '_' at either end)"

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        problem = server_name_problem(value)
        if problem is not None:
            return (
                None,
                f"expected {self.expected}, at most 40 characters, got '{value}': {problem}",
            )
        return value, None


class Regex(Kind):
    """A regular expression in RE2 syntax (``coder_es.user_patterns``: linear-time matching,
    so no pattern can hang coder-es)."""

    expected = "a regular expression"

    def check(self, value: object) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return self.wrong_type(value)
        if not value:
            return None, "an empty pattern would match everywhere"
        from coder_es.user_patterns import UserPatternError, compile_user_pattern

        try:
            compile_user_pattern(value)
        except UserPatternError as e:
            return None, f"invalid regular expression '{value}': {e}"
        return value, None


class ListOf(Kind):
    def __init__(self, item: Kind) -> None:
        self.item = item
        self.expected = f"an array of {item.expected.removeprefix('a ').removeprefix('an ')}s"

    def check(self, value: object) -> tuple[Any, str | None]:
        # The walker checks items one by one (to report each index); this is for flags.
        if not isinstance(value, list):
            return self.wrong_type(value)
        out = []
        for i, item in enumerate(value):
            norm, err = self.item.check(item)
            if err:
                return None, f"[{i}]: {err}"
            out.append(norm)
        return tuple(out), None

    def parse(self, text: str) -> tuple[Any, str | None]:
        return self.check([t.strip() for t in text.split(",") if t.strip()])


@dataclass(frozen=True)
class Leaf:
    kind: Kind
    doc: str
    project_forbidden: str = ""
    """Why a project config may not set this key ("" when it may)."""
    additive: bool = False
    """Lists that combine across layers instead of replacing each other."""


@dataclass(frozen=True)
class Table:
    fields: Mapping[str, Node]
    doc: str = ""
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entries:
    """A table whose keys the user chooses; each value follows ``value``."""

    key: Kind
    value: Node
    doc: str = ""


@dataclass(frozen=True)
class Rules:
    """Permission rules: ``tool = "action"`` (any subject) or ``tool = {"pattern" = "action"}``."""

    doc: str = ""


@dataclass(frozen=True)
class Hooks:
    """``[[hooks.EVENT]]`` arrays of tables (``coder_es.hooks``): one list per event, each hook
    a table of ``command`` (required), ``matcher``, ``timeout``, ``on_failure``, ``dialect``.
    Additive: the user config's hooks run first, then the project's, each in file order."""

    doc: str = ""


@dataclass(frozen=True)
class DeferRules:
    """``[permissions] defer = ["TOOL", "TOOL:PATTERN", ...]``: calls whose question parks
    (issue 34). Each entry is the rule ``[permissions.rules] TOOL.PATTERN = "defer"``, so it
    layers, tightens and reaches the session exactly as the rules do."""

    doc: str = ""


@dataclass(frozen=True)
class ScheduleRules:
    """``[permissions] schedule = ["TOOL[:PATTERN]@HH:MM-HH:MM", ...]``: calls run later, in
    their time window (UTC), without anyone asked (issue 34). Each entry is the rule
    ``[permissions.rules] TOOL.PATTERN = "schedule@HH:MM-HH:MM"``."""

    doc: str = ""


Node = Leaf | Table | Entries | Rules | Hooks | DeferRules | ScheduleRules


class RuleAction(Choice):
    """A rule's action: one of ``ACTIONS``, or ``schedule@HH:MM-HH:MM`` (a scheduled call)."""

    def __init__(self) -> None:
        super().__init__(ACTIONS, "action")
        self.expected = f"a string, one of {', '.join(ACTIONS)} or schedule@HH:MM-HH:MM"

    def check(self, value: object) -> tuple[Any, str | None]:
        if isinstance(value, str) and value.startswith("schedule"):
            from coder_es.permissions.schedule import WindowSyntaxError, action_window

            try:
                _name, window = action_window(value)
            except WindowSyntaxError as e:
                return None, str(e)
            assert window is not None
            return f"schedule@{window.text}", None
        return super().check(value)


ACTION = Choice(ACTIONS, "action")
RULE_ACTION = RuleAction()


class ToolName(Choice):
    """A built-in tool, ``*``, or an MCP tool: ``mcp__SERVER__TOOL`` or ``mcp__SERVER__*``."""

    def check(self, value: object) -> tuple[Any, str | None]:
        if isinstance(value, str) and re.fullmatch(r"mcp__[A-Za-z0-9_-]+__.+", value):
            return value, None
        return super().check(value)


TOOL = ToolName((*TOOLS, ANY_TOOL), "tool")

_NO_SECRET_IN_PROJECT = (
    "may only be set in the user config or the environment: a project config is shared with "
    "the repository and must not hold secrets"
)

PRICE = Table(
    {
        "input": Leaf(Number(), "dollars per million input tokens"),
        "output": Leaf(Number(), "dollars per million output tokens"),
        "cache_read": Leaf(Number(), "dollars per million cache-read tokens"),
        "cache_write": Leaf(Number(), "dollars per million cache-write tokens"),
    },
    required=("input", "output"),
)

MODEL = Table(
    {
        "context_window": Leaf(Integer(1, 100_000_000), "input tokens the model accepts"),
        "max_output_tokens": Leaf(Integer(1, 100_000_000), "tokens the model may answer with"),
        "input": Leaf(Number(), "dollars per million input tokens"),
        "output": Leaf(Number(), "dollars per million output tokens"),
        "cache_read": Leaf(Number(), "dollars per million cache-read tokens"),
        "cache_write": Leaf(Number(), "dollars per million cache-write tokens"),
        "capabilities": Leaf(ListOf(Text()), "what the model supports (vision, reasoning...)"),
    }
)

PROVIDER = Table(
    {
        # From a project config, these two apply only once the workspace is trusted
        # (config.untrusted): together they decide where the API key is sent.
        "base_url": Leaf(Url(), "the API endpoint"),
        "api_key_env": Leaf(EnvName(), "the environment variable holding the API key"),
        "models": Leaf(ListOf(Text()), "extra model names to accept", additive=True),
        "prices": Entries(Text(), PRICE, "price overrides by model name (or name prefix)"),
    }
)

MCP_SERVER = Table(
    {
        "command": Leaf(Text(), "the program of a stdio server"),
        "args": Leaf(ListOf(AnyText()), "its arguments"),
        "env": Entries(EnvName(), Leaf(AnyText(), "a value"), "variables added to its environment"),
        "cwd": Leaf(Text(), "its working directory"),
        "url": Leaf(Url(), "the endpoint of a Streamable HTTP server"),
        "headers": Entries(Text(), Leaf(AnyText(), "a value"), "HTTP headers sent to it"),
        "enabled": Leaf(Boolean(), "whether the server is used"),
        "startup_timeout_s": Leaf(Number(), "seconds to start and list tools"),
        "tool_timeout_s": Leaf(Number(), "seconds a tool call may take"),
        "enabled_tools": Leaf(ListOf(Text()), "only these tools are offered"),
        "disabled_tools": Leaf(ListOf(Text()), "these tools are not offered"),
    }
)

HARNESS = Table(
    {
        "kind": Leaf(
            Choice(("claude-code", "codex", "gemini", "acp"), "harness kind"),
            "which agent CLI this is (its stream format and flags)",
        ),
        "command": Leaf(ListOf(AnyText()), "the program and its arguments"),
        "env": Entries(EnvName(), Leaf(AnyText(), "a value"), "variables added to its environment"),
    }
)

AGENT_DEFINITION = Table(
    {
        "name": Leaf(Text(), "the name the model uses (default: the table's)"),
        "description": Leaf(Text(), "what the agent is for (the model sees it)"),
        "preset": Leaf(Choice(AGENTS, "agent"), "its permissions (default: the parent's)"),
        "model": Leaf(Text(), "its model (default: the parent's)"),
        "prompt": Leaf(Text(), "instructions put before each task's prompt"),
        "max_steps": Leaf(Integer(1, 10_000), "its step limit"),
        "tools": Leaf(ListOf(Text()), "the tools it may use (never more than the parent's)"),
    }
)

SCHEMA = Table(
    {
        "provider": Leaf(Choice(PROVIDERS, "provider"), "the model provider"),
        "model": Leaf(Text(), "the model name"),
        "agent": Leaf(Choice(AGENTS, "agent"), "the agent preset"),
        "agents": Entries(Text(), AGENT_DEFINITION, "subagents the task tool can start"),
        "providers": Table({name: PROVIDER for name in PROVIDERS}),
        "models": Entries(
            Text(), MODEL, "what is known of a model, over the bundled model catalogue"
        ),
        "permissions": Table(
            {
                "default": Leaf(ACTION, "the action when no rule matches"),
                "rules": Rules("tool -> action, or tool -> pattern -> action"),
                "defer": DeferRules("TOOL or TOOL:PATTERN rules whose calls wait for an answer"),
                "schedule": ScheduleRules(
                    "TOOL[:PATTERN]@HH:MM-HH:MM rules whose calls run in that window (UTC)"
                ),
            }
        ),
        "redaction": Table(
            {
                "env": Leaf(ListOf(EnvName()), "more variables to redact", additive=True),
                "patterns": Leaf(ListOf(Regex()), "regular expressions to redact", additive=True),
                "forget_after_days": Leaf(
                    Integer(1, 1_000_000), "days after which forget --expired shreds secrets"
                ),
            }
        ),
        "serve": Table(
            {
                "host": Leaf(Text(), "the address to listen on"),
                "port": Leaf(Integer(0, 65535), "the port to listen on (0: any free port)"),
                "token": Leaf(Text(), "the bearer token", project_forbidden=_NO_SECRET_IN_PROJECT),
                "allowed_origins": Leaf(
                    ListOf(Text()), "browser origins allowed to connect (with the token)"
                ),
                "max_connections": Leaf(Integer(1, 100_000), "concurrent connections"),
                "max_frame_bytes": Leaf(Integer(1024, 1 << 30), "the largest frame accepted"),
                "max_messages_per_second": Leaf(
                    Integer(1, 100_000), "client messages per second per connection"
                ),
                "max_sessions_per_connection": Leaf(
                    Integer(1, 100_000), "sessions one connection may create"
                ),
                "rules": Rules("tool calls the server allows or denies itself"),
            }
        ),
        "sandbox": Table(
            {
                "mode": Leaf(
                    Choice(("auto", "off"), "sandbox mode"),
                    "auto: shell commands run as transactions in namespaces where the system "
                    "allows it; off: the stat-index fallback",
                ),
                "network": Leaf(
                    Boolean(),
                    "false: shell commands run without network; true: with it, also for "
                    "read-only agents (which get none by default)",
                ),
                "read_only": Leaf(Boolean(), "true: shell commands run on a read-only file system"),
                "writable": Leaf(
                    ListOf(PlacePath()),
                    "places outside the workspace shell commands may change (e.g. ~/.cache/pip); "
                    "everything else but the workspace and a private /tmp is read-only",
                    additive=True,
                ),
            }
        ),
        "telemetry": Table(
            {
                "enabled": Leaf(Boolean(), "send live telemetry when an endpoint is set"),
                "endpoint": Leaf(
                    Url(), "the OTLP base URL (OTEL_EXPORTER_OTLP_ENDPOINT wins over it)"
                ),
                "protocol": Leaf(
                    Choice(("http/protobuf", "grpc"), "OTLP protocol"), "how spans are sent"
                ),
                "service_name": Leaf(Text(), "the service.name resource attribute"),
                "capture_content": Leaf(
                    Boolean(), "export message content (the redacted form only)"
                ),
                "latest_conventions": Leaf(
                    Boolean(), "write the latest experimental GenAI semantic conventions"
                ),
            },
            "live OpenTelemetry export (docs/configuration.md)",
        ),
        # From a project config, held back until the workspace is trusted (config.untrusted).
        "mcp_servers": Entries(ServerName(), MCP_SERVER, "MCP servers by name"),
        "harnesses": Entries(ServerName(), HARNESS, "agent CLIs run as sessions (--harness NAME)"),
        # Likewise: a hook is a command run with the user's rights at every matching event.
        "hooks": Hooks("commands and plugins run on session events, by event name"),
        "store": Table(
            {
                "backend": Leaf(Choice(BACKENDS, "backend"), "the event store backend"),
                "path": Leaf(Text(), "the store directory"),
                "durable": Leaf(Boolean(), "sync every commit to disk"),
                "postgres": Table(
                    {
                        "host": Leaf(Text(), "PostgreSQL host"),
                        "port": Leaf(Integer(1, 65535), "PostgreSQL port"),
                        "dbname": Leaf(Text(), "database name"),
                        "user": Leaf(Text(), "user name"),
                        "schema": Leaf(Text(), "schema for the tables"),
                    }
                ),
            }
        ),
    }
)


def walk(node: Node, value: object, path: Key, layer: Layer) -> None:
    """Check ``value`` against ``node``, recording values and problems in ``layer``."""
    if isinstance(node, Table):
        if not isinstance(value, dict):
            layer.problem(path, f"expected a table, got {toml_type(value)}", path)
            return
        for key, sub in value.items():
            child = node.fields.get(key)
            if child is None:
                from coder_es.config.suggest import did_you_mean

                hint = did_you_mean(key, node.fields)
                layer.problem((*path, key), f"unknown key '{key}'{hint}", path)
                continue
            walk(child, sub, (*path, key), layer)
        missing = [k for k in node.required if k not in value]
        if missing:
            names = ", ".join(f"'{k}'" for k in missing)
            layer.problem(path, f"missing required key {names}", path)
    elif isinstance(node, Entries):
        if not isinstance(value, dict):
            layer.problem(path, f"expected a table, got {toml_type(value)}", path)
            return
        for key, sub in value.items():
            _, err = node.key.check(key)
            if err:
                layer.problem((*path, key), err, (*path, key))
                continue
            walk(node.value, sub, (*path, key), layer)
    elif isinstance(node, Rules):
        _walk_rules(value, path, layer)
    elif isinstance(node, Hooks):
        _walk_hooks(value, path, layer)
    elif isinstance(node, DeferRules):
        _walk_defer(value, path, layer)
    elif isinstance(node, ScheduleRules):
        _walk_schedule(value, path, layer)
    else:
        _walk_leaf(node, value, path, layer)


def _walk_leaf(node: Leaf, value: object, path: Key, layer: Layer) -> None:
    if node.project_forbidden and layer.project:
        layer.problem(path, node.project_forbidden, path)
        return
    if isinstance(node.kind, ListOf):
        if not isinstance(value, list):
            layer.problem(path, f"expected {node.kind.expected}, got {toml_type(value)}", path)
            return
        items = []
        ok = True
        for i, item in enumerate(value):
            norm, err = node.kind.item.check(item)
            if err:
                ok = False
                layer.problem(path, err, (*path, i))
            else:
                items.append(norm)
        if ok:
            layer.set(path, tuple(items), node.additive)
        return
    norm, err = node.kind.check(value)
    if err:
        layer.problem(path, err, path)
    else:
        layer.set(path, norm, node.additive)


def _walk_rules(value: object, path: Key, layer: Layer) -> None:
    if not isinstance(value, dict):
        layer.problem(path, f"expected a table of tool = action, got {toml_type(value)}", path)
        return
    for tool, sub in value.items():
        here = (*path, tool)
        _, err = TOOL.check(tool)
        if err:
            layer.problem(here, err, here)
            continue
        # A bare action means "any subject": normalized to the pattern "*" so that a project's
        # `bash = {"rm *" = "deny"}` adds to a user's `bash = "allow"` instead of replacing it.
        patterns = {"*": sub} if isinstance(sub, str) else sub
        if not isinstance(patterns, dict):
            msg = f"expected an action ({', '.join(ACTIONS)}) or a table of pattern = action"
            layer.problem(here, f"{msg}, got {toml_type(sub)}", here)
            continue
        for pattern, action in patterns.items():
            at = here if isinstance(sub, str) else (*here, pattern)
            if not pattern.strip():
                layer.problem(at, 'the pattern must not be empty (use "*" for any)', at)
                continue
            norm, err = RULE_ACTION.check(action)
            if err:
                layer.problem(at, err, at)
            else:
                layer.set((*here, pattern), norm)


def _walk_defer(value: object, path: Key, layer: Layer) -> None:
    if not isinstance(value, list):
        got = toml_type(value)
        layer.problem(path, f"expected a list of TOOL or TOOL:PATTERN, got {got}", path)
        return
    rules = (*path[:-1], "rules")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            layer.problem(path, f"expected TOOL or TOOL:PATTERN, got {toml_type(item)}", (*path, i))
            continue
        tool, sep, pattern = item.partition(":")
        tool = tool.strip()
        _, err = TOOL.check(tool)
        if err is None and sep and not pattern.strip():
            err = f"empty pattern in '{item}' (leave out ':' to match anything)"
        if err:
            layer.problem(path, err, (*path, i))
            continue
        layer.set((*rules, tool, pattern if sep else "*"), "defer")


def _walk_schedule(value: object, path: Key, layer: Layer) -> None:
    from coder_es.permissions.schedule import WindowSyntaxError, split_scheduled

    expected = "TOOL[:PATTERN]@HH:MM-HH:MM"
    if not isinstance(value, list):
        layer.problem(path, f"expected a list of {expected}, got {toml_type(value)}", path)
        return
    rules = (*path[:-1], "rules")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            layer.problem(path, f"expected {expected}, got {toml_type(item)}", (*path, i))
            continue
        try:
            rule, window = split_scheduled(item)
        except WindowSyntaxError as e:
            layer.problem(path, str(e), (*path, i))
            continue
        tool, sep, pattern = rule.partition(":")
        tool = tool.strip()
        _, err = TOOL.check(tool)
        if err is None and sep and not pattern.strip():
            err = f"empty pattern in '{item}' (leave out ':' to match anything)"
        if err:
            layer.problem(path, err, (*path, i))
            continue
        layer.set((*rules, tool, pattern if sep else "*"), f"schedule@{window.text}")


_HOOK_KEYS = ("command", "matcher", "timeout", "on_failure", "dialect")


def _walk_hooks(value: object, path: Key, layer: Layer) -> None:
    from coder_es.hooks.spec import DIALECTS, EVENTS, ON_FAILURE, HookSpec, check_matcher

    if not isinstance(value, dict):
        layer.problem(path, f"expected a table of events, got {toml_type(value)}", path)
        return
    for event, entries in value.items():
        here = (*path, event)
        if event not in EVENTS:
            from coder_es.config.suggest import did_you_mean

            hint = did_you_mean(event, EVENTS)
            layer.problem(here, f"unknown hook event '{event}'{hint}", here)
            continue
        if not isinstance(entries, list):
            msg = f"expected an array of tables ([[{format_path(here)}]]), got {toml_type(entries)}"
            layer.problem(here, msg, here)
            continue
        specs = []
        for i, entry in enumerate(entries):
            at: tuple[str | int, ...] = (*here, i)
            if not isinstance(entry, dict):
                layer.problem(here, f"expected a table, got {toml_type(entry)}", at)
                continue
            problems = []
            for key in entry:
                if key not in _HOOK_KEYS:
                    problems.append(f"unknown key '{key}' (a hook has {', '.join(_HOOK_KEYS)})")
            command = entry.get("command")
            if not isinstance(command, str) or not command.strip():
                problems.append("a hook needs a command (a non-empty string)")
            matcher = entry.get("matcher", "")
            if not isinstance(matcher, str):
                problems.append(f"matcher: expected a string, got {toml_type(matcher)}")
            elif check_matcher(matcher):
                problems.append(f"matcher: {check_matcher(matcher)}")
            timeout = entry.get("timeout", 60)
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
                problems.append("timeout: expected a positive number of seconds")
            on_failure = entry.get("on_failure", "ignore")
            if on_failure not in ON_FAILURE:
                problems.append(f"on_failure: expected one of {', '.join(ON_FAILURE)}")
            dialect = entry.get("dialect", "coder-es")
            if dialect not in DIALECTS:
                problems.append(f"dialect: expected one of {', '.join(DIALECTS)}")
            if problems:
                for problem in problems:
                    layer.problem(here, problem, at)
                continue
            specs.append(
                HookSpec(
                    event=event,
                    command=str(command),
                    matcher=str(matcher),
                    timeout=float(timeout),
                    on_failure=str(on_failure),
                    dialect=str(dialect),
                    source=layer.source,
                )
            )
        if specs:
            layer.set(here, tuple(specs), additive=True)


def node_at(path: Key, root: Node = SCHEMA) -> Node | None:
    """The schema node for a key path (``None`` for a path the schema does not have)."""
    node: Node | None = root
    for key in path:
        if isinstance(node, Table):
            node = node.fields.get(key)
        elif isinstance(node, Entries):
            node = node.value
        else:
            return None
    return node


def leaf_paths(node: Node = SCHEMA, path: Key = ()) -> list[Key]:
    """Every fixed key path in the schema (``*`` stands for a key the user chooses)."""
    if isinstance(node, Table):
        out: list[Key] = [path] if path else []
        for key, child in node.fields.items():
            out += leaf_paths(child, (*path, key))
        return out
    if isinstance(node, Entries):
        return [path, *leaf_paths(node.value, (*path, "*"))]
    return [path]
