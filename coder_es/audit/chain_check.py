"""Walking one session's hash chain and naming what broke it.

``StoreChainCheck`` is fed the events of one session in version order, as a store returns them.
The store keeps no hash per event: event v is only vouched for by event v+1's ``prev_hash`` (and the
last one by the anchor). The walk is streaming: each link costs one comparison, and only the events
around a broken link are kept for the diagnosis at the end, which tells apart:

- modified: an event's content no longer matches the hash its successor commits to;
- deleted: versions missing (a gap), or a link pointing at an event no longer present;
- inserted: an event that its neighbours' links skip over;
- reordered: an event whose content hashes correctly at another version (moved or renumbered);
- truncated: the session ends before the version its anchor witnessed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from coder_es.audit.problems import (
    DELETED,
    INSERTED,
    MODIFIED,
    REORDERED,
    TRUNCATED,
    UNDECODABLE,
    Problem,
)
from coder_es.audit.records import AuditEvent, compute_hash
from coder_es.domain.chain import GENESIS
from coder_es.store.anchor import Anchor

# Bounds on the diagnosis so a badly damaged session still verifies in linear time.
MAX_SUSPECTS = 4000
MAX_CANDIDATES = 256


def _rehash(event: AuditEvent, version: int) -> str:
    return compute_hash(event.session, version, event.topic, event.timestamp, event.fields)


def _built(event: AuditEvent | Callable[[], AuditEvent]) -> AuditEvent:
    return event if isinstance(event, AuditEvent) else event()


def _span(first: int, last: int) -> str:
    return f"version {first}" if first == last else f"versions {first}..{last}"


@dataclass
class StoreChainCheck:
    session: str
    anchor: Anchor | None = None
    events: int = 0
    last_version: int = 0
    last_hash: str | None = GENESIS
    """None after an event that could not be decoded (its hash is unknown)."""
    problems: list[Problem] = field(default_factory=list)
    _breaks: list[int] = field(default_factory=list)
    _suspects: dict[int, AuditEvent] = field(default_factory=dict)
    _window: list[AuditEvent | Callable[[], AuditEvent]] = field(default_factory=list)
    _hash_at_anchor: str | None = None
    _at_anchor: AuditEvent | None = None
    _overflow: int = 0

    def feed(self, event: AuditEvent) -> None:
        self.feed_link(event.version, event.chain_hash, event.prev_hash, event)

    def feed_link(
        self,
        version: int,
        chain_hash: str,
        prev_hash: str | None,
        event: AuditEvent | Callable[[], AuditEvent],
    ) -> None:
        """One event, in version order. ``event`` may be a function that builds it: it is only
        called for events next to a broken link (the walk itself needs just the two hashes)."""
        self._step(version)
        gapless = version == self.last_version + 1
        if gapless and self.last_hash is not None and prev_hash != self.last_hash:
            self._break(version, event)
        if self.anchor is not None and version == self.anchor.version:
            self._hash_at_anchor = chain_hash
            self._at_anchor = _built(event)
        window = self._window
        if len(window) == 2:
            window.pop(0)
        window.append(event)
        self.last_version = version
        self.last_hash = chain_hash

    def feed_undecodable(self, version: int, reason: str) -> None:
        """An event, in version order, whose stored form cannot be decoded: a finding of its
        own. Its hash is unknown, so the link from the next event is not checked."""
        self._step(version)
        self.problems.append(
            Problem(
                self.session, version, UNDECODABLE, f"the stored event cannot be read: {reason}"
            )
        )
        self._window.clear()
        self.last_version = version
        self.last_hash = None

    def _step(self, version: int) -> None:
        self.events += 1
        if version > self.last_version + 1:
            self.problems.append(
                Problem(
                    self.session,
                    self.last_version + 1,
                    DELETED,
                    f"{_span(self.last_version + 1, version - 1)} missing from the store",
                )
            )
        elif version <= self.last_version:
            msg = f"events must be fed in version order ({version} after {self.last_version})"
            raise ValueError(msg)

    def _break(self, version: int, event: AuditEvent | Callable[[], AuditEvent]) -> None:
        self._breaks.append(version)
        if len(self._suspects) >= MAX_SUSPECTS:
            self._overflow += 1
            return
        for neighbour in self._window:
            built = _built(neighbour)
            self._suspects[built.version] = built
        built = _built(event)
        self._suspects[version] = built

    # ------------------------------------------------------------------ diagnosis

    def finish(self) -> list[Problem]:
        problems = list(self.problems)
        anchor_mismatch = self._anchor_problems(problems)
        if not self._breaks and not anchor_mismatch:
            return problems
        breaks = set(self._breaks)
        suspects = self._suspects
        if anchor_mismatch and self._at_anchor is not None:
            suspects[self._at_anchor.version] = self._at_anchor
        # Hashes some suspect links to: an event whose hash is among them is in the chain.
        linked = {s.prev_hash for s in suspects.values()}
        # The hashes that some link expects but no event at its place produces.
        wanted = {suspects[v].prev_hash for v in breaks if v in suspects}
        if anchor_mismatch and self.anchor is not None:
            wanted.add(self.anchor.head)
        wanted.discard(None)
        versions = sorted(suspects)

        def forward_broken(v: int) -> bool:
            if v + 1 in breaks:
                return True
            return anchor_mismatch and self.anchor is not None and v == self.anchor.version

        moved: dict[int, int] = {}
        unresolved: list[int] = []
        for v in versions:
            if not forward_broken(v):
                continue
            event = suspects[v]
            nearby = sorted(set(versions) | {v - 1, v + 1}, key=lambda u: abs(u - v))
            origin = next(
                (
                    u
                    for u in nearby[:MAX_CANDIDATES]
                    if u != v and u > 0 and _rehash(event, u) in wanted
                ),
                None,
            )
            if origin is None:
                if event.chain_hash not in linked:
                    unresolved.append(v)
            else:
                moved[v] = origin

        true_versions = {v for v in versions if v not in moved} | set(moved.values())

        def present(u: int) -> bool:
            if u in true_versions:
                return True
            # Versions outside the suspects were not moved: they hold their own event.
            return u not in suspects and 1 <= u <= self.last_version

        explained: set[int] = set()  # links (v-1 -> v) accounted for, by their upper version
        source = self.anchor.source if self.anchor is not None else "anchor"
        for v in unresolved:
            event = suspects[v]
            before, after = suspects.get(v - 1), suspects.get(v + 1)
            explained.add(v + 1)
            if before is not None and after is not None and after.prev_hash == before.chain_hash:
                explained.add(v)
                problems.append(
                    Problem(
                        self.session,
                        v,
                        INSERTED,
                        f"the event at version {v} is not part of the chain: version {v + 1} "
                        f"links straight to version {v - 1}",
                    )
                )
            elif v == self.last_version and anchor_mismatch:
                problems.append(
                    Problem(
                        self.session,
                        v,
                        MODIFIED,
                        f"the last event does not match the head hash the {source} witnessed",
                    )
                )
            else:
                detail = f"its content no longer matches the hash version {v + 1} commits to"
                if v in breaks and v not in moved:
                    detail += f", and it does not link to version {v - 1} either"
                    explained.add(v)
                problems.append(Problem(self.session, v, MODIFIED, detail))
        problems += self._moved_problems(moved)
        for v, origin in sorted(moved.items()):
            explained.update((v, v + 1))
            if origin > 1 and not present(origin - 1) and v in breaks:
                problems.append(
                    Problem(
                        self.session,
                        origin - 1,
                        DELETED,
                        f"the event recorded as version {origin - 1} is gone (the event recorded "
                        f"as version {origin} links to it)",
                    )
                )
        unexplained = [v for v in sorted(breaks) if v not in explained]
        for v in unexplained[:100]:
            problems.append(
                Problem(
                    self.session,
                    v - 1,
                    MODIFIED,
                    f"the chain breaks between versions {v - 1} and {v}: version {v - 1} was "
                    f"modified or version {v}'s link was altered",
                )
            )
        if len(unexplained) > 100:
            problems.append(
                Problem(
                    self.session,
                    None,
                    MODIFIED,
                    f"{len(unexplained) - 100} more broken links not listed",
                )
            )
        return problems

    def _anchor_problems(self, problems: list[Problem]) -> bool:
        """Compare with the anchor; True when the event at the anchored version was rewritten."""
        anchor = self.anchor
        if anchor is None:
            return False
        if self.last_version < anchor.version:
            problems.append(
                Problem(
                    self.session,
                    self.last_version + 1,
                    TRUNCATED,
                    f"the session ends at version {self.last_version} but version "
                    f"{anchor.version} was recorded ({anchor.source} head {anchor.head[:16]}): "
                    f"{_span(self.last_version + 1, anchor.version)} deleted",
                )
            )
            return False
        return self._hash_at_anchor is not None and self._hash_at_anchor != anchor.head

    def _moved_problems(self, moved: dict[int, int]) -> list[Problem]:
        out: list[Problem] = []
        run: list[tuple[int, int]] = []

        def flush() -> None:
            if not run:
                return
            first, last = run[0], run[-1]
            delta = first[0] - first[1]
            if len(run) == 1:
                detail = f"holds the event recorded as version {first[1]} (moved from its place)"
            else:
                detail = (
                    f"{_span(first[0], last[0])} hold the events recorded as versions "
                    f"{first[1]}..{last[1]} (renumbered by {delta:+d})"
                )
            out.append(Problem(self.session, first[0], REORDERED, detail))
            run.clear()

        for v, origin in sorted(moved.items()):
            if run and (v != run[-1][0] + 1 or v - origin != run[-1][0] - run[-1][1]):
                flush()
            run.append((v, origin))
        flush()
        return out


@dataclass(frozen=True)
class FileEvent:
    """An event line of an export: the event plus the hash the file recorded for it."""

    line: int
    event: AuditEvent
    recorded: str
    redacted: bool = False


def check_file_chain(
    session: str, items: list[FileEvent], *, complete: bool
) -> tuple[list[Problem], list[str]]:
    """Problems of an exported chain, and notes (facts that are not problems).

    Each line carries its own hash, so a modified event is seen directly. ``complete`` says the
    export was not filtered: versions must then run 1..N without gaps."""
    problems: list[Problem] = []
    notes: list[str] = []
    by_version: dict[int, FileEvent] = {}
    highest = 0
    redacted = []
    for item in items:
        event = item.event
        v = event.version
        if item.redacted:
            redacted.append(v)
        elif item.recorded != event.chain_hash:
            problems.append(
                Problem(
                    session,
                    v,
                    MODIFIED,
                    f"line {item.line}: the content does not match the hash recorded with it",
                )
            )
        if v in by_version:
            problems.append(
                Problem(
                    session,
                    v,
                    INSERTED,
                    f"line {item.line}: a second event with version {v} "
                    f"(first on line {by_version[v].line})",
                )
            )
            continue
        if v < highest:
            problems.append(
                Problem(
                    session,
                    v,
                    REORDERED,
                    f"line {item.line}: version {v} comes after version {highest}",
                )
            )
        highest = max(highest, v)
        by_version[v] = item
    for v, item in by_version.items():
        prev = by_version.get(v - 1)
        expected = prev.recorded if prev is not None else (GENESIS if v == 1 else None)
        if expected is not None and item.event.prev_hash != expected:
            problems.append(
                Problem(
                    session,
                    v,
                    MODIFIED
                    if prev is None
                    else INSERTED
                    if v - 1 in by_version and _links_elsewhere(item, by_version)
                    else MODIFIED,
                    f"line {item.line}: version {v} does not link to version {v - 1}",
                )
            )
    if complete and by_version:
        missing = [v for v in range(1, max(by_version) + 1) if v not in by_version]
        for first, last in _runs(missing):
            problems.append(
                Problem(session, first, DELETED, f"{_span(first, last)} missing from the export")
            )
    if redacted:
        notes.append(
            f"{len(redacted)} event(s) were redacted at export; their own content is not "
            f"checked, only their place in the chain: versions {_compact(redacted)}"
        )
    return problems, notes


def _links_elsewhere(item: FileEvent, by_version: dict[int, FileEvent]) -> bool:
    """Whether an event links to some other event than its predecessor (a spliced-in line)."""
    target = item.event.prev_hash
    return any(other.recorded == target for other in by_version.values() if other is not item)


def _runs(values: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _compact(values: list[int]) -> str:
    text = ", ".join(
        _span(a, b).removeprefix("versions ").removeprefix("version ")
        for a, b in _runs(sorted(values))
    )
    return text if len(text) < 200 else text[:197] + "..."
