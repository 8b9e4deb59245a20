"""Secrets never reach the store: redaction before events exist, markers that say what went."""

from __future__ import annotations

import base64
import re
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from coder_es.application import CoderApp
from coder_es.audit.export import ExportOptions, export_session
from coder_es.domain.session import Session
from coder_es.redaction import RedactionConfigError, Redactor
from coder_es.sealing import SecretVault
from coder_es.store.config import StoreConfig
from coder_es.store.views import MemoryViewStore
from tests.audit.conftest import SECRET_KEY, inflated_states, plain_state, record_demo

SHAPES = {
    "anthropic_key": "sk-ant-api03-abcdefghijklmnopqrstuv",
    "openai_key": "sk-proj-ABCDEFGHIJKLMNOPQRSTUV12",
    "github_token": "ghp_" + "a1B2" * 9,
    "github_pat": "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
    "gitlab_token": "glpat-" + "xK3mP9qR2sT5vW8yZ1bC",
    "slack_token": "xoxb-123456789012-abcdefABCDEF",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "google_api_key": "AIza" + "SyD-9tSrke72PouQMnMX7f1Vx3kaQ5yEnWk",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P",
    "bearer_token": "Bearer abcDEF0123456789xyzUVW",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_builtin_secret_shapes_are_replaced_by_named_markers(name: str) -> None:
    redactor = Redactor.from_environ({})
    text = f"before {SHAPES[name]} after"
    out = redactor.redact_text(text)
    assert f"[REDACTED:pattern:{name}]" in out
    assert out.startswith("before ") and out.endswith(" after")
    assert redactor.redact_bytes(text.encode()) == out.encode()


def test_private_key_blocks_and_ordinary_text() -> None:
    redactor = Redactor.from_environ({})
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA\nAAAA\n-----END OPENSSH PRIVATE KEY-----"
    assert redactor.redact_text(f"key:\n{pem}\n") == "key:\n[REDACTED:pattern:private_key]\n"
    ordinary = "task-list skip Bearer of bad news: sk-1 AKIA ghp_short"
    assert redactor.redact_text(ordinary) == ordinary


@pytest.mark.parametrize(
    "text",
    [
        "task-runner-configuration==1.0",  # was "ta[REDACTED:pattern:openai_key]==1.0"
        "mask-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
        "XAKIAIOSFODNN7EXAMPLE",
        "AKIAIOSFODNN7EXAMPLEX",
        "my_ghp_" + "a1B2" * 9,
        "postgres://localhost:5432/db",
        "https://user@example.com/x",
        "sk_live_short",
    ],
)
def test_a_shape_never_matches_inside_a_longer_token(text: str) -> None:
    assert Redactor.from_environ({}).redact_text(text) == text


def test_connection_string_and_aws_secret_redact_only_the_secret_part() -> None:
    redactor = Redactor.from_environ({})
    url = "postgresql://app:S3cr3t-pa55@db.internal:5432/app"
    assert redactor.redact_text(url) == (
        "postgresql://app:[REDACTED:pattern:connection_password]@db.internal:5432/app"
    )
    line = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert redactor.redact_text(line) == (
        "aws_secret_access_key = [REDACTED:pattern:aws_secret_key]"
    )


def test_environment_values_are_whole_tokens_that_look_like_secrets() -> None:
    env = {"POSTGRES_PASSWORD": "postgres", "API_TOKEN": "changeme-changeme", "X_SECRET": "a" * 30}
    redactor = Redactor.from_environ(env)
    for text in ("django.db.backends.postgresql", "postgres", "changeme-changeme", "a" * 30):
        assert redactor.redact_text(text) == text
    random_value = "q8Zr2LmX0vT4kP9s"
    redactor = Redactor.from_environ({"DEPLOY_TOKEN": random_value})
    assert redactor.redact_text(f"x{random_value}") == f"x{random_value}"
    assert redactor.redact_text(f"t={random_value};") == "t=[REDACTED:env:DEPLOY_TOKEN];"


def test_environment_values_and_user_patterns() -> None:
    env = {
        "OPENAI_API_KEY": "opensesame-123456",
        "DB_PASSWORD_FILE_X": "hunter2-Xq9vB7",
        "MY_SETTING": "plainvalue-123",
        "SHORT_TOKEN": "abc",  # too short to redact without mangling text
        "LOW_ENTROPY_PASSWORD": "hunter2hunter2",  # a word: below the entropy threshold
        "CODER_ES_REDACT_ENV": "MY_SETTING",
        "CODER_ES_REDACT_PATTERNS": '{"ticket": "TICKET-[0-9]+"}',
    }
    redactor = Redactor.from_environ(env)
    out = redactor.redact_value(
        {"cmd": ["echo opensesame-123456", "hunter2-Xq9vB7", "plainvalue-123 abc TICKET-42"]}
    )
    assert redactor.redact_text("hunter2hunter2") == "hunter2hunter2"
    assert out == {
        "cmd": [
            "echo [REDACTED:env:OPENAI_API_KEY]",
            "[REDACTED:env:DB_PASSWORD_FILE_X]",
            "[REDACTED:env:MY_SETTING] abc [REDACTED:user:ticket]",
        ]
    }
    with pytest.raises(RedactionConfigError, match="not a valid regular expression"):
        Redactor.from_environ({"CODER_ES_REDACT_PATTERNS": '["("]'})
    with pytest.raises(RedactionConfigError, match="JSON"):
        Redactor.from_environ({"CODER_ES_REDACT_PATTERNS": "TICKET-*"})


def _persisted_bytes(config: StoreConfig) -> bytes:
    """Everything the backend wrote outside the process: files, or every PostgreSQL row."""
    if config.backend == "postgres":
        import psycopg

        schema = config.postgres_schema()
        conninfo: dict[str, Any] = dict(config.postgres_conninfo())
        chunks: list[bytes] = []
        with psycopg.connect(**conninfo) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            for (table,) in tables:
                for row in conn.execute(f'SELECT * FROM {schema}."{table}"'):
                    chunks.extend(v if isinstance(v, bytes) else str(v).encode() for v in row)
        raw = b"".join(chunks)
        return raw + inflated_states(raw)
    if config.backend == "popo":
        return b""
    raw = b"".join(p.read_bytes() for p in sorted(config.path.rglob("*")) if p.is_file())
    return raw + inflated_states(raw)


def test_planted_secret_never_reaches_the_store_or_any_export(
    store_config: StoreConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_secret = "env-secret-value-0123456789"
    monkeypatch.setenv("DEPLOY_TOKEN", env_secret)
    config = store_config
    app = CoderApp(config)
    try:
        sid = record_demo(app)  # plants SECRET_KEY in a tool output
        # A large tool output goes to a blob: the blob store seals it.
        blob = app.blobs.put(f"log line {env_secret}\n".encode())

        def more(s: Session) -> None:
            s.complete_tool_call(
                tool_use_id="t9",
                name="bash",
                output=f"export DEPLOY_TOKEN={env_secret}",
                output_blob=blob,
            )
            s.add_user_message(f"my key is {SECRET_KEY}, keep it safe")

        app.update(sid, more)
        exports = [
            export_session(app, sid, ExportOptions(format=fmt))
            for fmt in ("jsonl", "otel", "md", "html")
        ]
        assert app.blobs.get(blob) == f"log line {env_secret}\n".encode()  # sealed, exact
        assert b"[REDACTED:env:DEPLOY_TOKEN:" in app.blobs.stored_form(blob)
        # The stored records as the backend's recorder returns them (popo's only copy), with
        # compressed states decoded.
        notifications = app.recorder.select_notifications(start=None, limit=1_000_000)
        stored = b"".join(plain_state(n.state) for n in notifications)
    finally:
        app.close()
    raw = _persisted_bytes(config)
    for secret in (SECRET_KEY.encode(), env_secret.encode()):
        assert secret not in raw and secret not in stored
        for data in exports:
            assert secret not in data
    for marker in (b"[REDACTED:pattern:anthropic_key:", b"[REDACTED:env:DEPLOY_TOKEN:"):
        assert marker in stored
        # The raw bytes include the event states they hold, decoded, so the check above could
        # have seen a secret.
        assert config.backend == "popo" or marker in raw


_FAKES = [
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_" + "R8mN2xQ5vB7cL1kJ4hG6fD9sA3zW0yT5uI8o",
    "sk-proj-" + "Xq7vB2nL9pR4tY6wZ1cD3fG5hJ8kM0sA",
    "postgresql://app:S3cr3t-pa55@db:5432/app",
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet=st.characters(blacklist_characters="[", codec="utf-8"), max_size=40),
            st.sampled_from(_FAKES),
        ),
        max_size=8,
    ).map(" ".join)
)
def test_sealing_then_unsealing_gives_back_the_exact_text(text: str) -> None:
    """Whatever surrounds a delimited secret, the stored form holds no secret and opens to the
    original exactly."""
    vault = SecretVault(MemoryViewStore(), {"CODER_ES_SEALING_KEY": base64.b64encode(b"k" * 32)})
    session = uuid4()
    stored = Redactor.from_environ({}).redact_text(text, vault.sealer(session))
    for fake in _FAKES:
        assert fake.split("://")[-1].split("@")[0].split(":")[-1] not in stored or fake not in text
    assert vault.unseal_text(session, stored) == text


# Issue 21: on bytes (file contents, blobs) a rule runs only where its RE2 shape occurs, found
# without holding the GIL. The shapes must never hide a secret the rules find.
_ENV_SECRET = "Zx9-Qw3#Lm7&Pk2~Rt5.u"
_PIECES = [
    *SHAPES.values(),
    *(value[: len(value) * 2 // 3] for value in SHAPES.values()),
    _ENV_SECRET,
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "SecretKey: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "MIIEpAIBAAKCAQEA0x9",
    "postgres://app:S3cr3t-pa55@db",
    "://",
    "https://hooks.slack.com/services/T0123ABCD/B0123/xyzXYZxyzXYZ1234",
    "sk-",
    "sk_test_",
    "Bearer ",
    "\\n",
    "@",
    ":",
    "_",
    "-",
]
_FILLER = st.text(alphabet="aAz9_-./:=@'\" \t\n\x0b\f\r", max_size=4)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_PIECES), _FILLER), max_size=10).map("".join))
# Python's \s on bytes holds \v (RE2's does not): the shapes must spell it out.
@example("aws_secret_access_key\x0b=\x0bwJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
@example("-----BEGIN RSA PRIVATE KEY-----\x0bMIIEpAIBAAKCAQEA0x9\x0b-----END RSA PRIVATE KEY-----")
@example('{"a": "x\\n' + SHAPES["github_token"] + '"}')
def test_bytes_scans_find_exactly_what_the_rules_find(text: str) -> None:
    redactor = Redactor.from_environ({"DEPLOY_TOKEN": _ENV_SECRET})
    data = text.encode()
    rules = [re.compile(pattern.encode()) for _kind, _name, pattern in redactor.rules]
    assert redactor.has_secret(data) == any(rule.search(data) for rule in rules)
    # The text path runs every rule as before; the bytes path (what blobs are sealed by) agrees.
    assert redactor.redact_bytes(data) == redactor.redact_text(text).encode()


def test_every_builtin_and_environment_rule_is_screened_without_the_gil() -> None:
    # A rule with no usable shape would run on every buffer, holding the GIL (not wrong, slow):
    # each of ours has one, and none of them occurs in ordinary text.
    redactor = Redactor.from_environ({"DEPLOY_TOKEN": _ENV_SECRET})
    ordinary = b"def main():\n    return 'https://example.com/high-level/glob' # task_list sk-1\n"
    assert redactor._shapes.possible(ordinary) == [False] * len(redactor.rules)
    user = Redactor.with_settings(patterns=["zz-internal-[0-9]{6}"], environ={})
    assert user._shapes.possible(ordinary)[0] is True  # a user's pattern always runs
    assert user.has_secret(b"id zz-internal-123456") and not user.has_secret(ordinary)


@pytest.mark.parametrize(
    ("pattern", "data"),
    [
        ("zq{,3}y", b"a zqqy b"),  # Python's {,3}; RE2 would read it as characters
        ("tail-key$", b"x tail-key\n"),  # Python's $ also matches before a final newline
        (r"tok-\S{4}", b"tok-ab;!"),  # RE2's \S differs (\v): no shape, the rule always runs
        (r"(?<=id=)\d{6}(?!\d)", b"id=123456"),
    ],
)
def test_a_rule_is_never_screened_out_by_how_re2_reads_its_shape(pattern: str, data: bytes) -> None:
    redactor = Redactor.from_rules([("pattern", "odd", pattern)])
    assert re.search(pattern.encode(), data)
    assert redactor.has_secret(data)
    assert b"[REDACTED:pattern:odd]" in redactor.redact_bytes(data)
