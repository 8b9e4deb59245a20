"""Finding secrets in what is about to be stored, and replacing them by markers.

Redaction applies to what is STORED and what LEAVES the machine, never to an effect: the agent's
tools, commands, files and model requests always carry the real values (``coder_es.sealing``
explains how the stored form is turned back into them). A found secret is replaced by a marker
that names what was removed, ``[REDACTED:<kind>:<name>:<id>]`` (``id`` names the sealed value in
the session's sealed-secret store; exports and cassettes redacting on their own write
``[REDACTED:<kind>:<name>]``), so a reader of the log knows something was there and why it is gone.

What is found (precision matters as much as recall: a false positive mangles the user's record):
- well-known credential shapes (``BUILTIN_PATTERNS``), each anchored on token boundaries (a
  pattern never matches inside a longer identifier such as ``task-runner-configuration``);
- the values of environment variables whose names match ``*_API_KEY``, ``*_TOKEN``, ``*_SECRET``,
  ``*PASSWORD*`` (plus the names or globs in ``CODER_ES_REDACT_ENV``, comma-separated, or the
  configuration's ``redaction.env``), as WHOLE tokens only, and only when the value looks like a
  secret: at least ``MIN_ENV_SECRET_LENGTH`` characters and at least ``MIN_ENV_SECRET_ENTROPY``
  bits of Shannon entropy per character (``POSTGRES_PASSWORD=postgres`` or ``API_TOKEN=changeme``
  would otherwise redact ordinary words everywhere while protecting nothing);
- user patterns: ``CODER_ES_REDACT_PATTERNS`` holds a JSON list of regular expressions, or a JSON
  object mapping a name to a regular expression (the name appears in the marker); the
  configuration's ``redaction.patterns`` likewise. A user pattern is taken as written, compiled
  with RE2 (``coder_es.user_patterns``: linear time whatever the pattern), and applies to
  CONTENT only (``CONTENT_FIELDS``): never to what names things in an event (ids, node and blob
  references, paths of the event model, agent, provider and model names), which the rest of
  coder-es reads back (a pattern such as ``.+`` (any text) would otherwise replace every id).

The builtin shapes follow the rule ids and shapes of gitleaks' default rules
(https://github.com/gitleaks/gitleaks, MIT) for the credentials users actually leak; see
docs/DESIGN.md ("Secrets are sealed") for why they are curated here rather than bundled.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from coder_es.errors import UsageError
from coder_es.redaction_shapes import ShapeFilter, re2_shape
from coder_es.secret_env import key_values
from coder_es.user_patterns import UserPatternError, compile_user_pattern, searchable

MIN_ENV_SECRET_LENGTH = 12
MIN_ENV_SECRET_ENTROPY = 3.0
"""Bits per character. Random base64/hex keys of this length score 3.3-4.5; words, version
strings and defaults (``postgres``, ``changeme123``, ``localhost:5432``) score below."""
DEFAULT_ENV_GLOBS: tuple[str, ...] = ("*_API_KEY", "*_TOKEN", "*_SECRET", "*PASSWORD*")
ENV_NAMES_VAR = "CODER_ES_REDACT_ENV"
PATTERNS_VAR = "CODER_ES_REDACT_PATTERNS"

# Token boundaries: a credential never starts or ends inside a longer run of token characters.
# The start is checked just AFTER the first character (``_start``), so that every pattern begins
# with a literal: the regular expression engine then skips ahead to candidate positions instead of
# trying each alternative at every byte (40x faster, see bench/redaction.py). An escaped newline
# or tab in JSON or a string literal (``\\nghp_...``) also starts a token.
_TOKEN = r"A-Za-z0-9_\-"
_E = rf"(?![{_TOKEN}])"


def _start(first: str, token: str = _TOKEN) -> str:
    """``first`` (one character or class), not preceded by a token character."""
    return rf"{first}(?:(?<![{token}].)|(?<=\\[nrt].))"


# (name, regular expression). A named group ``s`` marks the secret part when the match carries
# context (``scheme://user:PASSWORD@host``); otherwise the whole match is the secret. Order
# matters where shapes overlap: the more specific name wins (sk-ant- before sk-proj- before sk-).
BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private_key",
        # The body is base64 and headers (also JSON-escaped): never code between two constants.
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=\s:,.\\\-]{16,}?"
        r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----",
    ),
    ("anthropic_key", _start("s") + r"k-ant-[A-Za-z0-9_\-]{20,}" + _E),
    ("openai_key", _start("s") + r"k-(?:proj|svcacct|admin|None)-[A-Za-z0-9_\-]{20,}" + _E),
    (
        "openai_key",
        _start("s") + r"k-(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{32,}" + _E,
    ),
    ("github_token", _start("g") + r"h[pousr]_[A-Za-z0-9]{36,255}" + _E),
    ("github_pat", _start("g") + r"ithub_pat_[A-Za-z0-9_]{22,255}" + _E),
    ("gitlab_token", _start("g") + r"l(?:pat|dt|ptt|rt|cbt|oas)-[A-Za-z0-9_\-]{20,}" + _E),
    ("slack_token", _start("x") + r"ox[abeoprs]-[0-9]{6,}-[A-Za-z0-9\-]{8,}" + _E),
    ("slack_webhook", r"https://hooks\.slack\.com/services/(?P<s>T[A-Za-z0-9_/]{20,})"),
    ("stripe_key", _start("[sr]") + r"k_(?:live|test|prod)_[A-Za-z0-9]{16,}" + _E),
    ("google_api_key", _start("A") + r"Iza[A-Za-z0-9_\-]{35}" + _E),
    (
        "aws_access_key",
        _start("A", "A-Za-z0-9") + r"(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}(?![A-Za-z0-9])",
    ),
    (
        # secret_access_key / SecretAccessKey / aws_secret_key, then the 40-character value.
        "aws_secret_key",
        r"(?:secret|SECRET|Secret)(?:_?(?:access|ACCESS|Access)_?|(?<=(?i:aws_secret))_?"
        r"|(?<=(?i:awssecret)))(?:key|KEY|Key)[\"']?\s{0,3}[:=]{1,2}\s{0,3}[\"']?"
        r"(?P<s>(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=]))",
    ),
    ("jwt", _start("e") + r"yJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}" + _E),
    (
        # The scheme is checked behind ``://`` so that the search starts from that literal.
        "connection_password",
        r"://(?<=[A-Za-z0-9+.\-]://)[^\s:/@\"'<>]{0,256}:"
        r"(?P<s>[^\s:/@\"'<>{}$]{3,256})@[A-Za-z0-9.\-\[]",
    ),
    ("bearer_token", r"Bearer (?P<s>[A-Za-z0-9._~+/\-]{16,}=*)" + _E),
)

# A rule's regular expression only runs on text holding one of its keywords (lowercase; checked
# on the lowercased text, a fast substring search): gitleaks' prefilter, and what keeps the cost
# per megabyte far below zlib's in the common case of text with no credential in it.
KEYWORDS: dict[str, tuple[str, ...]] = {
    "private_key": ("-----begin",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "github_token": ("gh",),
    "github_pat": ("github_pat_",),
    "gitlab_token": ("gl",),
    "slack_token": ("xox",),
    "slack_webhook": ("hooks.slack.com",),
    "stripe_key": ("k_",),
    "google_api_key": ("aiza",),
    "aws_access_key": ("akia", "asia", "abia", "acca"),
    "aws_secret_key": ("secret",),
    "jwt": ("eyj",),
    "connection_password": ("://",),
    "bearer_token": ("bearer ",),
}


# Where a match starts relative to its keyword (every pattern starts at its keyword otherwise):
# only those places are tried, so ordinary text full of ``sk-`` or ``://`` stays cheap.
_OFFSET = {"stripe_key": -1, "slack_webhook": -len("https://")}


# Rules whose shape is loose (anything between ``user:`` and ``@``, after ``Bearer``): a value
# that is a placeholder or holds a space once URL-decoded is documentation, not a secret.
_PLACEHOLDER = re.compile(
    r"(?i)[A-Z_\-]*(?:PASS(?:WORD)?|PWD|SECRET|TOKEN|KEY)[A-Z_\-]*|\*+|x+|\.{3}|<[^>]*>"
    r"|\[[^\]]*\]|%\(\w+\)s|\$\w+"
)
_CHECKED = frozenset({"connection_password", "bearer_token"})


def _plausible(value: str) -> bool:
    return not _PLACEHOLDER.fullmatch(value) and not any(c.isspace() for c in unquote(value))


def _occurrences(lowered: Any, keyword: Any) -> Iterator[int]:
    at = lowered.find(keyword)
    while at >= 0:
        yield at
        at = lowered.find(keyword, at + 1)


class RedactionConfigError(UsageError):
    """A redaction setting cannot be used (a malformed pattern list or regular expression)."""


# Event fields that hold content (what the user, the model, a tool or a file said): the only
# places user patterns apply. Every other field names something coder-es reads back (ids,
# parents, blob digests, paths of files_changed / FileObserved / EditApplied, agent, provider,
# model, outcomes, reasons such as "rewind"): the builtin shapes and environment values still
# apply there (a credential never belongs in an id), a user's pattern does not.
CONTENT_FIELDS = frozenset(
    {"content", "blocks", "input", "output", "subject", "summary", "message", "title"}
)
# Inside content, the values under these keys name things (a block's type, a tool call's id and
# name, an image's media type, a thinking block's signature the provider checks).
STRUCTURE_KEYS = frozenset({"type", "id", "tool_use_id", "name", "media_type", "signature"})
# A blob that is JSON (a request manifest naming the blobs of its system prompt, tools and base
# request; the tool definitions; a JSON file read) keeps these values too.
BLOB_STRUCTURE_KEYS = STRUCTURE_KEYS | frozenset(
    {"format", "model", "system", "tools", "base", "keep", "role", "input_schema", "description"}
)


def marker(kind: str, name: str, id: str | None = None) -> str:
    """The text that replaces a redacted secret: it names what was removed, never the value."""
    return f"[REDACTED:{kind}:{name}]" if id is None else f"[REDACTED:{kind}:{name}:{id}]"


MARKER = re.compile(r"\[REDACTED:([a-z]+):([A-Za-z0-9_.*?\-]+)(?::([0-9a-f]{12}))?\]")
"""A marker in stored text; group 3 is the sealed value's id when it has one."""


def entropy_bits(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def looks_like_secret(value: str) -> bool:
    """The threshold an environment value must pass to be redacted wherever it appears."""
    return (
        len(value) >= MIN_ENV_SECRET_LENGTH
        and not any(ch.isspace() for ch in value)
        and entropy_bits(value) >= MIN_ENV_SECRET_ENTROPY
    )


Seal = Callable[[str, str, str], str]
"""``seal(kind, name, value) -> id``: keeps the value somewhere safe and names it."""


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
            compile_user_pattern(pattern)
        except UserPatternError as e:
            msg = f"{PATTERNS_VAR}: pattern {name!r} is not a valid regular expression: {e}"
            raise RedactionConfigError(msg) from None
    return tuple(items)


def _env_rule(value: str) -> str:
    # A whole token: never the middle of a longer word (``postgres`` in ``postgresql``).
    first, rest = re.escape(value[0]), re.escape(value[1:])
    head = _start(first, "A-Za-z0-9_") if re.match(r"\w", value) else first
    tail = r"(?![A-Za-z0-9_])" if re.search(r"\w$", value) else ""
    return head + rest + tail


@dataclass(frozen=True)
class _Rule:
    kind: str
    name: str
    text: Any
    """A compiled ``re`` pattern, or an RE2 one for a user's (same methods used here)."""
    raw: Any
    keywords: tuple[str, ...]
    """Lowercase; empty: always run."""
    keywords_raw: tuple[bytes, ...]
    secret_group: int
    """The group number of ``s`` (the secret part of the match); 0: the whole match."""
    shape: str | None
    """Where the rule can match, for RE2 (``coder_es.redaction_shapes``); None: always run."""


def _compile(kind: str, name: str, pattern: str) -> _Rule:
    if kind == "pattern" and (name, pattern) in _BUILTIN:
        return _builtin_rule(name, pattern)
    return _compiled_rule(kind, name, pattern)


_BUILTIN = frozenset(BUILTIN_PATTERNS)


@functools.cache
def _builtin_rule(name: str, pattern: str) -> _Rule:
    """A builtin shape, compiled once per process (the same constants in every redactor)."""
    return _compiled_rule("pattern", name, pattern)


def _compiled_rule(kind: str, name: str, pattern: str) -> _Rule:
    if kind == "user":
        try:
            text, raw = compile_user_pattern(pattern)
        except UserPatternError as e:
            raise RedactionConfigError(
                f"redaction pattern {name!r} is not a valid regular expression: {e}"
            ) from None
        group = text.groupindex.get("s", 0)
        return _Rule(kind, name, text, raw, (), (), group, None)
    try:
        text = re.compile(pattern)
        raw = re.compile(pattern.encode("utf-8", "surrogateescape"))
    except re.error as e:
        msg = f"redaction pattern {name!r} does not compile: {e}"
        raise RedactionConfigError(msg) from e
    # An environment value's rule starts with its literal first character: fast without one.
    keywords = KEYWORDS.get(name, ()) if kind == "pattern" else ()
    raw_keywords = tuple(k.encode("utf-8", "surrogateescape") for k in keywords)
    shape = None
    if kind in ("pattern", "env"):  # ours; a user's pattern is taken as written, and run as such
        with contextlib.suppress(ValueError):
            shape = re2_shape(pattern)
    group = text.groupindex.get("s", 0)
    return _Rule(kind, name, text, raw, keywords, raw_keywords, group, shape)


@dataclass(frozen=True)
class Redactor:
    """Replaces secrets in text, bytes and JSON values with ``[REDACTED:...]`` markers."""

    rules: tuple[tuple[str, str, str], ...]
    """(kind, name, regular expression); where two match at one place, the first listed wins."""

    @classmethod
    def from_config(
        cls, config: RedactionConfig, environ: Mapping[str, str] | None = None
    ) -> Redactor:
        env = os.environ if environ is None else environ
        rules: list[tuple[str, str, str]] = []
        # coder-es's own keys are exact-match rules whatever they look like (a sealing key
        # opens every sealed value: it is a secret even where it scores low).
        own = dict(key_values(env))
        # Environment values first: naming the variable says more than naming a shape.
        secrets = sorted(
            [
                *own.items(),
                *(
                    (name, value)
                    for name, value in env.items()
                    if name not in own
                    and looks_like_secret(value)
                    and any(fnmatch.fnmatchcase(name, g) for g in config.env_globs)
                ),
            ],
            key=lambda item: (-len(item[1]), item[0]),
        )
        rules += [("env", name, _env_rule(value)) for name, value in secrets]
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
        """Raises ``RedactionConfigError`` for a rule that does not compile. The builtin shapes
        (constants that always compile) are compiled when text is first redacted: a command
        that only reads the store never pays for them (start-up time)."""
        for kind, name, pattern in rules:
            if not (kind == "pattern" and (name, pattern) in _BUILTIN):
                _compile(kind, name, pattern)
        return cls(rules=tuple(rules))

    @functools.cached_property
    def _compiled(self) -> tuple[_Rule, ...]:
        return tuple(_compile(kind, name, pattern) for kind, name, pattern in self.rules)

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def prepare(self) -> None:
        """Compile now what the first redaction of text or bytes would compile (the rules and
        their RE2 screens): for a caller with time to spare before its first redaction."""
        if self.rules:
            _ = self._keyword_screen, self._all_keyworded, self._shapes

    @functools.cached_property
    def _all_keyworded(self) -> bool:
        return all(rule.keywords for rule in self._compiled)

    @functools.cached_property
    def _keyword_screen(self) -> Any:
        """An RE2 alternation of every rule keyword, matched on the UTF-8 bytes of a text (a
        substring of the text is a substring of its bytes; surrogate escapes stay bytes):
        whether any keyword occurs in a text at all."""
        import re2

        words = sorted(
            {k.encode("utf-8", "surrogateescape") for r in self._compiled for k in r.keywords}
        )
        if not words:
            return None
        options = re2.Options()
        options.max_mem = 64 << 20
        options.encoding = re2.Options.Encoding.LATIN1  # a byte is a character
        return re2.compile(b"|".join(re2.escape(w) for w in words), options)

    @functools.cached_property
    def _shapes(self) -> ShapeFilter:
        return ShapeFilter([rule.shape for rule in self._compiled])

    # ------------------------------------------------------------------ applying

    def _matches(self, data: Any, as_bytes: bool) -> Iterator[tuple[int, re.Match[Any]]]:
        """Every rule's matches (rule index, match). A rule with keywords is only tried where
        one occurs (gitleaks' prefilter, per place rather than per file). On bytes, a rule whose
        shape occurs nowhere is not tried at all: that is found without holding the GIL, so the
        reads of large files run side by side (issue 21)."""
        lowered = None
        any_keyword = True
        if not as_bytes:
            # Text (an event's fields): one linear RE2 pass for every keyword at once. Most
            # values (paths, digests, short texts) hold none, and then no keyworded rule can
            # match anywhere in them. Bytes have their own screen, run without the GIL.
            screen = self._keyword_screen
            lowered = data.lower()
            any_keyword = (
                screen is None
                or screen.search(lowered.encode("utf-8", "surrogateescape")) is not None
            )
            if not any_keyword and self._all_keyworded:
                return
        may_match = self._shapes.screen(data) if as_bytes and self.rules else None
        places: dict[Any, list[int]] = {}  # keyword -> where it occurs (one pass each)
        for index, rule in enumerate(self._compiled):
            if may_match is not None and not may_match(index):
                continue
            pattern = rule.raw if as_bytes else rule.text
            keywords = rule.keywords_raw if as_bytes else rule.keywords
            if not keywords:
                subject = searchable(data) if rule.kind == "user" and not as_bytes else data
                yield from ((index, m) for m in pattern.finditer(subject))
                continue
            if not any_keyword:
                continue
            offset = _OFFSET.get(rule.name, 0) if rule.kind == "pattern" else 0
            searched_to = 0
            if lowered is None:
                lowered = data.lower()
            for keyword in keywords:
                if keyword not in places:
                    places[keyword] = list(_occurrences(lowered, keyword))
            found = [at for k in keywords for at in places[k]]
            for at in sorted(found) if len(keywords) > 1 else found:
                if at + offset < searched_to or at + offset < 0:
                    continue  # inside the last match
                m = pattern.match(data, at + offset)
                if m is not None:
                    searched_to = m.end()
                    yield index, m

    def _spans(self, data: Any, as_bytes: bool) -> list[tuple[int, int, _Rule]]:
        """Where secrets are, left to right, without overlaps (the earlier rule wins a tie)."""
        found = []
        for index, m in self._matches(data, as_bytes):
            rule = self._compiled[index]
            group = rule.secret_group
            start, end = m.span(group) if group and m.start(group) >= 0 else m.span()
            if rule.name in _CHECKED and rule.kind == "pattern":
                value = data[start:end]
                if not _plausible(value.decode("utf-8", "replace") if as_bytes else value):
                    continue
            if end > start:
                found.append((start, index, end, rule))
        found.sort(key=lambda f: (f[0], f[1]))
        spans: list[tuple[int, int, _Rule]] = []
        for start, _index, end, rule in found:
            if not spans or start >= spans[-1][1]:
                spans.append((start, end, rule))
        return spans

    def _sub(self, data: Any, seal: Seal | None, as_bytes: bool) -> Any:
        if not self._compiled or not data:
            return data
        spans = self._spans(data, as_bytes)
        if not spans:
            return data
        pieces: list[Any] = []
        done = 0
        for start, end, rule in spans:
            value = data[start:end]
            text_value = value.decode("utf-8", "surrogateescape") if as_bytes else value
            tag = marker(
                rule.kind, rule.name, seal(rule.kind, rule.name, text_value) if seal else None
            )
            pieces += [data[done:start], tag.encode() if as_bytes else tag]
            done = end
        pieces.append(data[done:])
        return (b"" if as_bytes else "").join(pieces)

    def redact_text(self, text: str, seal: Seal | None = None) -> str:
        """``text`` with every secret replaced by its marker (``seal`` names each value)."""
        return str(self._sub(text, seal, False))

    def redact_bytes(self, data: bytes, seal: Seal | None = None) -> bytes:
        """Like ``redact_text`` for raw bytes (tool output, file content): works on any encoding
        that keeps ASCII as is (UTF-8, Latin-1), and leaves bytes without a secret unchanged."""
        return bytes(self._sub(data, seal, True))

    def redact_blob(self, data: bytes, seal: Seal | None = None) -> bytes:
        """A blob's bytes redacted (what the blob store and cassettes keep). User patterns
        apply to content: a blob that is JSON (coder-es's request manifests and tool
        definitions name other blobs and tools) keeps its keys and the values under
        ``BLOB_STRUCTURE_KEYS``, and is written back as sorted compact JSON when something was
        redacted; any other blob is text."""
        names = self._structural
        if names is self or data[:1] not in (b"{", b"[", b'"'):
            return self.redact_bytes(data, seal)
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            return self.redact_bytes(data, seal)
        redacted = self._redact_content(value, seal, BLOB_STRUCTURE_KEYS)
        if redacted == value:
            return data
        # Sorted keys, no spaces (like coder_es.domain.chain.canonical_json, which this
        # lower layer does not import); ASCII escapes keep lone surrogates valid JSON.
        return json.dumps(redacted, sort_keys=True, separators=(",", ":")).encode()

    def has_secret(self, data: bytes) -> bool:
        return next(iter(self._matches(data, True)), None) is not None

    def redact_value(self, value: Any, seal: Seal | None = None) -> Any:
        """A JSON-native value (str, list, dict, numbers...) with secrets in its strings redacted.

        Dictionary keys are kept: they are field names, not data."""
        if isinstance(value, str):
            return self.redact_text(value, seal)
        if isinstance(value, dict):
            return {k: self.redact_value(v, seal) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_value(v, seal) for v in value]
        if isinstance(value, tuple):
            return tuple(self.redact_value(v, seal) for v in value)
        return value

    def redact_kwargs(self, kwargs: dict[str, Any], seal: Seal | None = None) -> dict[str, Any]:
        """Event keyword arguments with secrets redacted (what ``Session.trigger_event`` uses).
        User patterns apply to content only (``CONTENT_FIELDS``)."""
        if not self.rules:
            return kwargs
        names = self._structural
        return {
            k: self._redact_content(v, seal) if k in CONTENT_FIELDS else names.redact_value(v, seal)
            for k, v in kwargs.items()
        }

    redact_fields = redact_kwargs
    """An event's fields (a cassette's, an export's), redacted the same way."""

    @functools.cached_property
    def _structural(self) -> Redactor:
        """The rules that may touch what names things: every rule but the user's patterns."""
        if not any(kind == "user" for kind, _, _ in self.rules):
            return self
        return Redactor(tuple(r for r in self.rules if r[0] != "user"))

    def _redact_content(
        self, value: Any, seal: Seal | None, structure: frozenset[str] = STRUCTURE_KEYS
    ) -> Any:
        if isinstance(value, str):
            return self.redact_text(value, seal)
        if isinstance(value, dict):
            names = self._structural
            return {
                k: names.redact_value(v, seal)
                if k in structure
                else self._redact_content(v, seal, structure)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._redact_content(v, seal, structure) for v in value]
        if isinstance(value, tuple):
            return tuple(self._redact_content(v, seal, structure) for v in value)
        return value

    def describe(self) -> list[str]:
        """The markers this redactor can produce (no secret values)."""
        return list(dict.fromkeys(marker(kind, name) for kind, name, _ in self.rules))
