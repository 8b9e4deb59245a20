"""The search index on the fleet backend: PostgreSQL full-text search, kept by a projection.

``SearchView`` is a ``PostgresTrackingRecorder``: the documents live in ``coder_es_search`` (a
``tsvector`` column generated from the text with the ``simple`` configuration, under a GIN
index) and the position in ``search_tracking``; a notification's documents commit in the same
transaction as its tracking record, so each event is indexed exactly once whoever indexes it:
the projection process (``coder-es project --view search``) or a search catching up first.

Text is split into words like FTS5 does (letters and digits; everything else separates, so
``src/frob/wheel.py`` is four words rather than the one "file" token PostgreSQL's parser would
make of it). Queries are ``phraseto_tsquery`` calls with the user's phrases as parameters, so no
input is tsquery syntax.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection
from psycopg.sql import SQL, Composed, Identifier

from coder_es.application import CoderApp
from coder_es.errors import CoderESError
from coder_es.store.blobs import BlobStore
from coder_es.store.config import StoreConfig
from coder_es.store.ddl import store_setup_lock
from projections.search.documents import MARK_END, MARK_START, Entries, documents
from projections.search.query import WINDOW, Filters, Hit, Query

PROJECTION_NAME = "search"
SEARCH_TABLE = "coder_es_search"
_HEADLINE = f"StartSel={MARK_START}, StopSel={MARK_END}, MaxWords=24, MinWords=8, MaxFragments=1"
_HEADLINE_CHARS = 20000
"""Characters of a text that ``ts_headline`` reads for the snippet (it re-parses them)."""


class _ViewBlobs(BlobStore):
    """The blob table read through the view's own connection (the projection process has no
    application open); read-only, and only ``stored_form`` is used."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self._datastore = datastore
        self._table = SQL("{0}.coder_es_blobs").format(Identifier(datastore.schema))

    def _read(self, digest: str) -> bytes | None:
        with self._datastore.transaction(commit=False) as curs:
            curs.execute(
                SQL("SELECT record FROM {0} WHERE digest = %s").format(self._table), (digest,)
            )
            row = curs.fetchone()
        return None if row is None else bytes(row["record"])

    def _write_if_absent(self, digest: str, record: bytes) -> None:
        raise NotImplementedError("the search view never writes blobs")

    def _digests(self) -> Iterator[str]:
        return iter(())

    def stored(self, digest: str) -> bytes | None:
        try:
            return self.stored_form(digest)
        except CoderESError:  # a missing or damaged blob: the event's own text is indexed
            return None


class SearchView(PostgresTrackingRecorder):
    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        kwargs.setdefault("tracking_table_name", "search_tracking")
        super().__init__(datastore, **kwargs)
        schema = Identifier(datastore.schema)
        self.table = SQL("{0}.{1}").format(schema, Identifier(SEARCH_TABLE))
        self.sql_create_statements += [
            SQL(
                "CREATE TABLE IF NOT EXISTS {0} ("
                "id bigserial PRIMARY KEY, session text NOT NULL, version integer NOT NULL, "
                "node text NOT NULL, kind text NOT NULL, ts double precision NOT NULL, "
                "text text NOT NULL, "
                "tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', "
                "regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))) STORED)"
            ).format(self.table),
            SQL("CREATE INDEX IF NOT EXISTS {0} ON {1} USING GIN (tsv)").format(
                Identifier(f"{SEARCH_TABLE}_tsv"), self.table
            ),
        ]
        self._lock_key = zlib.crc32(f"{datastore.schema}.{self.tracking_table_name}".encode())
        self.blobs = _ViewBlobs(datastore)

    def add(self, entries: Entries) -> int:
        """Index each notification's documents with its tracking record, atomically; those
        already tracked (by another indexer) are skipped. Returns how many were new."""
        if not entries:
            return 0
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            curs.execute(self.max_tracking_id_statement, (CoderApp.name,))
            found = curs.fetchone()
            done = (found["max"] if found else None) or 0
            fresh = [(n, docs) for n, docs in entries if n > done]
            rows = [
                (d.session, d.version, d.node, d.kind, d.timestamp, d.text)
                for _, docs in fresh
                for d in docs
            ]
            if rows:
                copy = SQL("COPY {0} (session, version, node, kind, ts, text) FROM STDIN")
                with curs.copy(copy.format(self.table)) as sink:
                    for row in rows:
                        sink.write_row(row)
            if fresh:
                self._insert_tracking(curs, Tracking(CoderApp.name, fresh[-1][0]))
        return len(fresh)

    def position(self) -> int:
        return self.max_tracking_id(CoderApp.name) or 0

    def search(self, query: Query, filters: Filters) -> list[Hit]:
        tsquery = SQL(" && ").join(SQL("phraseto_tsquery('simple', %s)") for _ in query.terms())
        where: list[Composed | SQL] = [SQL("tsv @@ q")]
        params: list[Any] = []
        if filters.session is not None:
            where.append(SQL("session = %s"))
            params.append(filters.session)
        if filters.kind is not None:
            where.append(SQL("kind = %s"))
            params.append(filters.kind)
        if filters.since is not None:
            where.append(SQL("ts >= %s"))
            params.append(filters.since)
        statement = SQL(
            "SELECT session, node, kind, version, ts, "
            "ts_headline('simple', left(text, {0}), q, %s) AS snippet, ts_rank_cd(tsv, q) AS score "
            "FROM {1}, ({2}) AS query(q) WHERE {3} ORDER BY score DESC, id DESC LIMIT %s"
        ).format(
            SQL(str(_HEADLINE_CHARS)),
            self.table,
            SQL("SELECT ") + tsquery,
            SQL(" AND ").join([*where, SQL("id > %s")]),
        )
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(SQL("SELECT max(id) AS newest FROM {0}").format(self.table))
            found_newest = curs.fetchone()
            newest = (found_newest["newest"] if found_newest else None) or 0
            # Rank among the most recent documents first (like each FTS5 block), widening 8x
            # at a time while fewer than `limit` hits are found (ts_rank_cd and ts_headline
            # read each ranked row's text; the GIN index finds the matches).
            window = WINDOW
            while True:
                floor = max(0, newest - window)
                curs.execute(statement, [_HEADLINE, *query.terms(), *params, floor, filters.limit])
                found = curs.fetchall()
                if len(found) >= filters.limit or floor == 0:
                    break
                window *= 8
        return [
            Hit.marked(
                r["snippet"],
                session=r["session"],
                node=r["node"],
                kind=r["kind"],
                version=int(r["version"]),
                timestamp=float(r["ts"]),
                score=float(r["score"]),
            )
            for r in found
        ]

    def rows(self) -> list[tuple[Any, ...]]:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                SQL(
                    "SELECT session, version, node, kind, ts, text FROM {0} "
                    "ORDER BY session, version, kind, node"
                ).format(self.table)
            )
            return [tuple(r.values()) for r in curs.fetchall()]

    def clear(self) -> None:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key,))
            curs.execute(SQL("DELETE FROM {0}").format(self.table))
            curs.execute(
                SQL("DELETE FROM {0}").format(
                    SQL("{0}.{1}").format(
                        Identifier(self.datastore.schema), Identifier(self.tracking_table_name)
                    )
                )
            )


class SearchProjection(Projection[SearchView]):
    name = PROJECTION_NAME
    topics = ()

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        docs = documents(domain_event, self.view.blobs.stored)
        self.view.add([(tracking.notification_id, docs)])


def open_search_view(config: StoreConfig) -> SearchView:
    from eventsourcing.persistence import InfrastructureFactory
    from eventsourcing.utils import Environment

    from coder_es.store.postgres_only import projection_env

    env = Environment(PROJECTION_NAME, projection_env(config))
    with store_setup_lock(config):
        factory = InfrastructureFactory[SearchView].construct(env=env)
        return factory.tracking_recorder(SearchView)


class PostgresSearchIndex:
    """``SearchIndex`` on the view (what ``coder-es search`` uses on the postgres backend)."""

    def __init__(self, config: StoreConfig) -> None:
        self.view = open_search_view(config)

    @property
    def position(self) -> int:
        return self.view.position()

    def add(self, entries: Entries) -> int:
        return self.view.add(entries)

    def search(self, query: Query, filters: Filters) -> list[Hit]:
        return self.view.search(query, filters)

    def rows(self) -> list[tuple[Any, ...]]:
        return self.view.rows()

    def clear(self) -> None:
        self.view.clear()

    def close(self) -> None:
        self.view.datastore.close()
