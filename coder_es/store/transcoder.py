"""The events' JSON transcoder: eventsourcing's, made safe for non-UTF-8 file names.

eventsourcing's ``JSONTranscoder`` writes UTF-8 as is and cannot encode a lone surrogate, which
is how a file name that is not valid UTF-8 is carried (``os.fsdecode``). This one writes such a
character as its JSON ``\\uXXXX`` escape (``coder_es.store.surrogates.escape_surrogates``), which
decodes back to the same ``str``; every other event is encoded byte for byte as before.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import JSONTranscoder

from coder_es.store.surrogates import escape_surrogates


class FileNameSafeTranscoder(JSONTranscoder):
    def encode(self, obj: Any) -> bytes:
        return escape_surrogates(self.encoder.encode(obj)).encode("utf-8")
