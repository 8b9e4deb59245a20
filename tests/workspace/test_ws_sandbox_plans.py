"""Read-only commands reuse mount plans kept by their content in the store's
``sandbox-plans/`` directory. A plan found there under the right name is only used when it
holds exactly the expected bytes: a planted file (or a link to one) would otherwise decide what
``mount -a`` mounts inside the sandbox."""

from __future__ import annotations

import os
from pathlib import Path

from coder_es.sandbox.namespaces import SandboxSpec, _write_plans


def _spec(tmp_path: Path) -> SandboxSpec:
    plans = tmp_path / "sandbox-plans"
    plans.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    return SandboxSpec(ws, ws, None, None, plans, shared_plans=True)


def test_a_planted_plan_under_the_expected_name_is_replaced(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    first, last = _write_plans(spec, "FIRST\n", "LAST\n")
    evil = "/home /tmp/x none bind,rw 0 0\n"
    first.write_text(evil)
    last.write_text(evil)
    again = _write_plans(spec, "FIRST\n", "LAST\n")
    assert again == (first, last)
    assert first.read_text() == "FIRST\n" and last.read_text() == "LAST\n"


def test_a_link_under_the_expected_name_is_replaced_not_followed(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    first, last = _write_plans(spec, "FIRST\n", "LAST\n")
    target = tmp_path / "victim"
    target.write_text("the user's file\n")
    for path in (first, last):
        path.unlink()
        path.symlink_to(target)
    _write_plans(spec, "FIRST\n", "LAST\n")
    assert target.read_text() == "the user's file\n"
    assert not first.is_symlink() and first.read_text() == "FIRST\n"
    assert not last.is_symlink() and last.read_text() == "LAST\n"


def test_an_unchanged_plan_is_reused_as_it_is(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    first, _ = _write_plans(spec, "FIRST\n", "LAST\n")
    before = os.stat(first).st_ino
    _write_plans(spec, "FIRST\n", "LAST\n")
    assert os.stat(first).st_ino == before
