"""Rewinding and checking out many files: exact results, no merge where the disk holds what the
session knew, the user's edits merged where it does not, and a user's save during the restoration
never overwritten."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backends import make_config

from coder_es.application import CoderApp
from coder_es.branching import Branching
from coder_es.domain.session import NodeId
from coder_es.store.blobs import BlobStore
from coder_es.store.config import StoreConfig
from coder_es.workspace import contents as contents_module
from coder_es.workspace import restore as restore_module


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def old(i: int) -> bytes:
    return b"".join(b"line %d of file %d\n" % (n, i) for n in range(12))


def new(i: int) -> bytes:
    return old(i).replace(b"line 3 of", b"line 3 (by the command) of")


def name(i: int) -> str:
    return f"d{i % 7}/sub{i % 3}/f{i:05}.txt"


@dataclass
class Rewritten:
    """A workspace where one shell command changed, deleted and created files."""

    app: CoderApp
    ws: Path
    sid: Any
    before: NodeId | None
    after: NodeId
    changed: list[int]
    deleted: list[int]
    created: list[int]

    @property
    def branching(self) -> Branching:
        return Branching(self.app, self.ws)

    def disk(self, i: int) -> bytes | None:
        p = self.ws / name(i)
        return p.read_bytes() if p.exists() else None

    def assert_before(self) -> None:
        for i in self.changed + self.deleted:
            assert self.disk(i) == old(i), name(i)
        for i in self.created:
            assert self.disk(i) is None, name(i)

    def assert_after(self) -> None:
        for i in self.changed + self.created:
            assert self.disk(i) == new(i), name(i)
        for i in self.deleted:
            assert self.disk(i) is None, name(i)


def rewritten(app: CoderApp, ws: Path, changed: int, deleted: int, created: int) -> Rewritten:
    """What the shell tool records for a command that rewrote, deleted and created files."""
    ws.mkdir(exist_ok=True)
    ids = list(range(changed + deleted + created))
    ch, de, cr = ids[:changed], ids[changed : changed + deleted], ids[changed + deleted :]
    for i in ch + de:
        (ws / name(i)).parent.mkdir(parents=True, exist_ok=True)
        (ws / name(i)).write_bytes(old(i))
    app.blobs.put_many([(old(i), None) for i in ch + de] + [(new(i), None) for i in ch + cr])
    session = app.start_session(workspace=str(ws))
    session.add_user_message("rewrite everything")
    before = session.head
    files_changed = []
    for i in ch:
        (ws / name(i)).write_bytes(new(i))
        files_changed.append({"path": name(i), "before": sha(old(i)), "after": sha(new(i))})
    for i in de:
        (ws / name(i)).unlink()
        files_changed.append({"path": name(i), "before": sha(old(i)), "after": None})
    for i in cr:
        (ws / name(i)).parent.mkdir(parents=True, exist_ok=True)
        (ws / name(i)).write_bytes(new(i))
        files_changed.append({"path": name(i), "before": None, "after": sha(new(i))})
    after = session.complete_tool_call(
        tool_use_id="t1", name="bash", output="", files_changed=files_changed
    )
    app.save(session)
    return Rewritten(app, ws, session.id, before, after, ch, de, cr)


@pytest.fixture
def lmdb_app(tmp_path: Path) -> Iterator[CoderApp]:
    app = CoderApp(make_config("lmdb", tmp_path, None))
    yield app
    app.close()


@pytest.fixture
def small(store_config: StoreConfig, tmp_path: Path) -> Iterator[Rewritten]:
    """60 files (enough for the restoration to use its threads), on every backend."""
    app = CoderApp(store_config)
    yield rewritten(app, tmp_path / "ws", 40, 10, 10)
    app.close()


def test_a_3000_file_rewind_restores_contents_deletions_and_creations_exactly(
    lmdb_app: CoderApp, tmp_path: Path
) -> None:
    sc = rewritten(lmdb_app, tmp_path / "ws", 2000, 500, 500)
    seen: list[tuple[int, int]] = []
    result = sc.branching.rewind(sc.sid, sc.before or "", progress=lambda d, t: seen.append((d, t)))
    sc.assert_before()
    assert not result.conflicts
    assert {f.outcome for f in result.files} == {"restored"} and len(result.files) == 3000
    # The progress callback counts every file once, in order, up to the total.
    assert [d for d, _ in seen] == list(range(1, 3001)) and {t for _, t in seen} == {3000}
    # One WorkspaceRestored listing every file, then the head move.
    events = sc.app.session_events(sc.sid)
    assert [type(e).__name__ for e in events[-2:]] == ["WorkspaceRestored", "HeadMoved"]
    assert len(events[-2].entries) == 3000
    # No temporary file is left behind.
    assert not [p for p in sc.ws.rglob("*") if p.name.endswith(".coder-es-tmp")]


def _count_merges(monkeypatch: pytest.MonkeyPatch) -> list[bytes | None]:
    """The disk side of every three-way merge the restoration computes."""
    merged: list[bytes | None] = []
    real = contents_module.merge_contents

    def counting(base: Any, disk: Any, proposed: Any, **kw: Any) -> Any:
        merged.append(disk)
        return real(base, disk, proposed, **kw)

    monkeypatch.setattr(contents_module, "merge_contents", counting)
    return merged


def test_no_merge_where_the_disk_holds_what_the_session_knew_and_user_edits_merged(
    small: Rewritten, monkeypatch: pytest.MonkeyPatch
) -> None:
    merges = _count_merges(monkeypatch)
    result = small.branching.rewind(small.sid, small.before or "")
    assert merges == [] and {f.outcome for f in result.files} == {"restored"}
    small.assert_before()

    # The user appends a line to 1 in 4 of the command's files, then the rewind runs again.
    small.branching.checkout(small.sid, small.after)
    edited = small.changed[::4]
    for i in edited:
        (small.ws / name(i)).write_bytes(new(i) + b"the user's line\n")
    result = small.branching.rewind(small.sid, small.before or "")
    outcomes = {f.path: f.outcome for f in result.files}
    assert len(merges) == len(edited)
    assert {p for p, o in outcomes.items() if o == "merged"} == {name(i) for i in edited}
    assert {o for p, o in outcomes.items() if p not in {name(i) for i in edited}} == {"restored"}
    for i in small.changed:
        want = old(i) + (b"the user's line\n" if i in edited else b"")
        assert small.disk(i) == want
    # The user's versions are in the store: the recorded disk side can be shown.
    for f in result.files:
        if f.outcome == "merged":
            assert f.disk is not None and small.app.blobs.get(f.disk).endswith(b"user's line\n")


def _user_saves_during_install(
    monkeypatch: pytest.MonkeyPatch, ws: Path, saves: dict[str, bytes | None]
) -> None:
    """The user saves files at the worst moment: after the restoration read them, before its
    rename (the window its compare-and-swap check closes)."""
    real_install, real_remove = restore_module.install_at, restore_module.remove_at

    def user_save(dir_fd: int, name: str) -> None:
        # The restoration names files by their directory's descriptor and last name.
        where = Path(os.path.realpath(f"/proc/self/fd/{dir_fd}")) / name
        rel = where.relative_to(ws.resolve()).as_posix()
        if rel in saves:
            data = saves.pop(rel)
            if data is None:
                where.unlink()
            else:
                where.write_bytes(data)

    def install_at(dir_fd: int, name: str, *args: Any, **kw: Any) -> bool:
        user_save(dir_fd, name)
        return real_install(dir_fd, name, *args, **kw)

    def remove_at(dir_fd: int, name: str, expected: bytes | None) -> bool:
        user_save(dir_fd, name)
        return real_remove(dir_fd, name, expected)

    monkeypatch.setattr(restore_module, "install_at", install_at)
    monkeypatch.setattr(restore_module, "remove_at", remove_at)


def test_a_user_saving_during_the_restoration_is_never_overwritten(
    small: Rewritten, monkeypatch: pytest.MonkeyPatch
) -> None:
    c1, c2, c3 = small.changed[:3]
    d1, n1 = small.deleted[0], small.created[0]
    saves: dict[str, bytes | None] = {
        # Not overlapping the rewind's change: merged.
        name(c1): new(c1) + b"saved during the rewind\n",
        # Overlapping it: a conflict, the user's version stays.
        name(c2): new(c2).replace(b"(by the command)", b"(by the user)"),
        # The user deletes a file the rewind changes: left deleted, reported.
        name(c3): None,
        # The user edits a file the rewind would delete: kept.
        name(n1): new(n1) + b"kept\n",
        # The user recreates a file the rewind would create, differently: kept.
        name(d1): b"the user's own file\n",
    }
    expected = dict(saves)
    _user_saves_during_install(monkeypatch, small.ws, saves)
    result = small.branching.rewind(small.sid, small.before or "")
    assert saves == {}, "every save happened"
    outcomes = {f.path: f for f in result.files}
    assert small.disk(c1) == old(c1) + b"saved during the rewind\n"
    assert outcomes[name(c1)].outcome == "merged"
    for i in (c2, n1, d1):
        assert small.disk(i) == expected[name(i)]
        assert outcomes[name(i)].outcome == "conflict"
        assert outcomes[name(i)].result == sha(expected[name(i)] or b"")
    assert small.disk(c3) is None and outcomes[name(c3)].outcome == "conflict"
    # Everything else was restored as usual.
    untouched = set(small.changed[3:] + small.deleted[1:] + small.created[1:])
    assert all(outcomes[name(i)].outcome == "restored" for i in untouched)
    for i in untouched:
        assert small.disk(i) == (None if i in small.created else old(i))


def test_restoring_a_few_files_stays_single_threaded_and_exact(
    store_config: StoreConfig, tmp_path: Path
) -> None:
    app = CoderApp(store_config)
    try:
        sc = rewritten(app, tmp_path / "ws", 2, 1, 1)
        sc.branching.rewind(sc.sid, sc.before or "")
        sc.assert_before()
        sc.branching.checkout(sc.sid, sc.after)
        sc.assert_after()
    finally:
        app.close()


def test_a_missing_target_blob_is_an_error_for_that_file_only(
    small: Rewritten, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = sha(old(small.changed[0]))

    def losing(cls: type[BlobStore]) -> None:
        """The store lost that blob (every backend reads through these two)."""
        real_read, real_read_many = cls._read, cls._read_many

        def read(self: BlobStore, digest: str) -> bytes | None:
            return None if digest == gone else real_read(self, digest)

        def read_many(self: BlobStore, digests: Any) -> dict[str, bytes]:
            return {d: r for d, r in real_read_many(self, digests).items() if d != gone}

        monkeypatch.setattr(cls, "_read", read)
        monkeypatch.setattr(cls, "_read_many", read_many)

    losing(type(small.app.blobs))
    result = small.branching.rewind(small.sid, small.before or "")
    outcomes = {f.path: f for f in result.files}
    lost = outcomes.pop(name(small.changed[0]))
    assert lost.outcome == "error" and "not in the store" in lost.detail
    assert {f.outcome for f in outcomes.values()} == {"restored"}, [
        f.to_json() for f in outcomes.values() if f.outcome != "restored"
    ]
    assert small.disk(small.changed[0]) == new(small.changed[0])
    assert type(small.app.session_events(small.sid)[-2]).__name__ == "WorkspaceRestored"


def test_a_failing_progress_display_does_not_stop_the_restoration(small: Rewritten) -> None:
    calls = []

    def broken(done: int, total: int) -> None:
        calls.append(done)
        raise RuntimeError("the terminal went away")

    result = small.branching.rewind(small.sid, small.before or "", progress=broken)
    assert calls == [1] and len(result.files) == 60 and not result.conflicts
    small.assert_before()
