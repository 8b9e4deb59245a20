"""Keeping secrets out of the store: redaction before anything is recorded.

The hash chain covers an event's content, so a secret that reached an event could never be removed
without breaking the chain. Redaction therefore happens BEFORE an event is constructed:
``Session.trigger_event`` passes its keyword arguments through ``Session.redactor`` (installed by
``CoderApp`` from the environment). Content stored as blobs (tool outputs, raw model streams, file
snapshots taken from tool output) does not pass through an event: whoever stores it calls
``Redactor.redact_bytes`` / ``redact_text`` first (the agent loop does so for tool outputs).

Redaction is never silent: a secret is replaced by a marker that names what was found, e.g.
``[REDACTED:env:OPENAI_API_KEY]`` or ``[REDACTED:pattern:github_token]``, so a reader of the log
knows something was there and why it is gone.

What is redacted:
- well-known credential shapes (``BUILTIN_PATTERNS``): Anthropic/OpenAI keys, GitHub tokens, AWS
  access key ids, Slack tokens, ``Bearer`` tokens, PEM private key blocks;
- the values of environment variables whose names match ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``,
  ``*PASSWORD*`` (plus the names or globs listed in ``CODER_ES_REDACT_ENV``, comma-separated), when
  the value is at least ``MIN_SECRET_LENGTH`` characters (shorter values such as ``1`` or ``yes``
  would redact ordinary text and protect nothing);
- user patterns: ``CODER_ES_REDACT_PATTERNS`` holds a JSON list of regular expressions, or a JSON
  object mapping a name to a regular expression (the name appears in the marker).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coder_es.errors import UsageError

MIN_SECRET_LENGTH = 8
DEFAULT_ENV_GLOBS: tuple[str, ...] = ("*_API_KEY", "*_TOKEN", "*_SECRET", "*PASSWORD*")
ENV_NAMES_VAR = "CODER_ES_REDACT_ENV"
PATTERNS_VAR = "CODER_ES_REDACT_PATTERNS"

# Order matters where shapes overlap: the more specific name wins (sk-ant- before sk-).
BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----",
    ),
    ("anthropic_key", r"sk-ant-[A-Za-z0-9_\-]{16,}"),
    ("openai_key", r"sk-[A-Za-z0-9_\-]{16,}"),
    ("github_token", r"gh[pousr]_[A-Za-z0-9]{30,}"),
    ("github_pat", r"github_pat_[A-Za-z0-9_]{22,}"),
    ("aws_access_key", r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"),
    ("slack_token", r"xox[bpars]-[A-Za-z0-9\-]{10,}"),
    ("bearer_token", r"(?<=Bearer )[A-Za-z0-9._~+/\-]{8,}=*"),
)


class RedactionConfigError(UsageError):
    """A redaction setting cannot be used (a malformed pattern list or regular expression)."""


def marker(kind: str, name: str) -> str:
    """The text that replaces a redacted secret: it names what was removed, never the value."""
    return f"[REDACTED:{kind}:{name}]"


@dataclass(frozen=True)
class RedactionConfig:
    env_globs: tuple[str, ...] = DEFAULT_ENV_GLOBS
    """Environment variable names (or globs) whose values are secrets."""
    patterns: tuple[tuple[str, str], ...] = ()
    """User patterns: (name, regular expression)."""
    builtin: bool = True
    """Whether the well-known credential shapes are redacted."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RedactionConfig:
        env = os.environ if environ is None else environ
        globs = list(DEFAULT_ENV_GLOBS)
        extra = env.get(ENV_NAMES_VAR, "")
        globs += [g.strip() for g in extra.split(",") if g.strip()]
        return cls(env_globs=tuple(globs), patterns=_parse_patterns(env.get(PATTERNS_VAR, "")))


def _parse_patterns(raw: str) -> tuple[tuple[str, str], ...]:
    if not raw.strip():
        return ()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        msg = f"{PATTERNS_VAR} must be a JSON list of regular expressions or an object: {e}"
        raise RedactionConfigError(msg) from e
    if isinstance(value, list):
        items = [(f"user{i + 1}", p) for i, p in enumerate(value)]
    elif isinstance(value, dict):
        items = list(value.items())
    else:
        msg = f"{PATTERNS_VAR} must be a JSON list or object, not {type(value).__name__}"
        raise RedactionConfigError(msg)
    for name, pattern in items:
        if not isinstance(pattern, str) or not isinstance(name, str):
            msg = f"{PATTERNS_VAR}: every pattern must be a string"
            raise RedactionConfigError(msg)
        try:
            re.compile(pattern)
        except re.error as e:
            msg = f"{PATTERNS_VAR}: pattern {name!r} is not a valid regular expression: {e}"
            raise RedactionConfigError(msg) from e
    return tuple(items)


@dataclass(frozen=True)
class Redactor:
    """Replaces secrets in text, bytes and JSON values with ``[REDACTED:kind:name]`` markers."""

    rules: tuple[tuple[str, str, str], ...]
    """(kind, name, regular expression), tried as one alternation, first listed wins."""
    _text: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _bytes: re.Pattern[bytes] | None = field(default=None, compare=False, repr=False)
    _markers: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_config(
        cls, config: RedactionConfig, environ: Mapping[str, str] | None = None
    ) -> Redactor:
        env = os.environ if environ is None else environ
        rules: list[tuple[str, str, str]] = []
        # Environment values first: naming the variable says more than naming a shape.
        secrets = sorted(
            (
                (name, value)
                for name, value in env.items()
                if len(value) >= MIN_SECRET_LENGTH
                and any(fnmatch.fnmatchcase(name, g) for g in config.env_globs)
            ),
            key=lambda item: (-len(item[1]), item[0]),
        )
        rules += [("env", name, re.escape(value)) for name, value in secrets]
        rules += [("user", name, pattern) for name, pattern in config.patterns]
        if config.builtin:
            rules += [("pattern", name, pattern) for name, pattern in BUILTIN_PATTERNS]
        return cls.from_rules(rules)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        return cls.from_config(RedactionConfig.from_environ(environ), environ)

    @classmethod
    def with_settings(
        cls,
        env_vars: Sequence[str] = (),
        patterns: Sequence[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Redactor:
        """The environment's redaction plus configured variable names and patterns (the
        ``[redaction]`` section of the configuration files)."""
        base = RedactionConfig.from_environ(environ)
        extra = tuple((f"config{i + 1}", p) for i, p in enumerate(patterns))
        config = RedactionConfig(
            env_globs=(*base.env_globs, *env_vars), patterns=(*base.patterns, *extra)
        )
        return cls.from_config(config, environ)

    @classmethod
    def from_rules(cls, rules: list[tuple[str, str, str]]) -> Redactor:
        if not rules:
            return cls(rules=())
        joined = "|".join(f"(?P<r{i}>{pattern})" for i, (_, _, pattern) in enumerate(rules))
        try:
            text = re.compile(joined)
            raw = re.compile(joined.encode("utf-8", "surrogateescape"))
        except re.error as e:
            msg = f"redaction patterns do not compile together: {e}"
            raise RedactionConfigError(msg) from e
        markers = tuple(marker(kind, name) for kind, name, _ in rules)
        return cls(rules=tuple(rules), _text=text, _bytes=raw, _markers=markers)

    # ------------------------------------------------------------------ applying

    def _replace(self, match: re.Match[Any]) -> Any:
        index = int(match.lastgroup[1:]) if match.lastgroup else 0
        return self._markers[index]

    def redact_text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker."""
        if self._text is None or not text:
            return text
        return self._text.sub(self._replace, text)

    def redact_bytes(self, data: bytes) -> bytes:
        """Like ``redact_text`` for raw bytes (tool output, file content): works on any encoding
        that keeps ASCII as is (UTF-8, Latin-1), and leaves bytes without a secret unchanged."""
        if self._bytes is None or not data:
            return data
        return self._bytes.sub(lambda m: self._replace(m).encode(), data)

    def redact_value(self, value: Any) -> Any:
        """A JSON-native value (str, list, dict, numbers...) with secrets in its strings redacted.

        Dictionary keys are kept: they are field names, not data."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {k: self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.redact_value(v) for v in value)
        return value

    def redact_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Event keyword arguments with secrets redacted (what ``Session.trigger_event`` uses)."""
        if self._text is None:
            return kwargs
        return {k: self.redact_value(v) for k, v in kwargs.items()}

    def describe(self) -> list[str]:
        """The markers this redactor can produce (no secret values)."""
        return list(self._markers)
