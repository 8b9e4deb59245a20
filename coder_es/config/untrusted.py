"""What an untrusted project config may do: only tighten, key by key, from an allow-list.

A project config comes with the repository, so until the user trusts it (``config.trust``) it
is an ALLOW-LIST: a key applies only when ``TIGHTENING`` lists it AND its value makes things
stricter than the layers below (the user's config and the defaults):

- permission rules (``[permissions.rules]``, ``[permissions] defer``, ``[serve.rules]``) that
  ``deny``, ``defer`` or ``ask``, unless
  they replace a stricter rule of the user's for the same tool and pattern; they are marked
  ``untrusted`` so the permission layer lets them only tighten a decision (an ``ask`` rule
  cannot turn a preset's deny into a question);
- ``permissions.default`` stricter than the one in force;
- ``agent``: a stricter preset (build < plan < explore);
- ``sandbox.network = false``, ``sandbox.read_only = true``, ``sandbox.mode = "auto"``.

Every other key is held back, with the reason ``HELD_BACK`` gives for its section (which store
records the sessions and with which credentials, providers and where requests go, models,
MCP servers, subagent definitions, redaction patterns, telemetry, serve's address and limits...).
A key no entry names (one added later and not classified) is held back too: a test walks the
whole schema and fails until each key is classified here, so the choice is made on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from coder_es.config.catalog import AGENTS, DEFAULT_AGENT
from coder_es.config.layers import Key, Layer, Setting
from coder_es.config.problems import format_path
from coder_es.config.values import IgnoredSetting

# ``defer`` parks a question until someone answers it: stricter than asking now. ``schedule``
# (``schedule@HH:MM-HH:MM``) runs the call later without asking: only stricter than an allow.
_STRICTNESS = {"allow": 0, "schedule": 1, "ask": 2, "defer": 3, "deny": 4}


def _rank(value: str) -> int:
    return _STRICTNESS[value.partition("@")[0]]


# The presets from the most to the least capable (docs: build writes and runs, plan only looks
# and asks, explore only reads).
_AGENT_STRICTNESS = {name: i for i, name in enumerate(AGENTS)}

Check = Callable[[Key, Setting, Mapping[Key, Setting]], str | None]
"""Why the value does not tighten (held back), or None (it applies)."""


def _rule(path: Key, setting: Setting, below: Mapping[Key, Setting]) -> str | None:
    if setting.value == "allow":
        return "it allows tool calls"
    lower = below.get(path)
    if lower is not None and _rank(setting.value) < _rank(lower.value):
        return f"it relaxes your rule ({lower.value}, {lower.origin})"
    return None


def _default(path: Key, setting: Setting, below: Mapping[Key, Setting]) -> str | None:
    lower_value = below[path].value if path in below else "ask"
    if _rank(setting.value) < _rank(lower_value):
        return f"it is looser than the default in force ({lower_value})"
    return None


def _agent(path: Key, setting: Setting, below: Mapping[Key, Setting]) -> str | None:
    lower_value = below[path].value if path in below else DEFAULT_AGENT
    if _AGENT_STRICTNESS[setting.value] < _AGENT_STRICTNESS[lower_value]:
        return f"it chooses a preset that may do more than the one in force ({lower_value})"
    return None


def _only(value: object, why: str) -> Check:
    """A setting that tightens with exactly ``value``."""

    def check(path: Key, setting: Setting, below: Mapping[Key, Setting]) -> str | None:
        return None if setting.value == value else why

    return check


_SANDBOX = "it decides what shell commands can reach"

TIGHTENING: tuple[tuple[Key, Check], ...] = (
    (("permissions", "rules"), _rule),
    (("serve", "rules"), _rule),
    (("permissions", "default"), _default),
    # Sugar for ``defer`` rules: its entries are recorded under permissions.rules (above).
    (("permissions", "defer"), lambda _p, _s, _b: None),
    (("permissions", "schedule"), lambda _p, _s, _b: None),
    (("agent",), _agent),
    (("sandbox", "network"), _only(False, _SANDBOX)),
    (("sandbox", "read_only"), _only(True, _SANDBOX)),
    (("sandbox", "mode"), _only("auto", _SANDBOX)),
)

HELD_BACK: tuple[tuple[Key, str], ...] = (
    (("provider",), "it chooses which provider receives your prompts and code"),
    (("model",), "it chooses the model your prompts go to, and what they cost"),
    (("providers", "*", "base_url"), "it decides where your prompts and API key are sent"),
    (("providers", "*", "api_key_env"), "it decides which of your secrets is sent as the API key"),
    (("providers",), "it changes which models are accepted and what they are said to cost"),
    (("models",), "it changes what is known of a model (context window, prices)"),
    (("agents",), "an agent definition decides which tools run and how freely"),
    (("mcp_servers",), "MCP servers are programs and services run with your rights"),
    (("redaction", "patterns"), "a pattern runs on everything recorded and can rewrite it"),
    (("redaction", "env"), "it decides which of your variables count as secrets"),
    (("redaction", "forget_after_days"), "it decides when sealed secrets are destroyed"),
    (("redaction",), "it changes what is redacted"),
    (("serve", "allowed_origins"), "it lets web pages connect to coder-es serve"),
    (("serve", "token"), "a project config must not hold secrets"),
    (("serve", "host"), "it decides where coder-es serve listens"),
    (("serve", "port"), "it decides where coder-es serve listens"),
    (("serve",), "it changes coder-es serve's limits"),
    (("sandbox",), _SANDBOX),
    (("telemetry",), "it decides where your sessions are exported to"),
    (
        ("store", "postgres"),
        "it decides which database receives your sessions and your database credentials",
    ),
    (("store",), "it decides where and how your sessions are recorded"),
    (("hooks",), "hooks are commands run with your rights on session events"),
    (("harnesses",), "a harness is an agent program run with your rights"),
)

_UNCLASSIFIED = "it is not known to only make things stricter"


def _under(path: Key, prefix: Key) -> bool:
    return len(path) >= len(prefix) and all(
        p == "*" or p == k for p, k in zip(prefix, path, strict=False)
    )


def classify(path: Key) -> Check | str | None:
    """How ``path`` is treated untrusted: a tightening check, the reason it is held back, or
    None when no entry names it (then it is held back as unclassified)."""
    for prefix, check in TIGHTENING:
        if _under(path, prefix):
            return check
    for prefix, why in HELD_BACK:
        if _under(path, prefix):
            return why
    return None


def _why_held_back(path: Key, setting: Setting, below: Mapping[Key, Setting]) -> str | None:
    kind = classify(path)
    if kind is None:
        return _UNCLASSIFIED
    if isinstance(kind, str):
        return kind
    return kind(path, setting, below)


def hold_back(layer: Layer, below: Mapping[Key, Setting]) -> list[IgnoredSetting]:
    """Remove from ``layer`` (an untrusted project config) what it may not set; mark the
    permission rules it keeps as untrusted. ``below``: the merged lower layers."""
    ignored: list[IgnoredSetting] = []
    for path, setting in list(layer.values.items()):
        why = _why_held_back(path, setting, below)
        if why is not None:
            del layer.values[path]
            value = setting.value
            if path[0] == "hooks":  # shown as the commands that would run
                value = [h.command for h in value]
            ignored.append(IgnoredSetting(format_path(path), value, setting.origin, why))
        elif _under(path, ("permissions", "rules")):
            layer.values[path] = replace(setting, untrusted=True)
    return ignored
