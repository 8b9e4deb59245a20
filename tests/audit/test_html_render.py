"""The HTML transcript renders in headless Chromium and the branch tree is drawn."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from coder_es.audit.export import ExportOptions, export_session
from coder_es.audit.export_html import EDGE_COLOUR, ROLE_COLOURS
from tests.audit.conftest import Recorded

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian package 'chromium'; .ci/run installs it)",
)


def decode_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, raw rows) of an 8-bit RGB/RGBA non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    out = bytearray()
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        out += line
        prev = line
    return width, height, channels, bytes(out)


def count_colour(png: tuple[int, int, int, bytes], hex_colour: str, tolerance: int = 12) -> int:
    _, _, channels, pixels = png
    want = bytes.fromhex(hex_colour.lstrip("#"))
    found = 0
    for i in range(0, len(pixels), channels):
        if all(abs(pixels[i + k] - want[k]) <= tolerance for k in range(3)):
            found += 1
    return found


def _screenshot(html: bytes, tmp_path: Path, name: str) -> tuple[int, int, int, bytes]:
    page = tmp_path / f"{name}.html"
    page.write_bytes(html)
    shot = tmp_path / f"{name}.png"
    subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,800",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    return decode_png(shot.read_bytes())


def test_tree_is_drawn_in_the_screenshot(recorded: Recorded, tmp_path: Path) -> None:
    html = export_session(recorded.app, recorded.session, ExportOptions(format="html"))
    png = _screenshot(html, tmp_path, "session")
    start, end = html.index(b"<svg"), html.index(b"</svg>") + len(b"</svg>")
    without_tree = _screenshot(html[:start] + html[end:], tmp_path, "no-tree")
    # The tree's edges have a colour of their own: present with the tree, absent without it.
    assert count_colour(png, EDGE_COLOUR, tolerance=30) > 150
    assert count_colour(without_tree, EDGE_COLOUR, tolerance=30) < 5
    # And its dots are coloured by role.
    for role in ("user", "assistant", "tool_result"):
        assert count_colour(png, ROLE_COLOURS[role]) > 100, role
