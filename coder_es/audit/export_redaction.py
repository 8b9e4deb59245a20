"""Export-time redaction: replace the contents of files under given globs.

The store keeps what was recorded (secrets were already redacted at record time, see
``coder_es.redaction``); an export can hide more, e.g. ``--redact-glob 'secrets/**'``. File contents
appear in events as tool inputs (``write.content``, ``edit.old_string``/``new_string``, also inside
the model's ``tool_use`` blocks) and as the output of calls on those paths (``read`` returns the
file); in transcripts also as blob diffs. Each is replaced by ``[REDACTED:glob:PATTERN]``.

A redacted event keeps the chain hash of its recorded form and lists what was replaced in its
``redacted`` field; the export header lists every redaction. ``verify`` of such an export checks
the redacted events' place in the chain but cannot check their content, and says so.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any

from coder_es.audit.records import AuditEvent
from coder_es.redaction import marker

CONTENT_KEYS = ("content", "old_string", "new_string")


def path_matches(path: str, glob: str) -> bool:
    """A glob with no ``/`` matches the file name anywhere; otherwise the workspace-relative path.
    ``**`` crosses directories (fnmatch's ``*`` already does)."""
    clean = path.removeprefix("./")
    if "/" not in glob:
        return fnmatch.fnmatchcase(clean.rsplit("/", 1)[-1], glob)
    return fnmatch.fnmatchcase(clean, glob) or fnmatch.fnmatchcase(clean, glob.replace("**/", ""))


@dataclass(frozen=True)
class GlobRedaction:
    globs: tuple[str, ...]

    def match(self, path: Any) -> str | None:
        if not isinstance(path, str):
            return None
        return next((g for g in self.globs if path_matches(path, g)), None)

    def apply(self, events: list[AuditEvent]) -> tuple[list[AuditEvent], list[dict[str, Any]]]:
        """The events with matching file contents replaced, and the header's redaction list."""
        if not self.globs:
            return events, []
        calls: dict[str, str] = {}  # tool_use_id -> glob that matched its path
        for e in events:
            if e.kind == "ToolCallRequested":
                glob = self.match((e.fields.get("input") or {}).get("path"))
                if glob:
                    calls[str(e.fields.get("tool_use_id"))] = glob
            elif e.kind == "ModelResponded":
                for block in e.fields.get("blocks") or []:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        glob = self.match((block.get("input") or {}).get("path"))
                        if glob:
                            calls[str(block.get("id"))] = glob
        used: dict[str, list[int]] = {g: [] for g in self.globs}
        out = []
        for e in events:
            fields, changed, glob = self._redact(e, calls)
            if changed:
                used[glob].append(e.version)
                e = replace(e, fields=fields, redacted=tuple(changed))
            out.append(e)
        listing = [
            {"kind": "glob", "pattern": g, "replacement": marker("glob", g), "versions": v}
            for g, v in used.items()
        ]
        return out, listing

    def _redact(
        self, e: AuditEvent, calls: dict[str, str]
    ) -> tuple[dict[str, Any], list[str], str]:
        fields = dict(e.fields)
        changed: list[str] = []
        glob = ""
        if e.kind == "ToolCallRequested" and str(fields.get("tool_use_id")) in calls:
            glob = calls[str(fields["tool_use_id"])]
            fields["input"], keys = _redact_input(fields.get("input") or {}, glob)
            changed += [f"input.{k}" for k in keys]
        elif e.kind == "ToolCallCompleted" and str(fields.get("tool_use_id")) in calls:
            glob = calls[str(fields["tool_use_id"])]
            fields["output"] = marker("glob", glob)
            changed.append("output")
        elif e.kind == "ModelResponded":
            blocks = []
            for i, block in enumerate(fields.get("blocks") or []):
                if isinstance(block, dict) and str(block.get("id")) in calls:
                    glob = calls[str(block["id"])]
                    new_input, keys = _redact_input(block.get("input") or {}, glob)
                    block = {**block, "input": new_input}
                    changed += [f"blocks[{i}].input.{k}" for k in keys]
                blocks.append(block)
            fields["blocks"] = blocks
        return fields, changed, glob


def _redact_input(data: dict[str, Any], glob: str) -> tuple[dict[str, Any], list[str]]:
    out = dict(data)
    keys = [k for k in CONTENT_KEYS if k in out]
    for k in keys:
        out[k] = marker("glob", glob)
    return out, keys
