"""The application layer: sessions stored through eventsourcing, blobs beside them.

``CoderApp`` is an ``eventsourcing.Application`` configured by a ``StoreConfig``. It owns the
repository of ``Session`` aggregates and the blob store on the same backend. Commands load a
session, call a method on it and save it; saving is where optimistic concurrency applies (a second
writer on the same session version gets ``eventsourcing.persistence.IntegrityError``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import (
    Mapper,
    MapperDeserialisationError,
    StoredEvent,
    Transcoder,
    find_id_convertor,
)
from eventsourcing.utils import get_topic, resolve_topic

from coder_es.domain.chain import event_hash
from coder_es.domain.session import Session
from coder_es.errors import DAMAGED_STORE_ADVICE, SessionNotFoundError, StoreError
from coder_es.redaction import Redactor
from coder_es.sealing import Sealing, SecretVault
from coder_es.store.anchor import advance_after_save
from coder_es.store.blobs import BlobStore
from coder_es.store.compression import READ_WRITE_TOPIC
from coder_es.store.config import StoreConfig
from coder_es.store.ddl import store_setup_lock
from coder_es.store.lease import LeaseStore
from coder_es.store.transcoder import FileNameSafeTranscoder
from coder_es.store.views import ViewStore
from coder_es.store.witness import Witness, open_witness
from coder_es.summaries import (
    SUMMARY_TOPICS,
    SessionSummary,
    damaged_event_error,
    session_summaries,
)

T = TypeVar("T")

_BASE_KEYS = ("originator_id", "originator_version", "timestamp")


class ChainMapper(Mapper[UUID]):
    """Keeps the hash chain stable across upcasting.

    An event's chain hash covers the form it was recorded in. When a stored event is upcast to a
    newer class version on the way out, the hash of its recorded form is attached to it, so the
    next event appended to the session still links to what is actually in the store.
    """

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        # eventsourcing's Mapper.to_domain_event, with the recorded form's hash taken between
        # decoding and upcasting: the state is decoded once.
        cls = resolve_topic(stored_event.topic)
        try:
            state: dict[str, Any] = self.transcoder.decode(self._plain_state(stored_event))
        except Exception as e:
            msg = (
                f"Failed to deserialise state of stored event with "
                f"topic '{stored_event.topic}', "
                f"originator_id '{stored_event.originator_id}' and "
                f"originator_version {stored_event.originator_version}: {e}"
            )
            raise MapperDeserialisationError(msg) from e
        class_version = getattr(cls, "class_version", 1)
        from_version = state.get("class_version", 1)
        recorded = None
        if from_version < class_version:
            recorded = recorded_chain_hash(stored_event, state)
        id_convertor = find_id_convertor(cls, cast(Hashable, type(stored_event.originator_id)))
        state["originator_id"] = id_convertor(stored_event.originator_id)
        state["originator_version"] = stored_event.originator_version
        state.pop("class_version", None)
        while from_version < class_version:
            getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
            from_version += 1
        if recorded is not None:
            state["_recorded_hash"] = recorded
        domain_event = object.__new__(cls)
        object.__setattr__(domain_event, "__dict__", state)
        return domain_event

    def decode_state(self, stored_event: StoredEvent) -> dict[str, Any]:
        """The event's fields exactly as recorded (no upcasting)."""
        return dict(self.transcoder.decode(self._plain_state(stored_event)))

    def _plain_state(self, stored_event: StoredEvent) -> bytes:
        state = stored_event.state
        if self.cipher:
            state = self.cipher.decrypt(state)
        if self.compressor:
            state = self.compressor.decompress(state)
        return state


def recorded_chain_hash(stored_event: StoredEvent, state: dict[str, Any]) -> str:
    """The chain hash of a stored event, from its state as recorded."""
    fields = {k: v for k, v in state.items() if k not in _BASE_KEYS and k != "class_version"}
    return event_hash(
        stored_event.originator_id,
        stored_event.originator_version,
        stored_event.topic,
        state["timestamp"],
        fields,
    )


class ChainedLog(Application[UUID]):
    """An application on the sessions' log: the chain-keeping mapper, and a transcoder that
    carries non-UTF-8 file names (``coder_es.store.transcoder``)."""

    def construct_transcoder(self) -> Transcoder:
        transcoder = FileNameSafeTranscoder()
        self.register_transcodings(transcoder)
        return transcoder

    def construct_mapper(self) -> Mapper[UUID]:
        return self.factory.mapper(transcoder=self.construct_transcoder(), mapper_class=ChainMapper)


class CoderApp(ChainedLog):
    name = "coder_es"
    snapshotting_intervals = {Session: 500}
    # Stored states are written compressed (coder_es.store.compression) and read either way;
    # the environment may choose to write them as JSON text (COMPRESSOR_TOPIC=...:EventReader).
    env = {"AGGREGATE_CACHE_MAXSIZE": "128", "COMPRESSOR_TOPIC": READ_WRITE_TOPIC}

    def __init__(
        self,
        config: StoreConfig | None = None,
        env: dict[str, str] | None = None,
        *,
        redactor: Redactor | None = None,
        sealing_environ: Mapping[str, str] | None = None,
    ) -> None:
        """``sealing_environ``: where the sealing's user key is read from
        (``coder_es.sealing.load_user_key``; default: this process's environment)."""
        self.config = config or StoreConfig(backend="popo", path=Path("."))
        self.config.prepare()
        merged = self.config.eventsourcing_env()
        merged.update(env or {})
        # Creating tables concurrently fails on PostgreSQL: one opening process at a time.
        with store_setup_lock(self.config):
            try:
                super().__init__(env=merged)
            except StoreError:
                raise
            except Exception as e:  # the persistence modules raise many kinds; name the store
                where = self.config.describe()
                msg = f"cannot open the {self.config.backend} store at {where}: {e}"
                if type(e).__name__ in ("DatabaseError", "OperationalError"):
                    msg += f"; if the file is damaged, {DAMAGED_STORE_ADVICE}"
                raise StoreError(msg) from e
            self.blobs: BlobStore = self.config.open_blob_store()
            self.views: ViewStore = self.config.open_view_store()
            # One writer per session: turns and branching commands hold its lease.
            self.leases: LeaseStore = self.config.open_lease_store()
            # Each session's head, witnessed outside the store (coder_es.store.witness).
            self.witness: Witness | None = open_witness(self)
        # Secrets are sealed and replaced by markers before any event exists (the chain hash
        # covers content) and before any blob is stored; effects use the real values.
        vault = SecretVault(self.views, sealing_environ, where=f" in {self.config.describe()}")
        self.sealing = Sealing(redactor or Redactor.from_environ(), vault)
        # Given to every session this application starts or loads (``Session.sealing``) and to
        # its blob store: each open application seals with its own vault, however many record
        # in one process.
        self.blobs.sealing = self.sealing
        self.save_observers: list[Callable[[list[Any]], None]] = []
        """Called after each save with its recordings (live telemetry follows the log here)."""

    def save(self, *objs: Any, **kwargs: Any) -> Any:
        recordings = super().save(*objs, **kwargs)
        # The audit anchor is a witness of each session's head outside the chain itself, so that
        # deleting a session's last events is detected too (coder_es.store.anchor).
        for obj in objs:
            if isinstance(obj, Session):
                advance_after_save(self, obj)
                if self.witness is not None:
                    self.witness.record(str(obj.id), int(obj.version), str(obj.chain_head))
        for observe in self.save_observers:
            observe(recordings)
        return recordings

    def close(self) -> None:
        if self.witness is not None:
            self.witness.close()
        self.leases.close()
        self.views.close()
        self.blobs.close()
        super().close()

    # ------------------------------------------------------------------ sessions

    def start_session(self, **kwargs: Any) -> Session:
        session = Session.start(**kwargs, sealing=self.sealing)
        self.save(session)
        return session

    def get_session(self, session_id: UUID | str) -> Session:
        sid = session_id if isinstance(session_id, UUID) else self.resolve_session(session_id)
        try:
            session: Any = self.repository.get(sid)
        except AggregateNotFoundError:
            raise SessionNotFoundError(str(session_id), store=self.config.describe()) from None
        except StoreError:
            raise
        except Exception as e:  # a stored event that no longer decodes: name it, no traceback
            raise damaged_event_error(f"session {sid}", e) from e
        if not isinstance(session, Session):
            raise SessionNotFoundError(str(session_id), store=self.config.describe())
        session.sealing = self.sealing
        return session

    def update(self, session_id: UUID | str, command: Callable[[Session], T]) -> T:
        """Load a session, run ``command`` on it and save what it triggered."""
        session = self.get_session(session_id)
        result = command(session)
        self.save(session)
        return result

    def session_events(
        self, session_id: UUID, *, gt: int | None = None, lte: int | None = None
    ) -> list[Any]:
        return list(self.events.get(session_id, gt=gt, lte=lte))

    def last_version(self, session_id: UUID) -> int:
        """The session's last stored version (0: none), read from the store, not a cache."""
        last = self.recorder.select_events(session_id, desc=True, limit=1)
        return int(last[0].originator_version) if last else 0

    def stored_events(self, session_id: UUID) -> list[StoredEvent]:
        return list(self.recorder.select_events(session_id))

    def unsealed_events(
        self, session_id: UUID, *, gt: int | None = None, lte: int | None = None
    ) -> list[Any]:
        """The session's events as they were before redaction: what the agent really said and
        did (for the loop, resume and replay; never for anything that leaves the machine)."""
        events = self.session_events(session_id, gt=gt, lte=lte)
        return [self.sealing.unseal_event(e) for e in events]

    def iter_session_summaries(self) -> Iterator[SessionSummary]:
        """Every session (archived ones too), as it is now: its agent, provider and model are
        those of its last ``SettingsChanged``, else those it started with (read as records:
        ``coder_es.summaries``, which ``coder-es sessions`` uses without the application)."""
        return session_summaries(self.recorder, self.mapper)

    def _summary_changes(self, only: UUID | None = None) -> dict[UUID, dict[str, Any]]:
        """Per session, what its events since ``Started`` changed in its summary: the agent,
        provider and model of its last ``SettingsChanged``, and whether it is archived."""
        kinds = (Session.SettingsChanged, Session.Archived, Session.Unarchived)
        if only is not None:
            events: Iterable[Any] = (e for e in self.session_events(only) if isinstance(e, kinds))
        else:
            events = self._events_of(SUMMARY_TOPICS, "an event of session")
        out: dict[UUID, dict[str, Any]] = {}
        for e in events:
            state = out.setdefault(e.originator_id, {})
            if isinstance(e, Session.SettingsChanged):
                state.update(agent=e.agent, provider=e.provider, model=e.model)
            else:
                state["archived"] = isinstance(e, Session.Archived)
        return out

    def _events_of(self, topics: list[str], where: str) -> Iterator[Any]:
        """The events of these kinds, of every session, in the order they were recorded."""
        start = 1
        while True:
            batch = self.recorder.select_notifications(start=start, limit=500, topics=topics)
            for notification in batch:
                try:
                    event: Any = self.mapper.to_domain_event(notification)
                except Exception as e:
                    raise damaged_event_error(f"{where} {notification.originator_id}", e) from e
                yield event
            if len(batch) < 500:
                return
            start = batch[-1].id + 1

    def sessions_with(self, kind: type[Any]) -> list[UUID]:
        """The sessions that recorded at least one event of this kind, in first-record order
        (read from the store's topic index, not by loading every session)."""
        seen: dict[UUID, None] = {}
        start = 1
        while True:
            batch = self.recorder.select_notifications(
                start=start, limit=500, topics=[get_topic(kind)]
            )
            for notification in batch:
                sid = notification.originator_id
                seen.setdefault(sid if isinstance(sid, UUID) else UUID(sid), None)
            if len(batch) < 500:
                return list(seen)
            start = batch[-1].id + 1

    def list_sessions(self, *, archived: bool | None = False) -> list[SessionSummary]:
        """The sessions in start order: those not archived (``archived=False``), only the
        archived ones (``True``) or all (``None``)."""
        return [
            s for s in self.iter_session_summaries() if archived is None or s.archived == archived
        ]

    def archive_session(self, session_id: UUID, *, by: str, archived: bool = True) -> bool:
        """Hide a session from the lists (``archived``) or show it again; False when it already
        was. Holds the session's lease (one writer per session): a session running a turn in
        another process is busy (``SessionBusyError``)."""
        with self.leases.hold(str(session_id), "archive" if archived else "unarchive"):
            state = self._summary_changes(only=session_id).get(session_id, {})
            if bool(state.get("archived")) == archived:
                return False
            session = self.get_session(session_id)
            if archived:
                session.archive(by=by)
            else:
                session.unarchive(by=by)
            self.save(session)
        return True

    def resolve_session(self, ref: str) -> UUID:
        """A full session id or a unique prefix of one."""
        ref = ref.strip().lower()
        try:
            exact = UUID(ref)
        except ValueError:
            exact = None
        if exact is not None:
            return exact
        matches = [s.id for s in self.iter_session_summaries() if str(s.id).startswith(ref)]
        if len(matches) != 1 or not ref:
            raise SessionNotFoundError(
                ref, [str(m)[:8] for m in matches[:10]], store=self.config.describe()
            )
        return matches[0]
