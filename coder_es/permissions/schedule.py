"""Scheduled calls (issue 34, point 4): a rule that runs a call later, in a time window.

A ``schedule`` rule (``--schedule 'bash:make deploy*@22:00-06:00'``, ``[permissions] schedule =
[...]``, or ``[permissions.rules] bash."make deploy*" = "schedule@22:00-06:00"``) neither runs the
call now nor asks anyone: outside its window the call is recorded as scheduled for the next
opening of the window and the turn parks (as a deferred question does); once the window is open,
``run --session S`` or a fleet worker takes the turn up and the call runs. Inside the window the
call runs at once.

Windows are ``HH:MM-HH:MM`` in UTC (the same on every machine of a fleet); one that ends before it
starts spans midnight, and ``00:00-00:00`` is the whole day. Times come from the loop's injected
clock, never from the system's, so tests and replays decide the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from coder_es.errors import UsageError

ACTION = "schedule"
_WINDOW = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)")


class WindowSyntaxError(UsageError):
    """A time window that cannot be parsed."""


@dataclass(frozen=True)
class Window:
    start: int
    """Minutes after midnight, UTC."""
    end: int

    @classmethod
    def parse(cls, text: str) -> Window:
        m = _WINDOW.fullmatch(text.strip())
        if m is None:
            msg = f"bad time window {text!r}: expected HH:MM-HH:MM (UTC), e.g. 22:00-06:00"
            raise WindowSyntaxError(msg)
        h1, m1, h2, m2 = (int(g) for g in m.groups())
        return cls(h1 * 60 + m1, h2 * 60 + m2)

    @property
    def text(self) -> str:
        return f"{_hhmm(self.start)}-{_hhmm(self.end)}"

    def contains(self, when: datetime) -> bool:
        minute = _utc(when).hour * 60 + _utc(when).minute
        if self.start == self.end:
            return True
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def next_opening(self, when: datetime) -> datetime:
        """``when`` itself if the window is open then, else the next time it opens."""
        when = _utc(when)
        if self.contains(when):
            return when
        opening = when.replace(hour=self.start // 60, minute=self.start % 60, second=0)
        opening = opening.replace(microsecond=0)
        return opening if opening > when else opening + timedelta(days=1)


def split_scheduled(text: str) -> tuple[str, Window]:
    """``TOOL[:PATTERN]@HH:MM-HH:MM`` -> (``TOOL[:PATTERN]``, its window)."""
    rule, at, window = text.rpartition("@")
    if not at or not rule.strip():
        msg = (
            f"bad scheduled rule {text!r}: expected TOOL[:PATTERN]@HH:MM-HH:MM, "
            "e.g. 'bash:make deploy*@22:00-06:00'"
        )
        raise WindowSyntaxError(msg)
    return rule, Window.parse(window)


def action_window(action: str) -> tuple[str, Window | None]:
    """A configured action: ``schedule@HH:MM-HH:MM`` -> (``schedule``, its window); any other
    action as it is, with no window."""
    name, at, window = action.partition("@")
    if name == ACTION and at:
        return ACTION, Window.parse(window)
    if name == ACTION:
        raise WindowSyntaxError("a schedule action needs its window: schedule@HH:MM-HH:MM")
    return action, None


def window_of(matched_rule: str | None) -> Window | None:
    """The window a ``schedule`` rule's description names (``Rule.describe``, ending in
    ``@HH:MM-HH:MM``)."""
    if not matched_rule or "@" not in matched_rule:
        return None
    try:
        return Window.parse(matched_rule.rpartition("@")[2])
    except WindowSyntaxError:
        return None


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"
