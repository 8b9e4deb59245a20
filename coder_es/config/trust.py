"""Workspace trust records: which project config files the user reviewed, by content hash.

A project's ``.coder-es/config.toml`` arrives with whatever repository the user cloned. Settings
in it that loosen permissions, add MCP servers or change where requests go apply only once the
user ran ``coder-es trust`` for that file (``config.untrusted`` says which settings those are).
Like direnv's ``allow``, the record is the file's sha256: any change to the file needs trusting
again; so does any change to a workspace file its hooks run (``config.hook_scripts``: the
digest then covers those files, listed under ``scripts``).

The records live in the user config directory (``coder_es.userdirs.user_config_dir()``), outside
every workspace and store, in one JSON file written atomically::

    {"version": 1, "workspaces": {"/real/path/.coder-es/config.toml": {"sha256": "…",
                                                                        "trusted_at": "…"}}}
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coder_es.errors import UsageError
from coder_es.userdirs import user_config_dir

TRUST_FILE_NAME = "trusted-workspaces.json"
VERSION = 1

TrustStatus = Literal["trusted", "untrusted", "changed"]


class TrustFileError(UsageError):
    """The trust records cannot be read or written; the message names the file and why."""


def trust_file(environ: Mapping[str, str] = os.environ) -> Path:
    return user_config_dir(environ) / TRUST_FILE_NAME


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key(config_file: Path) -> str:
    # The real path: a symlinked workspace and its target are one workspace.
    return os.path.realpath(config_file)


@dataclass(frozen=True)
class TrustState:
    """Whether the project config with content hash ``sha256`` is trusted."""

    config_file: Path
    status: TrustStatus
    sha256: str
    problem: str = ""
    """Why the records could not be read (they count as empty then)."""
    scripts: dict[str, str] = field(default_factory=dict)
    """The workspace files the config's hooks name, with their digests (``hook_scripts``)."""
    changed_scripts: tuple[str, ...] = ()
    """Of those, the ones that changed since the trust (when the trust recorded them)."""

    @property
    def trusted(self) -> bool:
        return self.status == "trusted"

    def explain(self) -> str:
        """Why untrusted settings are ignored, in one phrase."""
        if self.status == "changed" and self.changed_scripts:
            shown = ", ".join(self.changed_scripts[:3])
            why = f"a script its hooks run changed since you trusted it ({shown})"
        elif self.status == "changed":
            why = "it changed since you trusted it"
        else:
            why = "you have not trusted this workspace"
        if self.problem:
            why += f" ({self.problem})"
        return f"{why}; review {self.config_file}, then run `coder-es trust`"


class TrustStore:
    """The user's trust records (one JSON file in the user config directory)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        self.path = trust_file(environ)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise TrustFileError(f"{self.path}: cannot read the trust records: {e.strerror}") from e
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            msg = f"{self.path}: the trust records are damaged (not JSON: {e}); delete the file"
            raise TrustFileError(msg) from None
        entries = data.get("workspaces") if isinstance(data, dict) else None
        if not isinstance(entries, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in entries.values()
        ):
            msg = f"{self.path}: the trust records are damaged (unexpected layout); delete the file"
            raise TrustFileError(msg)
        return entries

    def _write(self, entries: dict[str, dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = json.dumps({"version": VERSION, "workspaces": entries}, indent=2, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=".trust-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def state(
        self, config_file: Path, sha256: str, scripts: Mapping[str, str] | None = None
    ) -> TrustState:
        """The trust of ``config_file`` whose trust digest is ``sha256`` (its bytes', and the
        hook ``scripts``' it names: ``config.hook_scripts``). Damaged records count as no
        records (nothing is trusted), with the problem named."""
        scripts = dict(scripts or {})
        try:
            entry = self._read().get(_key(config_file))
        except TrustFileError as e:
            return TrustState(config_file, "untrusted", sha256, str(e), scripts)
        if entry is None:
            return TrustState(config_file, "untrusted", sha256, scripts=scripts)
        status: TrustStatus = "trusted" if entry["sha256"] == sha256 else "changed"
        changed: tuple[str, ...] = ()
        before = entry.get("scripts")
        if status == "changed" and isinstance(before, dict):
            names = sorted(set(before) | set(scripts))
            changed = tuple(n for n in names if before.get(n) != scripts.get(n))
        return TrustState(config_file, status, sha256, scripts=scripts, changed_scripts=changed)

    def trust(
        self, config_file: Path, sha256: str, scripts: Mapping[str, str] | None = None
    ) -> None:
        entries = self._read()
        entry: dict[str, Any] = {
            "sha256": sha256,
            "trusted_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        if scripts:
            entry["scripts"] = dict(sorted(scripts.items()))
        entries[_key(config_file)] = entry
        self._write(entries)

    def revoke(self, config_file: Path) -> bool:
        """Forget ``config_file``; False when it was not trusted."""
        entries = self._read()
        if entries.pop(_key(config_file), None) is None:
            return False
        self._write(entries)
        return True
