"""Deterministic replay: cassettes, the replay provider and engine, divergence reports.

    from replay import load_cassette, replay_cassette, ReplayOptions
    cassette = load_cassette("coder_es/data/sessions/fix-failing-test.cassette.jsonl")
    report = replay_cassette(cassette, ReplayOptions(mode="live"))
    print(report.render())

Names are imported lazily so that the pytest plugin (loaded by every test run) stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "Cassette": "replay.cassette",
    "CassetteError": "replay.cassette",
    "RecordedEvent": "replay.cassette",
    "export_session": "replay.cassette",
    "load_cassette": "replay.cassette",
    "loads": "replay.cassette",
    "dumps": "replay.cassette",
    "write_cassette": "replay.cassette",
    "find_cassettes": "replay.cassette",
    "ReplayOptions": "replay.engine",
    "ReplayEngine": "replay.engine",
    "ReplayApp": "replay.engine",
    "replay_cassette": "replay.engine",
    "areplay_cassette": "replay.engine",
    "ReplayProvider": "replay.provider",
    "RequestMatcher": "replay.provider",
    "Normalizer": "replay.normalize",
    "Divergence": "replay.report",
    "ReplayReport": "replay.report",
    "ReplayMismatch": "replay.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'replay' has no attribute {name!r}")
    return getattr(import_module(module), name)
