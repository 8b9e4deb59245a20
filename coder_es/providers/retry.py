"""When and how long to wait before retrying a failed request.

Server hints win over our own backoff: ``x-should-retry`` forces the decision either way, and
``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date) set the delay, capped so a bogus
hint cannot park the agent for hours.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

from coder_es.providers.errors import ProviderError


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts the first try; ``max_attempts=1`` disables retries."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    # Hints above this are ignored in favour of our own backoff (a server asking for an hour
    # is better handled by failing and letting the user decide).
    max_hint_s: float = 60.0
    jitter: float = 0.25
    random: Callable[[], float] = field(default=random.random, compare=False, repr=False)

    def backoff(self, attempt: int) -> float:
        """Delay after failed attempt number ``attempt`` (1-based), with jitter subtracted so that
        many clients retrying together spread out."""
        delay = min(self.base_delay_s * (2 ** (attempt - 1)), self.max_delay_s)
        return delay * (1 - self.jitter * self.random())

    def delay(self, attempt: int, error: ProviderError) -> float:
        hint = error.retry_after
        if hint is not None and 0 <= hint <= self.max_hint_s:
            return hint
        return self.backoff(attempt)


def retry_after_seconds(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> float | None:
    """The server's requested wait in seconds, or None when it gave no usable hint."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - now(), 0.0)


def should_retry(headers: Mapping[str, str], error: ProviderError) -> bool:
    """``x-should-retry: true|false`` overrides the status-based default."""
    forced = headers.get("x-should-retry")
    if forced == "true":
        return True
    if forced == "false":
        return False
    return error.retryable
