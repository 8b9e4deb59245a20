"""The domain layer: the Session aggregate, its events and the hash chain. No I/O here.

The names below are loaded on first use, so that importing ``coder_es.domain.chain`` (the
event transcoder, the audit readers) does not also build the Session aggregate and its event
classes, which is the largest part of a command's start-up (issue 35).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coder_es.domain.chain import canonical_json, event_hash
    from coder_es.domain.session import Session

__all__ = ["Session", "canonical_json", "event_hash"]


def __getattr__(name: str) -> Any:
    if name == "Session":
        from coder_es.domain.session import Session

        return Session
    if name in ("canonical_json", "event_hash"):
        from coder_es.domain import chain

        return getattr(chain, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
