"""coder-es's own secrets stay out of what the agent runs: the environment of commands, hooks and
MCP servers.

coder-es is configured through ``CODER_ES_*`` variables, some of which are keys: the sealing key
(``CODER_ES_SEALING_KEY``: with a copy of the store it opens every sealed value) and the token of
``coder-es serve`` (``CODER_ES_SERVE_TOKEN``). A program the agent runs needs none of them, and
its output is recorded, so ``command_environ`` is an allow-list by construction: it keeps only
variables that are not ours, and drops any variable, whatever its name, whose value holds the
value of one of our keys (``MY_KEY=$CODER_ES_SEALING_KEY`` exported by a wrapper script).

``KEY_VARIABLES`` is also read by the redactor: the keys' values are exact-match redaction rules,
so a key that reaches the log some other way (the model writes it out) is stored redacted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

OWN_PREFIX = "CODER_ES_"
KEY_VARIABLES: tuple[str, ...] = ("CODER_ES_SEALING_KEY", "CODER_ES_SERVE_TOKEN")
"""The variables whose values are coder-es keys."""


def key_values(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """(variable, value) of every coder-es key set in ``environ``."""
    env = os.environ if environ is None else environ
    found = []
    for name in KEY_VARIABLES:
        value = env.get(name, "").strip()
        if value:
            found.append((name, value))
    return tuple(found)


def command_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) without coder-es's variables and key values."""
    env = os.environ if environ is None else environ
    return scrubbed(env, env)


def scrubbed(extra: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``extra`` (variables a configuration sets for a program, e.g. an MCP server's ``env``)
    under the same rule: configuration cannot pass a coder-es key on either."""
    keys = [value for _name, value in key_values(environ)]
    return {
        name: value
        for name, value in extra.items()
        if not name.startswith(OWN_PREFIX) and not any(key in value for key in keys)
    }


def dropped_names(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The names ``command_environ`` removes from ``environ``."""
    env = os.environ if environ is None else environ
    kept = command_environ(env)
    return tuple(sorted(name for name in env if name not in kept))
