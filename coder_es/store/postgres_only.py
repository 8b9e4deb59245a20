"""What needs the postgres backend (the fleet's queue, the projections that follow the
notification log) says so in one line; here, in the store, so that the projections below the
fleet can check it too."""

from __future__ import annotations

from coder_es.errors import UsageError
from coder_es.store.compression import READ_TOPIC
from coder_es.store.config import StoreConfig


class FleetUsageError(UsageError):
    """Bad input to the fleet: a backend other than postgres, a malformed job."""


def require_postgres(backend: str, what: str) -> None:
    if backend != "postgres":
        msg = (
            f"{what} needs the postgres backend (the queue and the notification log live in "
            f"PostgreSQL), not {backend!r}: pass --backend postgres or set "
            "CODER_ES_BACKEND=postgres and the POSTGRES_* settings (see docs/postgres.md)"
        )
        raise FleetUsageError(msg)


def projection_env(config: StoreConfig) -> dict[str, str]:
    require_postgres(config.backend, "a projection process")
    env = config.eventsourcing_env()
    # A projection reads what any writer stored: compressed or not (coder_es.store.compression).
    env.setdefault("COMPRESSOR_TOPIC", READ_TOPIC)
    env.setdefault("POSTGRES_POOL_SIZE", "2")
    env.setdefault("POSTGRES_MAX_OVERFLOW", "2")
    return env
