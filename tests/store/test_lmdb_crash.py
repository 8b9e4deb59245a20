"""SIGKILL a writer process in the middle of appends, many times; every acknowledged batch must
survive intact, no batch may be half-written, and notification ids must stay contiguous."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from coder_es.store.lmdb import LMDBFactory

ROOT = Path(__file__).resolve().parents[2]
SESSION = uuid.UUID(int=42)

ACK = re.compile(r"ack \d+")

WRITER = textwrap.dedent(
    """
    import sys, uuid
    from eventsourcing.persistence import StoredEvent
    from coder_es.store.lmdb import LMDBFactory
    store, seed = sys.argv[1], int(sys.argv[2])
    recorder = LMDBFactory({"LMDB_PATH": store}).application_recorder()
    session = uuid.UUID(int=42)
    last = recorder.select_events(session, desc=True, limit=1)
    version = last[0].originator_version if last else 0
    n = 0
    while True:
        size = 1 + (seed + n) % 7
        events = [
            StoredEvent(session, v, "t", f"{v}:".encode() + bytes([v % 251]) * (50 + v % 300))
            for v in range(version + 1, version + 1 + size)
        ]
        recorder.insert_events(events)
        version += size
        n += 1
        # One write per line: a kill may still cut it, and a cut line acknowledges nothing.
        sys.stdout.write(f"ack {version}\\n")
        sys.stdout.flush()
    """
)


def expected_state(v: int) -> bytes:
    return f"{v}:".encode() + bytes([v % 251]) * (50 + v % 300)


def _kill_a_writer_at_random(
    script: str, store: Path, round_: int, ack: re.Pattern[str], rng: random.Random
) -> list[str]:
    """Start a writer process, wait until it is appending (its first line), kill -9 it at a
    random moment within 150 ms; every line it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(store), str(round_)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().rstrip("\n")
    assert ack.fullmatch(first), proc.stderr.read() if proc.stderr else first
    time.sleep(rng.uniform(0.0, 0.15))
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return [first, *out.splitlines()]


def test_sigkill_during_appends_loses_no_acknowledged_event(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = random.Random(1234)
    acked = 0
    for round_ in range(12):
        for line in _kill_a_writer_at_random(WRITER, store, round_, ACK, rng):
            if ACK.fullmatch(line):
                acked = max(acked, int(line.split()[1]))

    factory = LMDBFactory({"LMDB_PATH": str(store)})
    recorder = factory.application_recorder()
    events = recorder.select_events(SESSION)
    versions = [e.originator_version for e in events]
    # Everything acknowledged is there; anything after it is whole batches the writer committed
    # but was killed before printing.
    assert versions == list(range(1, len(versions) + 1))
    assert len(versions) >= acked > 0
    assert all(e.state == expected_state(e.originator_version) for e in events)
    notifications = recorder.select_notifications(None, len(versions) + 10)
    assert [n.id for n in notifications] == list(range(1, len(versions) + 1))
    assert [n.originator_version for n in notifications] == versions
    # The store still takes writes after all those kills.
    from eventsourcing.persistence import StoredEvent

    recorder.insert_events([StoredEvent(SESSION, len(versions) + 1, "t", b"after")])
    assert recorder.max_notification_id() == len(versions) + 1
    factory.close()


THREADED_WRITER = textwrap.dedent(
    """
    import sys, threading, uuid
    from eventsourcing.persistence import StoredEvent
    from coder_es.store.lmdb import LMDBFactory
    store, seed = sys.argv[1], int(sys.argv[2])
    recorder = LMDBFactory({"LMDB_PATH": store}).application_recorder()
    out = threading.Lock()

    def write(k):
        session = uuid.UUID(int=100 + k)
        last = recorder.select_events(session, desc=True, limit=1)
        version = last[0].originator_version if last else 0
        n = 0
        while True:
            size = 1 + (seed + k + n) % 9
            first, end = version + 1, version + size
            # Each event names its batch, so a half-written batch shows.
            events = [
                StoredEvent(session, v, "t", f"{first}-{end}:".encode() + b"x" * (40 + v % 200))
                for v in range(first, end + 1)
            ]
            recorder.insert_events(events)
            version = end
            n += 1
            with out:
                sys.stdout.write(f"ack {k} {version}\\n")
                sys.stdout.flush()

    for k in range(4):
        threading.Thread(target=write, args=(k,), daemon=True).start()
    threading.Event().wait()
    """
)

THREADED_ACK = re.compile(r"ack (\d) (\d+)")


def test_sigkill_during_group_commits_of_writer_threads_leaves_only_whole_batches(
    tmp_path: Path,
) -> None:
    """Four threads of one process share commits; killed at random moments, the store keeps
    every acknowledged batch and, of the rest, only whole batches: never part of a group's."""
    store = tmp_path / "store"
    rng = random.Random(4321)
    acked = [0] * 4
    for round_ in range(8):
        for line in _kill_a_writer_at_random(THREADED_WRITER, store, round_, THREADED_ACK, rng):
            found = THREADED_ACK.fullmatch(line)
            if found:
                k, version = int(found[1]), int(found[2])
                acked[k] = max(acked[k], version)

    factory = LMDBFactory({"LMDB_PATH": str(store)})
    recorder = factory.application_recorder()
    total = 0
    for k in range(4):
        events = recorder.select_events(uuid.UUID(int=100 + k))
        versions = [e.originator_version for e in events]
        assert versions == list(range(1, len(versions) + 1))
        assert len(versions) >= acked[k]
        for e in events:
            first, end = map(int, e.state.split(b":")[0].split(b"-"))
            assert 1 <= first <= e.originator_version <= end <= len(versions), (k, e)
        total += len(versions)
    assert sum(acked) > 0
    notifications = recorder.select_notifications(None, total + 10)
    assert [n.id for n in notifications] == list(range(1, total + 1))
    # A batch's events were appended together: consecutive notification ids.
    batch_of = [(n.originator_id, n.state.split(b":")[0]) for n in notifications]
    runs = [key for i, key in enumerate(batch_of) if i == 0 or batch_of[i - 1] != key]
    assert len(runs) == len(set(runs))
    factory.close()
