"""The domain layer: the Session aggregate, its events and the hash chain. No I/O here."""

from coder_es.domain.chain import canonical_json, event_hash
from coder_es.domain.session import Session

__all__ = ["Session", "canonical_json", "event_hash"]
