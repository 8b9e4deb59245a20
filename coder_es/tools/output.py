"""Output caps: the model gets a bounded view of a tool's output, the store keeps all of it.

An output longer than ``limit`` characters is stored whole as a blob; the model sees its head and
tail with a note in the middle saying how much was left out and which blob holds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from coder_es.store.blobs import BlobStore

DEFAULT_LIMIT = 30_000


@dataclass(frozen=True)
class CappedOutput:
    text: str  # what the model sees
    blob: str | None  # the full output's digest, when it was truncated
    truncated: bool


def cap_output(output: str, blobs: BlobStore, limit: int = DEFAULT_LIMIT) -> CappedOutput:
    if len(output) <= limit:
        return CappedOutput(output, None, False)
    digest = blobs.put(output.encode("utf-8", "surrogateescape"))
    head_len = limit * 2 // 3
    tail_len = limit - head_len
    head, tail = output[:head_len], output[-tail_len:]
    omitted = len(output) - head_len - tail_len
    lines_omitted = output.count("\n", head_len, len(output) - tail_len)
    note = (
        f"\n\n[... output truncated: {omitted} characters ({lines_omitted} lines) omitted here; "
        f"the full output ({len(output)} characters) is stored as blob sha256:{digest} ...]\n\n"
    )
    return CappedOutput(head + note + tail, digest, True)
