"""Many applications opening one fresh PostgreSQL store at the same moment all succeed."""

from __future__ import annotations

import threading
from pathlib import Path

from backends import make_config, requires_postgres

from coder_es.application import CoderApp

OPENERS = 8


@requires_postgres
def test_concurrent_openings_of_a_new_postgres_store_all_succeed(
    tmp_path: Path, pg_schema: str
) -> None:
    config = make_config("postgres", tmp_path, pg_schema)
    start = threading.Barrier(OPENERS)
    apps: list[CoderApp] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        start.wait()
        try:
            apps.append(CoderApp(config))
        except BaseException as e:  # reported below with the others
            errors.append(e)

    threads = [threading.Thread(target=open_store) for _ in range(OPENERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    try:
        assert errors == []
        assert len(apps) == OPENERS
        # They share one store: a session saved through one is read through another, with blobs.
        session = apps[0].start_session(workspace=str(tmp_path), title="shared")
        digest = apps[1].blobs.put(b"content")
        assert apps[-1].get_session(session.id).title == "shared"
        assert apps[-1].blobs.get(digest) == b"content"
    finally:
        for app in apps:
            app.close()
