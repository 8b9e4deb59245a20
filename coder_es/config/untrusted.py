"""What an untrusted project config may not do: the settings held back until ``coder-es trust``.

A project config comes with the repository, so until the user trusts it (``config.trust``) it
may only make things stricter. Held back:

- every key under a prefix of ``SENSITIVE`` (``*`` stands for any one key): choosing the
  provider, where requests and the API key go, MCP servers (programs started with the user's
  rights), browser origins allowed to reach ``coder-es serve``, agent definitions, the shell
  sandbox, telemetry export. New settings of that kind are added to this list;
- permission rules (``[permissions.rules]``, ``[serve.rules]``) that ``allow``, or that replace a
  stricter rule of the user's for the same tool and pattern;
- ``permissions.default`` looser than the one the user's layers give.

What stays: ``deny`` and ``ask`` rules and a stricter default, marked ``untrusted`` so the
permission layer lets them only tighten a decision (an ``ask`` rule cannot turn a preset's deny
into a question), and every other setting (models, prices, redaction, limits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from coder_es.config.problems import format_path
from coder_es.config.schema import Key, Layer, Setting
from coder_es.config.values import IgnoredSetting

SENSITIVE: tuple[tuple[Key, str], ...] = (
    (("provider",), "it chooses which provider receives your prompts and code"),
    (("providers", "*", "base_url"), "it decides where your prompts and API key are sent"),
    (("providers", "*", "api_key_env"), "it decides which of your secrets is sent as the API key"),
    (("mcp_servers",), "MCP servers are programs and services run with your rights"),
    (("hooks",), "hooks are commands run with your rights on the session's events"),
    (("serve", "allowed_origins"), "it lets web pages connect to coder-es serve"),
    # Sections other parts add (listed ahead, so they are held back from the day they exist):
    (("agents",), "an agent definition decides which tools run and how freely"),
    (("sandbox",), "it decides what shell commands can reach"),
    (("telemetry",), "it decides where your sessions are exported to"),
)

RULE_TABLES: tuple[Key, ...] = (("permissions", "rules"), ("serve", "rules"))
_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}


def _under(path: Key, prefix: Key) -> bool:
    return len(path) >= len(prefix) and all(
        p == "*" or p == k for p, k in zip(prefix, path, strict=False)
    )


def _why_held_back(path: Key, setting: Setting, below: Mapping[Key, Setting]) -> str | None:
    for prefix, why in SENSITIVE:
        if _under(path, prefix):
            return why
    if any(_under(path, table) for table in RULE_TABLES):
        if setting.value == "allow":
            return "it allows tool calls"
        lower = below.get(path)
        if lower is not None and _STRICTNESS[setting.value] < _STRICTNESS[lower.value]:
            return f"it relaxes your rule ({lower.value}, {lower.origin})"
        return None
    if path == ("permissions", "default"):
        lower_value = below[path].value if path in below else "ask"
        if _STRICTNESS[setting.value] < _STRICTNESS[lower_value]:
            return f"it is looser than the default in force ({lower_value})"
    return None


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
    model = layer.values.get(("model",))
    if model is not None and any(i.path == "provider" for i in ignored):
        # A model named for the provider held back would be checked against the user's.
        del layer.values[("model",)]
        why = "it names a model of the provider that is not applied"
        ignored.append(IgnoredSetting("model", model.value, model.origin, why))
    return ignored
