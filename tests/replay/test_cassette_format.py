"""The cassette file: stable layout, redaction, upcasting, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_helpers import DATA, NAMES, SESSIONS, record_session, text, tool

from coder_es.redaction import Redactor
from replay.cassette import (
    FORMAT,
    VERSION,
    CassetteError,
    dumps,
    export_session,
    load_cassette,
    loads,
)
from replay.engine import ReplayOptions, replay_cassette


@pytest.mark.parametrize("name", NAMES)
def test_a_cassette_is_one_canonical_json_object_per_line_in_a_stable_order(name: str) -> None:
    path = SESSIONS / f"{name}.cassette.jsonl"
    raw = path.read_text()
    cassette = load_cassette(path)
    # Loading and writing again gives the same bytes: the layout is canonical.
    assert dumps(cassette) == raw
    records = [json.loads(line) for line in raw.splitlines()]
    kinds = [r["t"] for r in records]
    assert kinds[0] == "cassette" and records[0]["format"] == FORMAT
    assert records[0]["version"] == VERSION
    # header, events in version order, files by path, blobs by digest
    order = {"cassette": 0, "event": 1, "file": 2, "blob": 3}
    assert [order[k] for k in kinds] == sorted(order[k] for k in kinds)
    assert [r["version"] for r in records if r["t"] == "event"] == list(
        range(1, len(cassette.events) + 1)
    )
    files = [r["path"] for r in records if r["t"] == "file"]
    blobs = [r["digest"] for r in records if r["t"] == "blob"]
    assert files == sorted(files) and blobs == sorted(blobs)


def test_the_initial_workspace_holds_touched_and_untouched_files() -> None:
    cassette = load_cassette(SESSIONS / "branched-rewind.cassette.jsonl")
    # greet.py did not exist when the session started; README.md was never touched.
    assert cassette.files["greet.py"] is None
    assert cassette.blob(str(cassette.files["README.md"])).startswith(b"# Greet")


def test_secrets_are_redacted_everywhere_and_the_cassette_still_replays(
    workspace: Path,
) -> None:
    secret = "tok-7d1e0c9a5b3f"
    app, sid = record_session(
        workspace,
        {"deploy.cfg": f"host = example.org\ntoken = {secret}\n", "notes.md": "# notes\n"},
        [
            [text("Reading the config."), tool("read", path="deploy.cfg")],
            [tool("edit", path="deploy.cfg", old_string="example.org", new_string="example.net")],
            [text(f"Done; the token {secret} is unchanged.")],
        ],
        f"switch the host; do not touch {secret}",
    )
    redactor = Redactor.from_environ({"DEPLOY_TOKEN": secret})
    cassette = export_session(app, sid, redactor=redactor)
    app.close()
    raw = dumps(cassette)
    assert secret not in raw
    assert "[REDACTED:env:DEPLOY_TOKEN]" in raw
    assert cassette.redactions["markers"] == ["[REDACTED:env:DEPLOY_TOKEN]"]
    assert cassette.redactions["blobs"] >= 2  # the file before and after the edit
    # Redacted blobs were re-keyed consistently: the cassette loads (digests verified) and
    # replays identically, in live mode from the redacted files too.
    reloaded = loads(raw, "redacted.cassette.jsonl")
    for mode in ("verify", "live"):
        report = replay_cassette(reloaded, ReplayOptions(mode=mode))
        assert report.ok, report.render()


def test_a_version_0_cassette_is_upcast_on_load() -> None:
    path = DATA / "v0-hello.cassette.json"
    assert json.loads(path.read_text())["version"] == 0
    cassette = load_cassette(path)
    assert cassette.session == "0b6c2f3e-5d1a-4c1e-9b7a-2f4e6d8c0a11"
    assert [e.kind for e in cassette.events][:3] == [
        "Started",
        "UserMessageAdded",
        "ModelResponded",
    ]
    assert cassette.events[0].topic == "coder_es.domain.session:Session.Started"
    # Version 0 had no initial workspace: it is derived from what the events saw.
    assert cassette.blob(str(cassette.files["hello.txt"])) == b"hello, world\n"
    # Written again it is a version 1 cassette that loads to the same thing.
    again = loads(dumps(cassette), "again.cassette.jsonl")
    assert json.loads(dumps(cassette).splitlines()[0])["version"] == VERSION
    assert again.events == cassette.events and dict(again.files) == dict(cassette.files)
    # And the current code replays it.
    report = replay_cassette(cassette, ReplayOptions(mode="live"))
    assert report.ok, report.render()


def _header_line(**changes: object) -> str:
    header = {"t": "cassette", "format": FORMAT, "version": VERSION, "session": "s"}
    header.update(changes)
    return json.dumps(header)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ("hello there\n", "not a coder-es cassette"),
        ('{"something": "else"}\n', "not a coder-es cassette"),
        (_header_line(version=99) + "\n", "version 99 cassette"),
        (_header_line() + "\n{not json\n", "line 2 is not JSON"),
        (_header_line() + "\n", "no Started event"),
        (
            _header_line() + '\n{"t": "blob", "digest": "' + "0" * 64 + '", "text": "x"}\n',
            "does not match its digest",
        ),
        (_header_line() + '\n{"t": "file", "path": "../escape", "blob": null}\n', "unsafe"),
    ],
)
def test_an_unreadable_cassette_gets_a_clear_error(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.cassette.jsonl"
    path.write_text(content)
    with pytest.raises(CassetteError, match=message):
        load_cassette(path)


def test_a_missing_cassette_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CassetteError, match=r"cannot read .*nowhere\.cassette\.jsonl"):
        load_cassette(tmp_path / "nowhere.cassette.jsonl")
