"""Transaction journals that only this user's coder-es can have written.

Recovery finishes a journal outside any sandbox, so a journal is a list of orders: write, delete,
chmod, link. A repository, a cassette or another user can put a file named ``journal.json``
under ``.coder-es/tx/``; such a file must never be obeyed. Each journal is therefore sealed with
an HMAC-SHA256 under a key kept in the user's data directory (``journal.key``, created 0600 on
first use; never in the store or the workspace, and hidden from sandboxed commands), over the
exact bytes of its body, which names the transaction and the workspace it belongs to: a journal
copied to another transaction or another workspace does not open either.

What an authentic journal may order is still checked where it is applied: steps only inside the
workspace (``coder_es.workspace.confined``), sources only in that transaction's upper directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from coder_es import jsonlimit
from coder_es.userdirs import user_data_dir

KEY_FILENAME = "journal.key"
VERSION = 2
OPS = frozenset({"file", "delete", "unlink", "rmdir", "mkdir", "symlink"})
MAX_JOURNAL_BYTES = 256 << 20


class JournalRefused(Exception):
    """A journal that is not obeyed: why, in a few words."""


def key_path(environ: Mapping[str, str] = os.environ) -> Path:
    return user_data_dir(environ) / KEY_FILENAME


def load_key(environ: Mapping[str, str] = os.environ, *, create: bool) -> bytes | None:
    """The journal key (None: there is none and ``create`` is off, or it is unreadable)."""
    path = key_path(environ)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, os.urandom(32))
                os.fsync(fd)
            finally:
                os.close(fd)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        key = os.read(fd, 64)
    finally:
        os.close(fd)
    return key if len(key) == 32 else None


def seal(steps: list[dict[str, Any]], notes: list[str], *, tx: str, workspace: Path) -> bytes:
    """The journal file's bytes for these steps of transaction ``tx`` in ``workspace``."""
    key = load_key(create=True)
    if key is None:
        raise OSError(f"cannot create the journal key {key_path()}")
    body = json.dumps(
        {"tx": tx, "workspace": os.fsdecode(workspace), "steps": steps, "notes": notes},
        ensure_ascii=True,
    )
    mac = hmac.new(key, body.encode("ascii"), hashlib.sha256).hexdigest()
    return json.dumps({"version": VERSION, "body": body, "mac": mac}).encode("ascii")


def unseal(data: bytes, *, tx: str, workspace: Path) -> list[dict[str, Any]]:
    """The steps of an authentic journal of ``tx`` in ``workspace``; ``JournalRefused`` else."""
    try:
        outer = jsonlimit.loads(data)
        body, mac = outer["body"], outer["mac"]
        if outer.get("version") != VERSION or not isinstance(body, str):
            raise JournalRefused("not a journal of this coder-es version")
        if not isinstance(mac, str):
            raise JournalRefused("not sealed")
    except JournalRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError):
        raise JournalRefused("not sealed by coder-es") from None
    key = load_key(create=False)
    if key is None:
        raise JournalRefused(f"no journal key at {key_path()}")
    want = hmac.new(key, body.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise JournalRefused("its seal does not match this user's journal key")
    try:
        content = jsonlimit.loads(body)
        steps = content["steps"]
        belongs = content["tx"] == tx and content["workspace"] == os.fsdecode(workspace)
    except (ValueError, KeyError, TypeError):
        raise JournalRefused("damaged") from None
    if not belongs:
        raise JournalRefused("written for another transaction or workspace")
    if not isinstance(steps, list) or not all(_step_shape(s) for s in steps):
        raise JournalRefused("damaged steps")
    return steps


def _step_shape(step: Any) -> bool:
    return (
        isinstance(step, dict)
        and step.get("op") in OPS
        and isinstance(step.get("path"), str)
        and (step["op"] != "file" or isinstance(step.get("source"), str))
    )
