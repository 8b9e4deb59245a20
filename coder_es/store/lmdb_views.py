"""Projection checkpoints in the ``coder_es.views`` sub-database of the store's LMDB Environment."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from coder_es.store.lmdb_env import LMDBSettings, acquire_store, release_store
from coder_es.store.views import Guard, ViewRecord, ViewStore

_POSITION = struct.Struct(">q")


class LMDBViewStore(ViewStore):
    DB_NAME = b"coder_es.views"

    def __init__(self, env: Mapping[str, str]) -> None:
        self.settings = LMDBSettings.from_mapping(env)
        self.store = acquire_store(self.settings)
        self._db = self.store.db(self.DB_NAME)
        self._closed = False

    def get(self, key: str) -> ViewRecord | None:
        with self.store.read() as txn:
            raw: bytes | None = txn.get(key.encode(), db=self._db)
        if raw is None:
            return None
        (position,) = _POSITION.unpack_from(raw)
        return ViewRecord(position, bytes(raw[_POSITION.size :]))

    def put(self, key: str, record: ViewRecord) -> None:
        value = _POSITION.pack(record.position) + record.data
        db = self._db
        self.store.write(
            lambda txn: txn.put(key.encode(), value, db=db), durable=self.settings.durable
        )

    def delete(self, key: str) -> None:
        db = self._db
        self.store.write(lambda txn: txn.delete(key.encode(), db=db), durable=self.settings.durable)

    def keys(self, prefix: str) -> list[str]:
        start = prefix.encode()
        found: list[str] = []
        with self.store.read() as txn:
            cursor = txn.cursor(db=self._db)
            if cursor.set_range(start):
                for key in cursor.iternext(values=False):
                    if not bytes(key).startswith(start):
                        break
                    found.append(bytes(key).decode())
        return found

    def get_many(self, keys: Sequence[str]) -> dict[str, ViewRecord]:
        found = {}
        with self.store.read() as txn:
            for key in keys:
                raw = txn.get(key.encode(), db=self._db)
                if raw is not None:
                    (position,) = _POSITION.unpack_from(raw)
                    found[key] = ViewRecord(position, bytes(raw[_POSITION.size :]))
        return found

    def batch(
        self,
        puts: Mapping[str, ViewRecord],
        deletes: Sequence[str] = (),
        guards: Sequence[Guard] = (),
    ) -> bool:
        db = self._db

        def apply(txn: Any) -> bool:
            for guard in guards:
                raw = txn.get(guard.key.encode(), db=db)
                found = None if raw is None else _POSITION.unpack_from(raw)[0]
                if found != guard.position:
                    return False
            for key in deletes:
                txn.delete(key.encode(), db=db)
            for key, record in puts.items():
                txn.put(key.encode(), _POSITION.pack(record.position) + record.data, db=db)
            return True

        return self.store.write(apply, durable=self.settings.durable)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            release_store(self.store)
