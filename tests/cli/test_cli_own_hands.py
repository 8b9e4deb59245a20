"""coder-es's own hands are confined (issue 28, items 1, 4 and 6): what it does to the workspace
outside the sandbox (recovering journals, restoring files, finding its store, reading files from
outside) cannot be steered by whoever shaped the workspace: a cloned repository, a cassette,
another user, or an earlier agent command."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Cli, git, git_repo, run_process, script, text, tool, turn

from coder_es.cli.main import main
from coder_es.store.blobs import MemoryBlobStore


def _home() -> Path:
    return Path(os.environ["HOME"])


def _evil_journal(workspace: Path, payload: Path, private_dir: Path) -> dict[str, Any]:
    """What an attacker writes: steps that climb out of the workspace, a source anywhere."""
    bashrc = os.path.relpath(_home() / ".bashrc", workspace)
    return {
        "steps": [
            {
                "op": "file",
                "path": bashrc,
                "source": str(payload),
                "base": None,
                "ours": "0" * 64,
                "mode": 0o644,
                "record": False,
            },
            {"op": "mkdir", "path": os.path.relpath(private_dir, workspace), "mode": 0o777},
            {
                "op": "symlink",
                "path": os.path.relpath(_home() / ".profile", workspace),
                "link": "/x",
            },
        ],
        "notes": [],
    }


def _private_dir() -> Path:
    private = _home() / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    return private


def _untouched(private: Path) -> None:
    home = _home()
    assert not (home / ".bashrc").exists()
    assert not os.path.lexists(home / ".profile")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700


# ---------------------------------------------------------------------- item 1: planted journals


def test_a_cloned_repositorys_planted_journal_is_never_obeyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Delivery a: the repository commits .coder-es/tx/x/{lock,journal.json}; the victim clones
    it and runs a read-only agent."""
    for var in ("CODER_ES_STORE", "CODER_ES_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    origin = git_repo(tmp_path / "origin", {"README.md": "hello\n", "evil/payload": "pwned\n"})
    private = _private_dir()
    tx = origin / ".coder-es" / "tx" / "x"
    tx.mkdir(parents=True)
    (tx / "lock").write_text("")
    victim = tmp_path / "victim"
    # The journal's paths are relative to where the victim's clone will be.
    journal = _evil_journal(victim, victim / "evil" / "payload", private)
    (tx / "journal.json").write_text(json.dumps(journal))
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "planted")
    subprocess.run(["git", "clone", "-q", str(origin), str(victim)], check=True)
    assert (victim / ".coder-es/tx/x/journal.json").is_file()

    s = script(tmp_path / "s.json", turn(text("a summary")))
    r = run_process(["run", "summarise", "--agent", "explore", "--script", s], cwd=victim)
    err = r.err
    assert r.code == 0, err
    _untouched(private)
    # Left where it is, and said in one line.
    assert (victim / ".coder-es/tx/x/journal.json").is_file()
    lines = [line for line in err.splitlines() if "journal" in line]
    assert len(lines) == 1, err
    assert "did not write" in lines[0] and "nothing in it was applied" in lines[0]
    assert str(victim / ".coder-es/tx/x/journal.json") in lines[0]


def test_a_cloned_repositorys_planted_record_of_temporary_files_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same delivery for clean-up: ``.coder-es/tmp/`` commits a restoration's record
    (``*.coder-es-batch``, of a process long gone) naming a file elsewhere with a temporary
    file's name, and a scratch journal naming another. Opening the workspace deletes neither."""
    for var in ("CODER_ES_STORE", "CODER_ES_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    other_mount = tmp_path / "mnt"
    other_mount.mkdir()
    victims = [
        other_mount / ".db.1.abc.coder-es-tmp",
        other_mount / ".x.999999998.def.coder-es-tmp",
    ]
    for v in victims:
        v.write_text("not coder-es's\n")
    origin = git_repo(tmp_path / "origin", {"README.md": "hello\n"})
    scratch = origin / ".coder-es" / "tmp"
    scratch.mkdir(parents=True)
    (scratch / "999999999.abcdef012345.coder-es-batch").write_text(f"{victims[0]}\n")
    (scratch / "elsewhere").write_text(f"{victims[1]}\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "planted")
    victim = tmp_path / "victim"
    subprocess.run(["git", "clone", "-q", str(origin), str(victim)], check=True)

    s = script(tmp_path / "s.json", turn(text("a summary")))
    r = run_process(["run", "summarise", "--agent", "explore", "--script", s], cwd=victim)
    assert r.code == 0, r.err
    assert all(v.read_text() == "not coder-es's\n" for v in victims)
    assert "Traceback" not in r.err
    lines = [line for line in r.err.splitlines() if "did not write" in line]
    assert len(lines) == 2, r.err  # one per refused record, however often it is opened
    assert all("nothing it names was removed" in line for line in lines)


def test_journals_coder_es_wrote_are_still_obeyed_and_only_inside(tmp_path: Path) -> None:
    """The variants: a sealed journal copied to another transaction or workspace, a sealed one
    whose steps climb out or whose source is elsewhere, a link for the tx directory."""
    from coder_es.sandbox import recover
    from coder_es.sandbox.journal import seal
    from coder_es.sandbox.transaction import tx_root

    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    private = _private_dir()
    blobs = MemoryBlobStore()

    def planted(name: str, steps: list[dict[str, Any]], *, tx: str | None = None) -> Path:
        d = tx_root(ws) / name
        (d / "upper").mkdir(parents=True)
        (d / "lock").write_text("")
        (d / "journal.json").write_bytes(seal(steps, [], tx=tx or name, workspace=ws))
        return d

    # A genuine one: applied.
    good = planted("good", [{"op": "mkdir", "path": "made", "mode": 0o755}])
    assert recover(ws, blobs) == ["good: completed"]
    assert (ws / "made").is_dir() and not good.exists()

    # Sealed, but named for another transaction: refused, left alone.
    planted("moved", [{"op": "mkdir", "path": "made2", "mode": 0o755}], tx="other")
    # Sealed, with steps out of the workspace and a source elsewhere: not applied.
    payload = tmp_path / "payload"
    payload.write_text("pwned\n")
    out = planted("out", _evil_journal(ws, payload, private)["steps"])
    done = recover(ws, blobs)
    assert any("moved" in line and "another transaction" in line for line in done)
    assert "out: completed" in done
    assert not (ws / "made2").exists() and (tx_root(ws) / "moved").exists()
    assert not out.exists()
    _untouched(private)

    # A sealed file step whose source is outside its upper directory: refused.
    planted(
        "src",
        [
            {
                "op": "file",
                "path": "src/x.py",
                "source": str(payload),
                "base": None,
                "ours": "0" * 64,
                "mode": 0o644,
                "record": False,
            }
        ],
    )
    assert "src: completed" in recover(ws, blobs)
    assert not (ws / "src/x.py").exists() and payload.exists()

    # The store's tx directory is a link to elsewhere: nothing in it is looked at.
    shutil.rmtree(tx_root(ws))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "t").mkdir(parents=True)
    (elsewhere / "t" / "lock").write_text("")
    os.symlink(elsewhere, tx_root(ws))
    [line] = recover(ws, blobs)
    assert "symbolic link" in line and (elsewhere / "t" / "lock").exists()


def test_a_cassette_never_carries_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Delivery b: a cassette whose initial files include .coder-es/tx/...: replay refuses it
    in one line, exit 2, and nothing is written outside."""
    import hashlib

    from coder_es.data import SESSIONS

    private = _private_dir()
    good = (SESSIONS / "user-edit-merged.cassette.jsonl").read_text().splitlines()
    journal = json.dumps(
        {
            "steps": [
                {
                    "op": "symlink",
                    "path": "../" * 40 + str(_home() / ".bashrc").lstrip("/"),
                    "link": "/evil",
                },
                {"op": "mkdir", "path": "../" * 40 + str(private).lstrip("/"), "mode": 0o777},
            ]
        }
    ).encode()
    extra = []
    for name, data in (("lock", b""), ("journal.json", journal)):
        digest = hashlib.sha256(data).hexdigest()
        extra.append({"t": "blob", "digest": digest, "text": data.decode()})
        extra.append({"t": "file", "path": f".coder-es/tx/x/{name}", "blob": digest})
    evil = tmp_path / "evil.cassette.jsonl"
    evil.write_text("\n".join([*good, *(json.dumps(e) for e in extra)]) + "\n")
    capsys.readouterr()
    code = main(["replay", str(evil)])
    out, err = capsys.readouterr()
    assert not os.path.lexists(_home() / ".bashrc")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert code == 2, out + err
    assert ".coder-es/tx/x/" in out + err and "Traceback" not in out + err


def test_a_store_of_another_user_is_refused_like_git_safe_directory(tmp_path: Path) -> None:
    """Delivery c: another user owns /shared/.coder-es; the victim works in /shared/myproject."""
    shared = tmp_path / "shared"
    project = git_repo(shared / "myproject", {"a.txt": "a\n"})
    store = shared / ".coder-es"
    (store / "lmdb").mkdir(parents=True)
    (store / "tx" / "x").mkdir(parents=True)
    (store / "tx" / "x" / "lock").write_text("")
    for path in (store, store / "lmdb", store / "tx", store / "tx" / "x"):
        os.chown(path, 4242, 4242)
    env = {"CODER_ES_CEILING_DIRECTORIES": str(tmp_path)}
    r = run_process(["sessions"], cwd=project, **env)
    assert r.code == 2, r.err
    [line] = r.err.strip().splitlines()
    assert str(store) in line and "another user" in line and "CODER_ES_SAFE_DIRECTORIES" in line
    # The workspace itself owned by someone else: the same, even when named.
    os.chown(project, 4242, 4242)
    r = run_process(["--workspace", str(project), "sessions"], cwd=tmp_path, **env)
    assert r.code == 2 and str(project) in r.err and "Traceback" not in r.err
    # Accepted by the setting: used.
    accepted = run_process(
        ["sessions"], cwd=project, CODER_ES_SAFE_DIRECTORIES=f"{project}:{store}", **env
    )
    assert accepted.code != 2 or "another user" not in accepted.err, accepted.err


# ---------------------------------------------------------------------- item 4: restore via links


def test_a_rewind_never_restores_through_a_link_into_the_store(
    cli: Cli, repo: Path, tmp_path: Path
) -> None:
    evil = json.dumps({"steps": [{"op": "mkdir", "path": "../pwned", "mode": 0o777}]})
    first = script(
        tmp_path / "one.json",
        turn(
            tool("write", path="d/tx/zz/lock", content="x"),
            tool("write", path="d/tx/zz/journal.json", content=evil),
        ),
        turn(text("wrote")),
    )
    r, sid = cli.run_script("write", first)
    assert r.code == 0, r.err
    written = [n["id"] for n in cli("tree", sid, "--json").json_lines()[0]["nodes"]][-1]
    second = script(
        tmp_path / "two.json",
        turn(tool("bash", command="rm -rf d && ln -s .coder-es d")),
        turn(text("linked")),
    )
    r = cli("run", "tidy", "--session", sid, "--script", second, "--yes")
    assert r.code == 0, r.err
    assert os.path.islink(repo / "d")
    r = cli("rewind", sid, written)
    store_tx = repo / ".coder-es" / "tx" / "zz"
    assert not store_tx.exists(), os.listdir(store_tx)
    assert not (tmp_path / "pwned").exists()
    assert "restored d/tx/zz/journal.json" not in r.out
    assert r.code == 1 and "symbolic link" in r.out + r.err


def test_a_restore_never_writes_protected_names_or_through_a_final_link(tmp_path: Path) -> None:
    from coder_es.store.blobs import digest_of
    from coder_es.workspace.restore import ERROR, RESTORED, restore_files
    from coder_es.workspace.sandbox import Sandbox

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git" / "hooks").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    os.symlink(outside, ws / "link.txt")
    blobs = MemoryBlobStore()
    data = b"#!/bin/sh\necho pwned\n"
    target = blobs.put(data)
    plan = [
        (".git/hooks/pre-commit", None, target),
        (".git/config", None, target),
        (".coder-es/config.toml", None, target),
        ("link.txt", digest_of(b"mine\n"), target),
        ("deep/new/file.txt", None, target),
    ]
    got = {r.path: r for r in restore_files(Sandbox(ws), plan, blobs)}
    assert {p: got[p].outcome for p, _b, _t in plan} == {
        ".git/hooks/pre-commit": ERROR,
        ".git/config": ERROR,
        ".coder-es/config.toml": ERROR,
        "link.txt": ERROR,
        "deep/new/file.txt": RESTORED,
    }
    assert not (ws / ".git/hooks/pre-commit").exists() and not (ws / ".git/config").exists()
    assert not (ws / ".coder-es").exists() and outside.read_text() == "mine\n"
    assert (ws / "deep/new/file.txt").read_bytes() == data


# ---------------------------------------------------------------------- item 6: outside JSON


def test_deeply_nested_json_and_nul_paths_give_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    cassette = tmp_path / "deep.cassette.jsonl"
    cassette.write_text('{"t":"cassette","version":2,"x":' + deep + "}\n")
    export = tmp_path / "deep.jsonl"
    export.write_text('{"type":"header","x":' + deep + "}\n")
    for args in (["replay", str(cassette)], ["verify", str(export)]):
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        assert code == 2, (args, out, err)
        assert "Traceback" not in out + err and "nested deeper" in out + err
        assert len((out + err).strip().splitlines()) <= 2, out + err
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "a\0b.cassette.jsonl")]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and len((out + err).strip().splitlines()) == 1


# ---------------------------------------------------------------------- issue 35.2: discovery


def test_leftovers_never_stop_the_search_and_the_demo_commands_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for var in ("CODER_ES_STORE", "CODER_ES_BACKEND"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "here"
    home.mkdir()
    monkeypatch.chdir(home)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    sid = next((home / "coder-es-demo").iterdir()).name
    demo = home / "coder-es-demo" / sid
    # A stray scratch directory (and one with a transaction directory) below: passed over.
    (demo / ".coder-es" / "tmp").mkdir(parents=True, exist_ok=True)
    (home / "coder-es-demo" / ".coder-es" / "tx").mkdir(parents=True)
    r = run_process(["tree", sid], cwd=demo)
    assert r.code == 0, r.err
    assert sid in r.out
    # Every command the demo suggests works from where the user ran it.
    suggested = out.split("try next:")[1].strip().splitlines()
    assert suggested
    for line in suggested:
        args = line.split()
        assert args[0] == "coder-es"
        r = run_process(args[1:], cwd=home)
        assert r.code == 0, (line, r.err)


def test_owner_check_variants(tmp_path: Path) -> None:
    """A .coder-es that links to another user's directory; the settings that accept it."""
    from coder_es.store.discover import ForeignOwnerError, check_owner

    ws = tmp_path / "ws"
    ws.mkdir()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 4242, 4242)
    os.symlink(theirs, ws / ".coder-es")
    with pytest.raises(ForeignOwnerError, match="another user"):
        check_owner(ws, {})
    check_owner(ws, {"CODER_ES_SAFE_DIRECTORIES": "*"})
    check_owner(ws, {"CODER_ES_SAFE_DIRECTORIES": f"/nowhere:{theirs}"})
    check_owner(ws, {"CODER_ES_SAFE_DIRECTORIES": str(ws)})
    with pytest.raises(ForeignOwnerError):
        check_owner(ws, {"CODER_ES_SAFE_DIRECTORIES": "relative/path"})


def test_depth_limits_of_journals_and_exports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from coder_es import jsonlimit
    from coder_es.sandbox.journal import unseal
    from coder_es.workspace.authentic import RecordRefused

    assert jsonlimit.loads("[" * 200 + "]" * 200) is not None
    with pytest.raises(jsonlimit.JsonDepthError):
        jsonlimit.loads("[" * 201 + "]" * 201)
    with pytest.raises(jsonlimit.JsonDepthError):
        jsonlimit.loads(b'{"a":' * 300 + b"1" + b"}" * 300)
    with pytest.raises(RecordRefused):
        unseal(("[" * 50_000 + "]" * 50_000).encode(), tx="x", workspace=tmp_path)
    # A deep record after a good header: one line, exit 2.
    export = tmp_path / "e.jsonl"
    export.write_text(
        '{"format":"coder-es-audit-jsonl","session":"s"}\n' + "[" * 50_000 + "]" * 50_000 + "\n"
    )
    capsys.readouterr()
    assert main(["verify", str(export)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "line 2" in err and "nested deeper" in err and len(err.strip().splitlines()) == 1
