"""Which of a turn's file changes belong to which of the harness's tool calls.

The whole turn runs in one transaction; at each tool boundary the stream shows (a tool result),
the upper directory is walked (without applying anything) and compared with the previous walk:
what differs is that call's. Walking costs what the turn changed, not the workspace's size.

At the end, the transaction is applied through the three-way merge; the merge's outcome for a
path (the disk's ``before``, the applied ``after``, a conflict) replaces the first call's
``before`` and the last call's ``after`` of that path, so the recorded changes chain exactly
from what the disk held to what it holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coder_es.sandbox.transaction import Applied
from coder_es.sandbox.upper import walk_upper
from coder_es.workspace.ignore import IgnoreMatcher

ABSENT = None
STORE_DIRNAME = ".coder-es"

Snapshot = dict[str, str | None]  # path -> content hash (None: deleted)


@dataclass
class Attribution:
    workspace: Path
    upper: Path
    put: Callable[[bytes], str]
    _ignore: IgnoreMatcher | None = None
    last: Snapshot = field(default_factory=dict)
    calls: dict[str, dict[str, list[str | None]]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)

    def _recorded(self, rel: str) -> bool:
        if rel == STORE_DIRNAME or rel.startswith(STORE_DIRNAME + "/"):
            return False
        if self._ignore is None:
            self._ignore = IgnoreMatcher(self.workspace)
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            if self._ignore.is_ignored("/".join(parts[:depth]), True):
                return False
        return not self._ignore.is_ignored(rel, False)

    def snapshot(self) -> Snapshot:
        out: Snapshot = {}
        for e in walk_upper(str(self.upper)):
            if e.kind == "file" and self._recorded(e.path):
                try:
                    with open(e.source, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                out[e.path] = self.put(data)
            elif e.kind == "deleted" and self._recorded(e.path):
                out[e.path] = None
        return out

    def _lower(self, rel: str) -> str | None:
        try:
            with open(self.workspace / rel, "rb") as f:
                return hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return None

    def boundary(self, call_id: str) -> None:
        """The call ``call_id`` ended: the changes since the previous boundary are its."""
        now = self.snapshot()
        changed: dict[str, list[str | None]] = {}
        for path in now.keys() | self.last.keys():
            before = self.last[path] if path in self.last else self._lower(path)
            after = now[path] if path in now else self._lower(path)
            if before != after:
                changed[path] = [before, after]
        self.last = now
        if changed:
            self.calls.setdefault(call_id, {}).update(changed)
        if call_id not in self.order:
            self.order.append(call_id)

    def files_changed(
        self, applied: list[Applied], fallback_call: str | None
    ) -> dict[str, list[dict[str, Any]]]:
        """Per call, its ``files_changed`` records, reconciled with what the apply did.

        A path the apply changed that no boundary saw (changed after the last one) goes to
        ``fallback_call``.
        """
        touched: dict[str, list[str]] = {}
        for call in self.order:
            for path in self.calls.get(call, {}):
                touched.setdefault(path, []).append(call)
        records: dict[str, dict[str, dict[str, Any]]] = {
            call: {p: {"path": p, "before": ba[0], "after": ba[1]} for p, ba in changes.items()}
            for call, changes in self.calls.items()
        }
        for a in applied:
            if not a.recorded:
                continue
            calls = touched.get(a.path)
            if not calls:
                if fallback_call is None:
                    continue
                calls = [fallback_call]
                records.setdefault(fallback_call, {})[a.path] = {"path": a.path}
            first = records[calls[0]][a.path]
            first["before"] = a.before
            last = records[calls[-1]][a.path]
            last["after"] = a.after
            if a.outcome != "direct":
                last["outcome"] = a.outcome
            if a.proposed is not None:
                last["proposed"] = a.proposed
        applied_paths = {a.path for a in applied}
        out: dict[str, list[dict[str, Any]]] = {}
        for call, by_path in records.items():
            items = []
            for path in sorted(by_path):
                rec = by_path[path]
                if path not in applied_paths and rec.get("before") == rec.get("after"):
                    continue
                items.append(rec)
            if items:
                out[call] = items
        return out
