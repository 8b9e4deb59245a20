"""Cassettes: one session exported as a self-contained, versioned, diff-friendly file.

Format (version 1): one canonical JSON object per line (``coder_es.domain.chain.canonical_json``:
sorted keys, no insignificant whitespace), in a stable order, so two recordings of the same
session diff line by line::

    {"t":"cassette","format":"coder-es-cassette","version":1,"session":...,"workspace":...,
     "created_by":...,"options":{...},"redactions":{...},"counts":{...}}
    {"t":"ancestor","session":"<uuid>","version":1,"kind":"Started",...,"fields":{...}}
    ...                                         the sessions it was forked from (optional)
    {"t":"event","version":1,"kind":"Started","topic":...,"timestamp":...,"fields":{...}}
    ...                                         every event of the session, in version order
    {"t":"file","path":"src/calc.py","blob":"<sha256>"}     the initial workspace, by path
    {"t":"blob","digest":"<sha256>","text":"..."}           every blob referenced, by digest
    {"t":"blob","digest":"<sha256>","base64":"..."}         (binary content)

The blobs are everything the events refer to: file snapshots, full tool outputs, request
manifests (and the system prompt and tool definitions they name), the initial content of the files
the session touched. ``file`` lines give the workspace as it was when the session started: the
touched files from the events (``replay.disk.initial_states``; ``"blob": null`` for a file the
session created) plus, when the workspace still exists, the other files in it (ignored files and
files over ``MAX_FILE_BYTES`` left out), which a live replay needs for ``grep``, ``find`` and shell
commands.

``ancestor`` lines are there for a session forked from another (``Started.parent_session`` and
``parent_node``): its model requests start with that session's conversation up to the fork, so a
replay needs it in its store. They hold the events of each forked-from session the store had, up
to the node its child was forked at, the outermost session first (a fork of a fork has two), each
in version order, with the blobs those events refer to; the header counts them
(``counts.ancestor_events``) when there are any. A cassette without them is read as before.

Secrets are redacted on export (``coder_es.redaction.Redactor``: API keys, tokens, values of
configured environment variables and patterns) in event fields and in blob content. A blob whose
content changes gets a new digest and every reference to it is rewritten, so the cassette stays
self-consistent (a redacted file replays as that redacted file).

Older versions are upcast on load (``UPCASTERS``). Version 0 was a single JSON document::

    {"format": "coder-es-cassette", "version": 0, "session": ..., "workspace": ...,
     "events": [{"version", "kind", "timestamp", "fields"}], "blobs": {"<sha256>": "<base64>"}}

without topics or the initial workspace (derived from the events when upcasting).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.utils import get_topic

from coder_es import jsonlimit
from coder_es._version import __version__
from coder_es.agent.request import MANIFEST_FORMAT
from coder_es.application import CoderApp
from coder_es.domain.chain import canonical_json
from coder_es.domain.session import Session
from coder_es.errors import BlobNotFoundError, UsageError
from coder_es.records import event_fields, event_kind
from coder_es.redaction import Redactor
from coder_es.sealed_names import lineage, real_name
from coder_es.workspace.ignore import IgnoreMatcher
from replay import disk

FORMAT = "coder-es-cassette"
VERSION = 1
SUFFIX = ".cassette.jsonl"
MAX_FILE_BYTES = 1_000_000
MAX_WORKSPACE_BYTES = 50_000_000

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX64_IN = re.compile(rb"[0-9a-f]{64}")


class CassetteError(UsageError):
    """A cassette cannot be read or written: the message names the file and what is wrong."""


@dataclass(frozen=True)
class RecordedEvent:
    version: int
    kind: str
    topic: str
    timestamp: str
    fields: dict[str, Any]

    def record(self) -> dict[str, Any]:
        return {
            "t": "event",
            "version": self.version,
            "kind": self.kind,
            "topic": self.topic,
            "timestamp": self.timestamp,
            "fields": self.fields,
        }


@dataclass(frozen=True)
class Cassette:
    session: str
    workspace: str
    events: tuple[RecordedEvent, ...]
    files: Mapping[str, str | None]
    blobs: Mapping[str, bytes]
    options: Mapping[str, Any] = field(default_factory=dict)
    redactions: Mapping[str, Any] = field(default_factory=dict)
    created_by: str = ""
    source: str = ""
    ancestors: tuple[tuple[str, tuple[RecordedEvent, ...]], ...] = ()
    """(session id, events up to the fork node) of the sessions this one was forked from,
    outermost first."""
    children: tuple[tuple[str, Cassette], ...] = ()
    """(tool_use id, cassette) of the subagents its ``task`` calls started, in call order."""

    @property
    def name(self) -> str:
        base = Path(self.source).name if self.source else self.session[:8]
        return base.removesuffix(SUFFIX).removesuffix(".jsonl")

    @property
    def started(self) -> RecordedEvent:
        return self.events[0]

    def blob(self, digest: str) -> bytes:
        try:
            return self.blobs[digest]
        except KeyError:
            raise CassetteError(f"{self.source or 'cassette'}: blob {digest} is missing") from None

    @property
    def recorded_wall_s(self) -> float | None:
        """Seconds from the first to the last recorded event."""
        try:
            first = datetime.fromisoformat(self.events[0].timestamp)
            last = datetime.fromisoformat(self.events[-1].timestamp)
        except (ValueError, IndexError):
            return None
        return (last - first).total_seconds()

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)


# ---------------------------------------------------------------------- export


def export_session(
    app: CoderApp,
    session_ref: str,
    *,
    workspace: str | Path | None = None,
    redactor: Redactor | None = None,
    include_workspace: bool = True,
    options: Mapping[str, Any] | None = None,
) -> Cassette:
    """A cassette of a stored session (see the module docstring for what goes in)."""
    session = app.get_session(session_ref)
    events = [_recorded(e) for e in app.session_events(session.id)]
    ancestors = _ancestors(app, events[0].fields)
    inherited = [e for _sid, recorded in ancestors for e in recorded]
    root = Path(workspace) if workspace is not None else Path(session.workspace)
    blobs: dict[str, bytes] = {}
    missing: list[str] = []

    def take(digest: Any) -> None:
        if not isinstance(digest, str) or not _HEX64.match(digest) or digest in blobs:
            return
        try:
            # A sealed blob travels in its redacted form: a cassette never carries a secret.
            data = app.blobs.stored_form(digest)
        except BlobNotFoundError:
            missing.append(digest)
            return
        blobs[digest] = data
        for ref in _manifest_refs(data):
            take(ref)

    for e in [*inherited, *events]:
        for digest in event_blob_refs(e.kind, e.fields):
            take(digest)
    files = {p: d for p, d in disk.initial_states(events).items() if d is None or d in blobs}
    if include_workspace and root.is_dir():
        # A name the events hold sealed (it looks like a credential) is the same file on disk
        # under its real name: not listed twice.
        scopes = lineage(app, session.id)
        known = {real_name(app, scopes, p) or p for p in files}
        for rel, data in _workspace_files(root, skip=set(files) | known):
            digest = hashlib.sha256(data).hexdigest()
            blobs.setdefault(digest, data)
            files[rel] = digest
    redactor = redactor if redactor is not None else Redactor.from_environ()
    # One pass over all events, so a re-keyed blob is renamed in the ancestors' events too.
    redacted, blobs, files, redactions = _redact([*inherited, *events], blobs, files, redactor)
    events = redacted[len(inherited) :]
    rest = iter(redacted)
    ancestors = [(sid, list(islice(rest, len(recorded)))) for sid, recorded in ancestors]
    if missing:
        redactions = {**redactions, "missing_blobs": sorted(set(missing))}
    return Cassette(
        session=str(session.id),
        workspace=str(session.workspace),
        events=tuple(events),
        files=dict(sorted(files.items())),
        blobs=blobs,
        options=dict(options or {}),
        redactions=redactions,
        created_by=f"coder-es {__version__}",
        ancestors=tuple((sid, tuple(recorded)) for sid, recorded in ancestors),
        children=tuple(
            (
                str(e.fields["tool_use_id"]),
                export_session(
                    app,
                    str(e.fields["child_session"]),
                    workspace=workspace,
                    redactor=redactor,
                    include_workspace=include_workspace,
                    options=options,
                ),
            )
            for e in events
            if e.kind == "TaskStarted"
        ),
    )


def _recorded(e: Any) -> RecordedEvent:
    return RecordedEvent(
        version=e.originator_version,
        kind=event_kind(e),
        topic=get_topic(type(e)),
        timestamp=e.timestamp.isoformat(),
        fields=json.loads(canonical_json(event_fields(e))),
    )


def _ancestors(app: CoderApp, started: Mapping[str, Any]) -> list[tuple[str, list[RecordedEvent]]]:
    """The sessions a session was forked from, outermost first, each up to the node its child
    was forked at; the walk stops at the first one the store does not have."""
    found: list[tuple[str, list[RecordedEvent]]] = []
    parent, node = started.get("parent_session"), started.get("parent_node")
    while isinstance(parent, str) and _is_uuid(parent) and parent not in dict(found):
        if node is not None and not str(node).isdigit():
            break
        # A fork before the first message inherits the parent's own prefix: its Started event
        # (version 1) is what leads further up.
        cut = 1 if node is None else int(node)
        recorded = [_recorded(e) for e in app.events.get(UUID(parent), lte=cut)]
        if not recorded:
            break
        found.append((parent, recorded))
        parent = recorded[0].fields.get("parent_session")
        node = recorded[0].fields.get("parent_node")
    found.reverse()
    return found


def event_blob_refs(kind: str, fields: Mapping[str, Any]) -> Iterator[Any]:
    """Every blob digest an event names (the content it needs to be replayed)."""
    if kind == "Started":
        settings = fields.get("settings") or {}
        yield settings.get("system_blob")
        git = settings.get("git")
        if isinstance(git, dict):
            yield git.get("staged")
            yield git.get("unstaged")
    elif kind == "UserMessageAdded":
        yield from (b.get("blob") for b in fields.get("content") or [] if _is_image(b))
    elif kind == "ModelResponded":
        yield fields.get("request_digest")
        yield fields.get("raw_stream_blob")
    elif kind == "ToolCallCompleted":
        yield fields.get("output_blob")
        for change in fields.get("files_changed") or []:
            if isinstance(change, dict):
                yield change.get("own")  # the base of a later restoration of a merged change
    elif kind == "EditApplied":
        for key in ("base", "proposed"):
            yield fields.get(key)
    elif kind == "ModelExchanged":
        # What a live replay of a harness session serves (``replay.harness``).
        yield fields.get("request_blob")
        yield fields.get("response_blob")
    elif kind == "HarnessRan":
        yield fields.get("stream_blob")
    elif kind == "WorkspaceRestored":
        for entry in fields.get("entries") or []:
            if isinstance(entry, dict):
                yield from (entry.get(k) for k in ("base", "target"))
    for touch in disk.touches(kind, dict(fields)):
        yield touch.before
        yield touch.after


def _is_image(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "image"


def _manifest_refs(data: bytes) -> list[str]:
    if not data.startswith(b"{") or MANIFEST_FORMAT.encode() not in data[:4096] + data[-4096:]:
        return []
    try:
        manifest = jsonlimit.loads(data)
    except ValueError:
        return []
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return []
    refs = [manifest.get("system"), manifest.get("tools")]
    messages = manifest.get("messages")
    if isinstance(messages, dict):
        refs.append(messages.get("base"))
    return [r for r in refs if isinstance(r, str)]


def _workspace_files(root: Path, skip: set[str]) -> Iterator[tuple[str, bytes]]:
    total = 0
    for rel in IgnoreMatcher(root).walk():
        if rel in skip:
            continue
        path = root / rel
        try:
            if path.is_symlink() or path.stat().st_size > MAX_FILE_BYTES:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        total += len(data)
        if total > MAX_WORKSPACE_BYTES:
            msg = (
                f"the workspace {root} holds more than {MAX_WORKSPACE_BYTES} bytes of files; "
                "export only the files the session touched (--touched-only)"
            )
            raise CassetteError(msg)
        yield rel, data


def _redact(
    events: list[RecordedEvent],
    blobs: dict[str, bytes],
    files: dict[str, str | None],
    redactor: Redactor,
) -> tuple[list[RecordedEvent], dict[str, bytes], dict[str, str | None], dict[str, Any]]:
    """Redact events and blobs; a blob whose content changes is re-keyed everywhere."""
    mapping: dict[str, str] = {}
    out: dict[str, bytes] = {}
    changed_text: list[str] = []
    for digest in _dependency_order(blobs):
        data = blobs[digest]
        for old, new in mapping.items():
            if old.encode() in data:
                data = data.replace(old.encode(), new.encode())
        if mapping and b"sha256:" in data:
            data = _remap_mentions(data.decode("utf-8", "surrogateescape"), mapping).encode(
                "utf-8", "surrogateescape"
            )
        redacted = redactor.redact_blob(data)
        if redacted != blobs[digest]:
            changed_text.append(redacted.decode("utf-8", "replace"))
        new_digest = hashlib.sha256(redacted).hexdigest()
        if new_digest != digest:
            mapping[digest] = new_digest
        out[new_digest] = redacted

    def remap(value: Any) -> Any:
        if isinstance(value, str):
            value = mapping.get(value, value)
            return _remap_mentions(value, mapping) if "sha256:" in value else value
        if isinstance(value, dict):
            return {k: remap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [remap(v) for v in value]
        return value

    new_events = []
    changed_events = 0
    for e in events:
        fields = redactor.redact_fields(e.fields)
        if fields != e.fields:
            changed_events += 1
            changed_text.append(canonical_json(fields))
        if mapping:
            fields = remap(fields)
            observed = fields.get("hash")
            if e.kind == "FileObserved" and observed in out and e.fields.get("hash") in mapping:
                # The observation is of the redacted content now: keep its size true to it.
                fields["size"] = len(out[fields["hash"]])
        new_events.append(RecordedEvent(e.version, e.kind, e.topic, e.timestamp, fields))
    # File names are redacted like any text (a workspace file named like a token).
    new_files = {
        redactor.redact_text(p): (mapping.get(d, d) if d is not None else None)
        for p, d in files.items()
    }
    markers = sorted({m for m in redactor.describe() if any(m in t for t in changed_text)})
    stats: dict[str, Any] = {
        "events": changed_events,
        "blobs": len([d for d in blobs if d in mapping]),
        "markers": markers,
    }
    return new_events, out, new_files, stats


_MENTION = re.compile(r"sha256:([0-9a-f]{12,64})")


def _remap_mentions(text: str, mapping: Mapping[str, str]) -> str:
    """``sha256:<digest or prefix>`` mentions in text (tool output notes, file headers in a
    request) follow a re-keyed blob: the same length of the new digest replaces the old."""

    def replace(match: re.Match[str]) -> str:
        hexes = match.group(1)
        for old, new in mapping.items():
            if old.startswith(hexes):
                return "sha256:" + new[: len(hexes)]
        return match.group(0)

    return _MENTION.sub(replace, text)


def _dependency_order(blobs: Mapping[str, bytes]) -> list[str]:
    """Digests with every blob a manifest names, or a text mentions (``sha256:<prefix>``),
    before the blob naming it (iterative DFS), so a re-keyed blob is renamed in both."""
    order: list[str] = []
    done: set[str] = set()
    digests = sorted(blobs)

    def refs(data: bytes) -> Iterator[str]:
        yield from _manifest_refs(data)
        if b"sha256:" in data:
            text = data.decode("utf-8", "replace")
            for prefix in _MENTION.findall(text):
                yield from (d for d in digests if d.startswith(prefix))

    for start in digests:
        if start in done:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, refs(blobs[start]))]
        done.add(start)
        while stack:
            digest, pending = stack[-1]
            nxt = next((r for r in pending if r in blobs and r not in done), None)
            if nxt is None:
                stack.pop()
                order.append(digest)
            else:
                done.add(nxt)
                stack.append((nxt, refs(blobs[nxt])))
    return order


# ---------------------------------------------------------------------- writing


def records(cassette: Cassette) -> Iterator[dict[str, Any]]:
    yield {
        "t": "cassette",
        "format": FORMAT,
        "version": VERSION,
        "session": cassette.session,
        "workspace": cassette.workspace,
        "created_by": cassette.created_by,
        "options": dict(cassette.options),
        "redactions": dict(cassette.redactions),
        "counts": _counts(cassette),
    }
    for sid, events in cassette.ancestors:
        for e in events:
            yield {**e.record(), "t": "ancestor", "session": sid}
    for e in cassette.events:
        yield e.record()
    for path in sorted(cassette.files):
        yield {"t": "file", "path": path, "blob": cassette.files[path]}
    for digest in sorted(cassette.blobs):
        yield _blob_record(digest, cassette.blobs[digest])
    for call, child in cassette.children:
        # A whole cassette in one line: it carries its own events, files and blobs.
        yield {"t": "child", "tool_use_id": call, "cassette": dumps(child)}


def _counts(cassette: Cassette) -> dict[str, int]:
    counts = {
        "events": len(cassette.events),
        "files": len(cassette.files),
        "blobs": len(cassette.blobs),
    }
    inherited = sum(len(events) for _sid, events in cassette.ancestors)
    if inherited:
        counts["ancestor_events"] = inherited
    return counts


def _blob_record(digest: str, data: bytes) -> dict[str, Any]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {"t": "blob", "digest": digest, "base64": base64.b64encode(data).decode()}
    return {"t": "blob", "digest": digest, "text": text}


def dumps(cassette: Cassette) -> str:
    return "".join(canonical_json(r) + "\n" for r in records(cassette))


def write_cassette(cassette: Cassette, path: str | Path) -> Path:
    """Write atomically (a reader never sees half a cassette)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(dumps(cassette), encoding="utf-8")
        os.replace(tmp, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise CassetteError(f"cannot write {target}: {e.strerror or e}") from e
    return target


# ---------------------------------------------------------------------- reading


def load_cassette(path: str | Path) -> Cassette:
    p = Path(path)
    try:
        data = p.read_bytes()
    except ValueError as e:  # a NUL byte in the path
        raise CassetteError(f"cannot read {str(path)!r}: {e}") from None
    except OSError as e:
        raise CassetteError(f"cannot read {p}: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CassetteError(f"{p} is not UTF-8 text: not a cassette ({e})") from e
    return loads(text, str(p))


def loads(text: str, source: str = "<string>") -> Cassette:
    # split("\n"), not splitlines(): U+2028 inside a JSON string is not a line break here.
    lines = [(n, ln) for n, ln in enumerate(text.split("\n"), 1) if ln.strip()]
    if not lines:
        raise CassetteError(f"{source} is empty: not a cassette")
    try:
        first = jsonlimit.loads(lines[0][1])
    except jsonlimit.JsonDepthError as e:
        raise CassetteError(f"{source}: line {lines[0][0]}: {e}") from None
    except ValueError:
        first = None
    if isinstance(first, dict) and first.get("t") == "cassette":
        value: Any = [first]
        for n, line in lines[1:]:
            try:
                value.append(jsonlimit.loads(line))
            except ValueError as e:
                raise CassetteError(f"{source}: line {n} is not JSON ({e})") from e
        version = first.get("version")
    else:
        try:
            value = jsonlimit.loads(text)
        except ValueError as e:
            raise CassetteError(f"{source}: not a coder-es cassette (line 1 is not JSON)") from e
        if not isinstance(value, dict) or value.get("format") != FORMAT:
            raise CassetteError(f"{source}: not a coder-es cassette (no {FORMAT} header)")
        version = value.get("version")
    if not isinstance(version, int) or version < 0:
        raise CassetteError(f"{source}: the cassette version {version!r} is not a version")
    if version > VERSION:
        msg = (
            f"{source} is a version {version} cassette; this coder-es reads versions up to "
            f"{VERSION}: upgrade coder-es"
        )
        raise CassetteError(msg)
    while version < VERSION:
        try:
            value = UPCASTERS[version](value)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            msg = f"{source}: cannot upcast the version {version} cassette: {e!r}"
            raise CassetteError(msg) from e
        version += 1
    return _build(value, source)


def _build(items: list[Any], source: str) -> Cassette:
    header = items[0]
    if header.get("format") != FORMAT:
        raise CassetteError(f"{source}: not a coder-es cassette (no {FORMAT} header)")
    events: list[RecordedEvent] = []
    ancestors: dict[str, list[RecordedEvent]] = {}
    files: dict[str, str | None] = {}
    blobs: dict[str, bytes] = {}
    children: list[tuple[str, Cassette]] = []
    for n, item in enumerate(items[1:], 2):
        where = f"{source}: record {n}"
        if not isinstance(item, dict):
            raise CassetteError(f"{where} is not an object")
        kind = item.get("t")
        try:
            if kind == "event":
                events.append(_event(item, len(events) + 1, where))
            elif kind == "ancestor":
                sid = item["session"]
                if not isinstance(sid, str) or not _is_uuid(sid):
                    raise CassetteError(f"{where}: ancestor session {sid!r} is not a session id")
                inherited = ancestors.setdefault(sid, [])
                inherited.append(_event(item, len(inherited) + 1, where))
            elif kind == "file":
                path, digest = item["path"], item["blob"]
                if not disk.relative(path):
                    raise CassetteError(f"{where}: unsafe file path {path!r}")
                if digest is not None and not _HEX64.match(str(digest)):
                    raise CassetteError(f"{where}: {path} names no blob digest")
                files[path] = digest
            elif kind == "blob":
                digest = str(item["digest"])
                data = (
                    item["text"].encode("utf-8")
                    if "text" in item
                    else base64.b64decode(item["base64"], validate=True)
                )
                if hashlib.sha256(data).hexdigest() != digest:
                    raise CassetteError(f"{where}: blob {digest[:16]} does not match its digest")
                blobs[digest] = data
            elif kind == "child":
                call = str(item["tool_use_id"])
                children.append((call, loads(item["cassette"], f"{source} (task {call})")))
            else:
                raise CassetteError(f"{where}: unknown record type {kind!r}")
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CassetteError):
                raise
            raise CassetteError(f"{where} is malformed ({e!r})") from e
    if not events or events[0].kind != "Started":
        raise CassetteError(f"{source}: the cassette holds no session (no Started event)")
    for sid, inherited in ancestors.items():
        if inherited[0].kind != "Started":
            raise CassetteError(f"{source}: the ancestor session {sid} has no Started event")
    for path, digest in files.items():
        if digest is not None and digest not in blobs:
            raise CassetteError(f"{source}: the initial file {path} names a missing blob")
    return Cassette(
        session=str(header.get("session") or ""),
        workspace=str(header.get("workspace") or events[0].fields.get("workspace", "")),
        events=tuple(events),
        files=files,
        blobs=blobs,
        options=dict(header.get("options") or {}),
        redactions=dict(header.get("redactions") or {}),
        created_by=str(header.get("created_by") or ""),
        source=source,
        ancestors=tuple((sid, tuple(inherited)) for sid, inherited in ancestors.items()),
        children=tuple(children),
    )


def _is_uuid(text: str) -> bool:
    try:
        UUID(text)
    except ValueError:
        return False
    return True


def _event(item: dict[str, Any], expected: int, where: str) -> RecordedEvent:
    version, fields = item["version"], item["fields"]
    if version != expected:
        raise CassetteError(f"{where}: event version {version} where {expected} was expected")
    if not isinstance(fields, dict):
        raise CassetteError(f"{where}: event fields must be an object")
    kind = str(item["kind"])
    topic = str(item.get("topic") or _topic(kind))
    return RecordedEvent(version, kind, topic, str(item["timestamp"]), fields)


def _topic(kind: str) -> str:
    cls = getattr(Session, kind, None)
    return get_topic(cls) if isinstance(cls, type) else f"coder_es.domain.session:Session.{kind}"


# ---------------------------------------------------------------------- upcasting


def _upcast_v0_v1(doc: Any) -> list[Any]:
    """Version 0 (one JSON document, base64 blobs, no topics, no initial workspace) -> 1."""
    events = [
        RecordedEvent(
            int(e["version"]),
            str(e["kind"]),
            _topic(str(e["kind"])),
            str(e["timestamp"]),
            dict(e["fields"]),
        )
        for e in doc["events"]
    ]
    blobs = {str(d): base64.b64decode(b64) for d, b64 in dict(doc.get("blobs") or {}).items()}
    files = {p: d for p, d in disk.initial_states(events).items() if d is None or d in blobs}
    header = {
        "t": "cassette",
        "format": FORMAT,
        "version": 1,
        "session": doc["session"],
        "workspace": doc.get("workspace") or events[0].fields.get("workspace", ""),
        "created_by": str(doc.get("created_by") or "coder-es (cassette version 0)"),
        "options": {},
        "redactions": {},
    }
    out: list[Any] = [header, *(e.record() for e in events)]
    out += [{"t": "file", "path": p, "blob": files[p]} for p in sorted(files)]
    out += [_blob_record(d, blobs[d]) for d in sorted(blobs)]
    return out


UPCASTERS: dict[int, Callable[[Any], Any]] = {0: _upcast_v0_v1}


def find_cassettes(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given; folders expanded to their cassettes (``*.cassette.jsonl``), sorted."""
    out: list[Path] = []
    for raw in paths:
        if "\0" in str(raw):
            raise CassetteError(f"{str(raw)!r}: a path with a NUL byte names no file")
        p = Path(raw)
        if p.is_dir():
            found = sorted(p.rglob(f"*{SUFFIX}"))
            if not found:
                raise CassetteError(f"no cassettes (*{SUFFIX}) in the folder {p}")
            out += found
        else:
            out.append(p)
    return out
