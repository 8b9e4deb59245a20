"""Session summaries (what ``coder-es sessions`` lists), read from the event log as records.

A summary needs a few fields of each session's ``Started`` event and of the few events that
change it later (``SettingsChanged``, ``Archived``, ``Unarchived``): their states are decoded
here as plain dicts, found through the store's topic index, without building domain events.
So a command that only lists sessions opens the recorder alone (``read_summaries``) and never
imports the domain model or builds the application, which is most of a read command's start-up
(issue 35). ``CoderApp.iter_session_summaries`` reads through the same function, so both give
the same summaries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from coder_es.errors import StoreError

if TYPE_CHECKING:
    from eventsourcing.persistence import ApplicationRecorder, Mapper, Notification

    from coder_es.store.config import StoreConfig
    from coder_es.store.views import ViewStore

# The topics of coder_es.domain.session's events (tests/store/test_summaries.py checks them
# against the classes): written out so that reading summaries does not import the domain.
STARTED_TOPIC = "coder_es.domain.session:Session.Started"
SETTINGS_CHANGED_TOPIC = "coder_es.domain.session:Session.SettingsChanged"
ARCHIVED_TOPIC = "coder_es.domain.session:Session.Archived"
UNARCHIVED_TOPIC = "coder_es.domain.session:Session.Unarchived"
SUMMARY_TOPICS = [SETTINGS_CHANGED_TOPIC, ARCHIVED_TOPIC, UNARCHIVED_TOPIC]
"""The events that change what a session's summary says after its start (few per session)."""

APP_NAME = "coder_es"
"""``CoderApp.name``: the event log's namespace in a shared LMDB directory."""

PAGE = 500


@dataclass(frozen=True)
class SessionSummary:
    id: UUID
    title: str
    workspace: str
    agent: str
    provider: str
    model: str
    started_at: datetime
    parent_session: str | None
    parent_node: str | None
    archived: bool = False
    """Hidden from the lists (``session/delete``); still stored and opened by its id."""


def damaged_event_error(where: str, e: BaseException) -> StoreError:
    reason = f"{type(e).__name__}: {e}"[:300]
    return StoreError(
        f"{where}: a stored event cannot be decoded ({reason}); "
        "coder-es verify --all lists every damaged event"
    )


def plain_state(mapper: Mapper[Any], record: Any) -> dict[str, Any]:
    """A stored event's fields as recorded (decrypted and decompressed when the store is)."""
    state = record.state
    if mapper.cipher:
        state = mapper.cipher.decrypt(state)
    if mapper.compressor:
        state = mapper.compressor.decompress(state)
    return dict(mapper.transcoder.decode(state))


def session_summaries(
    recorder: ApplicationRecorder, mapper: Mapper[Any]
) -> Iterator[SessionSummary]:
    """Every session (archived ones too), as it is now: its agent, provider and model are
    those of its last ``SettingsChanged``, else those it started with."""
    changes: dict[Any, dict[str, Any]] = {}
    for record, state in _states(recorder, mapper, SUMMARY_TOPICS, "an event of session"):
        now = changes.setdefault(record.originator_id, {})
        if record.topic == SETTINGS_CHANGED_TOPIC:
            now.update(agent=state["agent"], provider=state["provider"], model=state["model"])
        else:
            now["archived"] = record.topic == ARCHIVED_TOPIC
    for record, state in _states(recorder, mapper, [STARTED_TOPIC], "the start of session"):
        now = changes.get(record.originator_id, {})
        try:
            summary = SessionSummary(
                id=record.originator_id,  # type: ignore[arg-type]  # a UUID: CoderApp ids
                title=state["title"],
                workspace=state["workspace"],
                agent=now.get("agent", state["agent"]),
                provider=now.get("provider", state["provider"]),
                model=now.get("model", state["model"]),
                started_at=state["timestamp"],
                parent_session=state["parent_session"],
                parent_node=state["parent_node"],
                archived=bool(now.get("archived")),
            )
        except KeyError as e:
            raise damaged_event_error(f"the start of session {record.originator_id}", e) from e
        yield summary


def _states(
    recorder: ApplicationRecorder, mapper: Mapper[Any], topics: list[str], where: str
) -> Iterator[tuple[Notification, dict[str, Any]]]:
    """The records of these kinds, of every session, in the order they were recorded, each
    with its decoded state."""
    start = 1
    while True:
        batch = recorder.select_notifications(start=start, limit=PAGE, topics=topics)
        for record in batch:
            try:
                state = plain_state(mapper, record)
            except Exception as e:
                raise damaged_event_error(f"{where} {record.originator_id}", e) from e
            yield record, state
        if len(batch) < PAGE:
            return
        start = batch[-1].id + 1


class StoreReader:
    """A store's recorder, its mapper (the stored form of events, decoded as plain dicts by
    ``plain_state``) and its view store, opened without the application or the domain model:
    what a read command needs when what it reads is an index that is up to date (issue 35).
    The store must exist (``config.exists()``)."""

    def __init__(self, config: StoreConfig) -> None:
        from eventsourcing.persistence import (
            DatetimeAsISO,
            DecimalAsStr,
            InfrastructureFactory,
            UUIDAsHex,
        )
        from eventsourcing.utils import Environment

        from coder_es.store.compression import READ_TOPIC
        from coder_es.store.transcoder import FileNameSafeTranscoder

        self.config = config
        # The environment CoderApp's application is configured from (eventsourcing's
        # Application.construct_env: the process environment, then the store's settings). Its
        # states may be stored compressed (the default): read with the reader CoderApp has.
        defaults = {"COMPRESSOR_TOPIC": READ_TOPIC}
        env = Environment(APP_NAME, {**defaults, **os.environ, **config.eventsourcing_env()})
        try:
            self.factory: Any = InfrastructureFactory.construct(env)
        except StoreError:
            raise
        except Exception as e:  # as CoderApp says it
            raise StoreError(
                f"cannot open the {config.backend} store at {config.describe()}: {e}"
            ) from e
        self._views: ViewStore | None = None
        try:
            transcoder = FileNameSafeTranscoder()
            for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
                transcoder.register(transcoding)
            self.mapper: Mapper[Any] = self.factory.mapper(transcoder=transcoder)
            self.recorder: ApplicationRecorder = self.factory.application_recorder()
        except BaseException:
            self.factory.close()
            raise

    @property
    def views(self) -> ViewStore:
        """The view store (indexes and checkpoints), opened on first use."""
        if self._views is None:
            self._views = self.config.open_view_store()
        return self._views

    def close(self) -> None:
        if self._views is not None:
            self._views.close()
            self._views = None
        self.factory.close()


def read_summaries(config: StoreConfig) -> list[SessionSummary]:
    """The summaries of every session in the store ``config`` names, read by the recorder
    alone (no application, no domain model). The store must exist (``config.exists()``)."""
    reader = StoreReader(config)
    try:
        return list(session_summaries(reader.recorder, reader.mapper))
    finally:
        reader.close()
