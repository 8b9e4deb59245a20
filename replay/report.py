"""Replay outcomes: the first divergence, with both sides and a diff, and the report around it.

A divergence names the *step* where the replayed session parts from the recorded one: the version
of the event that differs (or that one side has and the other has not), which is also the node id
when that event is a conversation node. ``what`` says which check caught it:

- ``event``: an event differs from the recorded one at the same step (after normalization);
- ``request``: the request the current code built for a model call is not the recorded one;
- ``missing`` / ``extra``: the replay stopped before the recording ends / went past it;
- ``model_call`` / ``tool`` / ``permission``: the current code called the model, ran a tool or
  asked a permission question that the recording has no answer for;
- ``error``: the current code raised an exception.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from coder_es.errors import CoderESError

EXIT_IDENTICAL, EXIT_DIVERGED, EXIT_UNREADABLE = 0, 1, 2
MAX_SHOWN_LINES = 40


@dataclass(frozen=True)
class Divergence:
    step: int
    kind: str
    what: str
    expected: Any
    actual: Any
    diff: str
    summary: str

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "kind": self.kind,
            "what": self.what,
            "expected": self.expected,
            "actual": self.actual,
            "diff": self.diff,
            "summary": self.summary,
        }


class ReplayMismatch(CoderESError):
    """Raised by a replay seam (provider, executor, answerer) when the current code asks for
    something the recording does not have. The engine turns it into a ``Divergence`` at the step
    where the replay stands."""

    def __init__(
        self, what: str, kind: str, expected: Any, actual: Any, summary: str, diff: str = ""
    ) -> None:
        super().__init__(summary)
        self.what = what
        self.kind = kind
        self.expected = expected
        self.actual = actual
        self.summary = summary
        self.diff = diff or diff_values(expected, actual)


@dataclass(frozen=True)
class ReplayReport:
    cassette: str
    mode: str
    session: str
    recorded_events: int
    replayed_events: int
    model_calls: int
    tool_calls: int
    elapsed_s: float
    recorded_wall_s: float | None
    divergence: Divergence | None = None
    workspace: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.divergence is None

    @property
    def exit_code(self) -> int:
        return EXIT_IDENTICAL if self.ok else EXIT_DIVERGED

    def summary(self) -> str:
        """One line: identical, or where and how it diverged."""
        if self.divergence is None:
            return (
                f"{self.cassette}: identical ({self.recorded_events} events, {self.mode} mode, "
                f"{self.elapsed_s:.2f} s)"
            )
        return f"{self.cassette}: DIVERGED ({self.mode} mode) {self.divergence.summary}"

    def render(self) -> str:
        """The summary and, for a divergence, both sides and the diff."""
        lines = [self.summary()]
        d = self.divergence
        if d is not None:
            lines.append(f"  first divergent step: {d.step} ({d.kind}; check: {d.what})")
            lines.append(
                f"  {self.replayed_events} of {self.recorded_events} recorded events replayed "
                "identically before it"
            )
            for label, value in (("recorded", d.expected), ("replayed", d.actual)):
                shown = flatten(value)
                if len(shown) > MAX_SHOWN_LINES:
                    lines.append(f"  {label}: ({len(shown)} lines; the diff shows what differs)")
                else:
                    lines.append(f"  {label}:")
                    lines += ["    " + ln for ln in shown]
            if d.diff:
                lines.append("  diff (recorded -> replayed):")
                lines += ["    " + ln for ln in d.diff.splitlines()]
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.workspace:
            lines.append(f"  scratch workspace kept at {self.workspace}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "cassette": self.cassette,
            "mode": self.mode,
            "session": self.session,
            "ok": self.ok,
            "status": "identical" if self.ok else "diverged",
            "recorded_events": self.recorded_events,
            "replayed_events": self.replayed_events,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "elapsed_s": round(self.elapsed_s, 4),
            "recorded_wall_s": self.recorded_wall_s,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "workspace": self.workspace,
            "notes": list(self.notes),
        }


# ---------------------------------------------------------------------- rendering values


def flatten(value: Any, prefix: str = "") -> list[str]:
    """``path: value`` lines; multi-line strings are spread over lines so a diff shows which
    line of a tool output or a prompt changed, not just that a long string did."""
    if isinstance(value, dict):
        if not value:
            return [f"{prefix}: {{}}" if prefix else "{}"]
        out: list[str] = []
        for k in sorted(value, key=str):
            out += flatten(value[k], f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(value, list):
        if not value:
            return [f"{prefix}: []"]
        out = []
        for i, v in enumerate(value):
            out += flatten(v, f"{prefix}[{i}]")
        return out
    if isinstance(value, str) and "\n" in value:
        return [f"{prefix}: |", *("  " + ln for ln in value.split("\n"))]
    text = json.dumps(value, ensure_ascii=False)
    return [f"{prefix}: {text}" if prefix else text]


def diff_values(expected: Any, actual: Any, context: int = 3) -> str:
    lines = difflib.unified_diff(
        flatten(expected), flatten(actual), "recorded", "replayed", lineterm="", n=context
    )
    return "\n".join(lines)


def first_difference(expected: Any, actual: Any) -> str | None:
    """The dotted path of the first value that differs (``fields.output``), or None."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for k in [*expected, *(k for k in actual if k not in expected)]:
            if k not in expected or k not in actual:
                return str(k)
            inner = first_difference(expected[k], actual[k])
            if inner is not None:
                if not inner:
                    return str(k)
                return f"{k}{inner}" if inner.startswith("[") else f"{k}.{inner}"
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
            inner = first_difference(a, b)
            if inner is not None:
                return f"[{i}]" + (f".{inner}" if inner and not inner.startswith("[") else inner)
        if len(expected) != len(actual):
            return f"[{min(len(expected), len(actual))}]"
        return None
    return None if expected == actual else ""


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


def lookup(value: Any, path: str) -> Any:
    """The value at a path returned by ``first_difference``, or ``ABSENT``."""
    cur = value
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        try:
            cur = cur[int(part[1:-1])] if part.startswith("[") else cur[part]
        except (KeyError, IndexError, TypeError, ValueError):
            return ABSENT
    return cur


def short(value: Any, width: int = 60, start: int = 0) -> str:
    if value is ABSENT:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if start > 0:
        text = "…" + text[start:]
    text = " ".join(text.split())
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def contrast(expected: Any, actual: Any, width: int = 60) -> tuple[str, str]:
    """Both values, shortened around where they start to differ (for one-line summaries)."""
    start = 0
    longest = max(len(str(expected)), len(str(actual)))
    if isinstance(expected, str) and isinstance(actual, str) and longest > width:
        n = next(
            (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
            min(len(expected), len(actual)),
        )
        start = max(0, n - 15)
    return short(expected, width, start), short(actual, width, start)
