"""Records that only this user's coder-es can have written.

coder-es leaves orders for a later start in files under ``.coder-es/``: a transaction's journal
(``coder_es.sandbox.journal``: what recovery writes), the record of a restoration's temporary
files and of those written beside a target on another file system (``workspace.atomic``: what
clean-up deletes). A repository, a cassette or another user can put a file of that name there;
such a file must never be obeyed. Each record is therefore sealed with an HMAC-SHA256 under a
key kept in the user's data directory (``journal.key``, created 0600 on first use; never in the
store or the workspace, and hidden from sandboxed commands), over the exact bytes of its body.
The body names what it belongs to (the workspace, the transaction, the record's own file name),
and its reader checks that: a record copied elsewhere does not open either.
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


class RecordRefused(Exception):
    """A record that is not obeyed: why, in a few words."""


def key_path(environ: Mapping[str, str] = os.environ) -> Path:
    return user_data_dir(environ) / KEY_FILENAME


def load_key(environ: Mapping[str, str] = os.environ, *, create: bool) -> bytes | None:
    """The key (None: there is none and ``create`` is off, or it is unreadable)."""
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


def seal(content: Mapping[str, Any], *, version: int) -> bytes:
    """The sealed record of ``content`` (JSON values), one line of ASCII. ``OSError`` when the
    key cannot be made."""
    key = load_key(create=True)
    if key is None:
        raise OSError(f"cannot create the journal key {key_path()}")
    body = json.dumps(content, ensure_ascii=True)
    mac = hmac.new(key, body.encode("ascii"), hashlib.sha256).hexdigest()
    return json.dumps({"version": version, "body": body, "mac": mac}).encode("ascii")


def unseal(data: bytes, *, version: int) -> dict[str, Any]:
    """The content of an authentic record of ``version``; ``RecordRefused`` else. The caller
    checks that the content belongs where it was found."""
    try:
        outer = jsonlimit.loads(data)
        body, mac = outer["body"], outer["mac"]
        if outer.get("version") != version or not isinstance(body, str):
            raise RecordRefused("not a record of this coder-es version")
        if not isinstance(mac, str):
            raise RecordRefused("not sealed")
    except RecordRefused:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError):
        raise RecordRefused("not sealed by coder-es") from None
    key = load_key(create=False)
    if key is None:
        raise RecordRefused(f"no journal key at {key_path()}")
    want = hmac.new(key, body.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, mac):
        raise RecordRefused("its seal does not match this user's journal key")
    try:
        content = jsonlimit.loads(body)
    except ValueError:
        raise RecordRefused("damaged") from None
    if not isinstance(content, dict):
        raise RecordRefused("damaged")
    return content
