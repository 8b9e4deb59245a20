"""A recorded session with every kind of event the audit trail renders, on a real store."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import pytest

from coder_es.application import CoderApp
from coder_es.domain.session import Session
from coder_es.store.compression import (
    DICTIONARY_V1,
    MIN_SIZE,
    TAG_V1,
    EventCompressor,
    EventReader,
)
from coder_es.store.config import StoreConfig

SECRET_KEY = "sk-ant-api03-" + "Zq9" * 12  # an Anthropic-shaped key planted in tool output


@dataclass
class Recorded:
    app: CoderApp
    session: UUID


def record_demo(app: CoderApp) -> UUID:
    """A small but complete session: a turn with a read, a write (with a diff), a denied bash,
    an edit merged with a concurrent change, a fork, a label and a rewind."""
    blobs = app.blobs
    old = blobs.put(b"def add(a, b):\n    return a - b\n")
    new = blobs.put(b"def add(a, b):\n    return a + b\n")
    user_side = blobs.put(b"# maths\ndef add(a, b):\n    return a - b\n")
    merged = blobs.put(b"# maths\ndef add(a, b):\n    return a + b\n")
    key_file = blobs.put(b"API_KEY=not-really\n")
    s = app.start_session(workspace="/w", title="fix add", model="claude-x", provider="anthropic")
    sid = s.id

    def turn(session: Session) -> None:
        first = session.add_user_message("fix the add function")
        reply = session.record_model_response(
            blocks=[
                {"type": "text", "text": "Reading the file."},
                {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "calc.py"}},
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 120, "output_tokens": 30},
            provider="anthropic",
            model="claude-x",
            request_id="req_1",
        )
        session.request_tool_call(
            node=reply, tool_use_id="t1", name="read", input={"path": "calc.py"}
        )
        session.decide_permission(
            tool_use_id="t1",
            tool="read",
            subject="calc.py",
            decision="allow",
            matched_rule="read *",
        )
        session.complete_tool_call(
            tool_use_id="t1",
            name="read",
            output="def add(a, b):\n    return a - b\n",
            duration_ms=3,
        )
        reply2 = session.record_model_response(
            blocks=[
                {
                    "type": "tool_use",
                    "id": "t2",
                    "name": "write",
                    "input": {"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"},
                }
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 200, "output_tokens": 40},
            provider="anthropic",
            model="claude-x",
        )
        session.request_tool_call(
            node=reply2,
            tool_use_id="t2",
            name="write",
            input={"path": "calc.py", "content": "def add(a, b):\n    return a + b\n"},
        )
        session.decide_permission(
            tool_use_id="t2",
            tool="write",
            subject="calc.py",
            decision="allow",
            decided_by="user",
            scope="always",
            pattern="calc.py",
        )
        session.complete_tool_call(
            tool_use_id="t2",
            name="write",
            output="wrote calc.py",
            files_changed=[{"path": "calc.py", "before": old, "after": new}],
        )
        session.apply_edit(
            path="calc.py",
            tool_use_id="t2",
            base=old,
            disk=user_side,
            proposed=new,
            result=merged,
            outcome="merged",
        )
        reply3 = session.record_model_response(
            blocks=[
                {
                    "type": "tool_use",
                    "id": "t3",
                    "name": "bash",
                    "input": {"command": "cat secrets/.env"},
                }
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 260, "output_tokens": 12},
            provider="anthropic",
            model="claude-x",
        )
        session.request_tool_call(
            node=reply3, tool_use_id="t3", name="bash", input={"command": "cat secrets/.env"}
        )
        session.decide_permission(
            tool_use_id="t3",
            tool="bash",
            subject="cat secrets/.env",
            decision="deny",
            reason="reads secrets",
        )
        session.complete_tool_call(
            tool_use_id="t3",
            name="bash",
            is_error=True,
            output=f"permission denied; token was {SECRET_KEY}",
        )
        session.record_model_response(
            blocks=[{"type": "text", "text": "Fixed: add now adds."}],
            stop_reason="end_turn",
            usage={"input_tokens": 300, "output_tokens": 8},
            provider="anthropic",
            model="claude-x",
        )
        session.label(first, "start")
        session.move_head(first, reason="fork")
        session.add_user_message("actually, also write a secrets file")
        reply4 = session.record_model_response(
            blocks=[
                {
                    "type": "tool_use",
                    "id": "t4",
                    "name": "write",
                    "input": {"path": "secrets/key.txt", "content": "API_KEY=not-really\n"},
                }
            ],
            stop_reason="tool_use",
            usage={"input_tokens": 50, "output_tokens": 20},
            provider="anthropic",
            model="claude-x",
        )
        session.request_tool_call(
            node=reply4,
            tool_use_id="t4",
            name="write",
            input={"path": "secrets/key.txt", "content": "API_KEY=not-really\n"},
        )
        session.complete_tool_call(
            tool_use_id="t4",
            name="write",
            output="wrote",
            files_changed=[{"path": "secrets/key.txt", "before": None, "after": key_file}],
        )
        session.restore_workspace(
            node=first,
            entries=[
                {
                    "path": "calc.py",
                    "outcome": "restored",
                    "base": merged,
                    "disk": merged,
                    "target": old,
                    "result": old,
                }
            ],
        )

    app.update(sid, turn)
    return sid


@pytest.fixture
def sqlite_config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(backend="sqlite", path=tmp_path / "store")


@contextmanager
def recording(config: StoreConfig) -> Iterator[Recorded]:
    """The demo session recorded in a store on ``config``; the app is closed afterwards."""
    app = CoderApp(config)
    try:
        yield Recorded(app, record_demo(app))
    finally:
        app.close()


@pytest.fixture
def recorded(sqlite_config: StoreConfig) -> Iterator[Recorded]:
    with recording(sqlite_config) as r:
        yield r


@pytest.fixture
def recorded_on_each_backend(store_config: StoreConfig) -> Iterator[Recorded]:
    """The demo session on popo, SQLite, LMDB and PostgreSQL in turn."""
    with recording(store_config) as r:
        yield r


@pytest.fixture
def recorded_persistent(persistent_store_config: StoreConfig) -> Iterator[Recorded]:
    """The demo session on each backend a later command-line call can read back."""
    with recording(persistent_store_config) as r:
        yield r


def damage_lmdb_values(lmdb_dir: Path, marker: bytes, forged: bytes, *, limit: int = 0) -> int:
    """Replace ``marker`` by ``forged`` in the stored values of every database of an LMDB store
    (at most ``limit`` values when given): the way someone editing the file would, decoding a
    compressed event state and encoding it again. Returns how many values changed."""
    import lmdb

    changed = 0
    env = lmdb.open(str(lmdb_dir), max_dbs=64, readonly=False, lock=True)
    try:
        names: list[bytes | None] = [None]
        with env.begin() as txn:
            names += [key for key, _ in txn.cursor()]
        for name in names:
            try:
                db = env.open_db(name, create=False) if name is not None else None
            except lmdb.Error:
                continue
            with env.begin(write=True, db=db) as txn:
                for key, value in list(txn.cursor()):
                    text = plain_state(value)
                    if marker in text and (not limit or changed < limit):
                        txn.put(key, repacked(value, text.replace(marker, forged)))
                        changed += 1
    finally:
        env.close()
    return changed


# Tampering the way someone who knows the store's encoding would: event states are stored
# compressed (coder_es.store.compression), so a tamper helper edits their JSON text and encodes
# it again, as the store's own compressor does. What verification must find is unchanged.
_READER = EventReader()
_PACKER = EventCompressor()


def plain_state(value: bytes) -> bytes:
    """A stored value as JSON text when it is a compressed event state; else as it is."""
    if not isinstance(value, bytes) or value[:1] != TAG_V1:
        return value  # damage of another kind (a number, text) is left as it is
    try:
        return _READER.decompress(value)
    except Exception:  # not an event state (a blob record, a view): left as it is
        return value


def repacked(stored: bytes, text: bytes) -> bytes:
    """``text`` encoded the way ``stored`` was: compressed again when it was."""
    return (
        _PACKER.compress(text) if stored[:1] == TAG_V1 and plain_state(stored) != stored else text
    )


def pack_state(value: bytes) -> bytes:
    """What the store's compressor writes for a JSON state (small ones stay JSON)."""
    if isinstance(value, bytes) and value[:1] == b"{" and len(value) >= MIN_SIZE:
        return _PACKER.compress(value)
    return value


@contextmanager
def sqlite_tampering(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection to a SQLite store whose event states are JSON text while it is open (SQL can
    edit them in place), encoded again by the store's compressor when it closes."""
    with sqlite3.connect(path) as conn:
        conn.create_function("plain_state", 1, plain_state, deterministic=True)
        conn.create_function("pack_state", 1, pack_state, deterministic=True)
        conn.execute("UPDATE stored_events SET state = plain_state(state)")
        yield conn
        conn.execute("UPDATE stored_events SET state = pack_state(state)")


def inflated_states(raw: bytes) -> bytes:
    """Every compressed event state found in ``raw`` (a store's files or rows), decoded: what
    someone reading those bytes could read."""
    out: list[bytes] = []
    view = memoryview(raw)
    at = raw.find(TAG_V1)
    while at >= 0:
        d = zlib.decompressobj(-15, DICTIONARY_V1)
        try:
            text = d.decompress(view[at + 1 :], 1 << 22)
        except zlib.error:
            text = b""
        if d.eof and text[:1] == b"{":
            out.append(text)
        at = raw.find(TAG_V1, at + 1)
    return b"".join(out)
