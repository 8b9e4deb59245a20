"""Change detection for shell commands: what changed, with contents stored, hashing only changes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from coder_es.store.blobs import MemoryBlobStore
from coder_es.workspace import FileChange, StatIndex, Workspace

HOUR_NS = 3600 * 10**9


def make_tree(root: Path, n_dirs: int = 5, per_dir: int = 20) -> list[Path]:
    paths = []
    for d in range(n_dirs):
        (root / f"d{d}").mkdir()
        for f in range(per_dir):
            p = root / f"d{d}" / f"f{f}.txt"
            p.write_text(f"dir {d} file {f}\n")
            paths.append(p)
    return paths


def backdate(root: Path) -> None:
    """Make every file look old, as in a real checkout (recent files are re-checked by content)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *dirnames]:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns - HOUR_NS), follow_symlinks=False)
    st = os.stat(root)
    os.utime(root, ns=(st.st_atime_ns, st.st_mtime_ns - HOUR_NS))


def test_a_shell_command_changes_are_found_with_their_contents(
    ws: Workspace, root: Path, blobs: MemoryBlobStore
) -> None:
    make_tree(root)
    (root / ".gitignore").write_text("*.o\n")
    backdate(root)
    index = ws.stat_index()
    old = (root / "d1/f1.txt").read_bytes()
    subprocess.run(
        "echo changed > d1/f1.txt && rm d2/f2.txt && mkdir -p new/deep && echo hi > new/deep/n.txt"
        " && echo obj > d3/x.o",
        shell=True,
        cwd=root,
        check=True,
    )
    changes = index.rescan()
    assert [(c.path, c.kind) for c in changes] == [
        ("d1/f1.txt", "modified"),
        ("d2/f2.txt", "deleted"),
        ("new/deep/n.txt", "created"),
    ]
    modified, deleted, created = changes
    assert blobs.get(modified.before or "") == old
    assert blobs.get(modified.after or "") == b"changed\n"
    assert blobs.get(deleted.before or "") == b"dir 2 file 2\n"
    assert blobs.get(created.after or "") == b"hi\n"
    assert index.rescan() == []


def test_only_files_whose_stat_changed_are_read(root: Path) -> None:
    files = make_tree(root, n_dirs=10, per_dir=50)
    backdate(root)
    index = StatIndex(root, MemoryBlobStore())
    assert index.hashed == 500
    assert index.rescan() == [] and index.hashed == 0
    for p in files[:7]:
        p.write_text("new content\n")
    changes = index.rescan()
    assert len(changes) == 7 and index.hashed == 7


def test_a_same_size_rewrite_in_the_same_tick_is_not_missed(root: Path) -> None:
    p = root / "a.txt"
    p.write_text("aaaa\n")
    index = StatIndex(root, MemoryBlobStore())
    st = os.stat(p)
    p.write_text("bbbb\n")
    # Same size and the very same mtime: only the racy-entry rule can see this change.
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    (change,) = index.rescan()
    assert change.path == "a.txt" and change.kind == "modified"


def test_a_content_change_with_a_restored_mtime_is_seen_through_ctime(root: Path) -> None:
    p = root / "a.txt"
    p.write_text("aaaa\n")
    backdate(root)
    index = StatIndex(root, MemoryBlobStore())
    st = os.stat(p)
    p.write_text("bbbb\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [c.kind for c in index.rescan()] == ["modified"]


def test_an_edited_gitignore_shows_newly_unignored_files(root: Path) -> None:
    (root / ".gitignore").write_text("*.gen\n")
    (root / "a.gen").write_text("generated\n")
    backdate(root)
    index = StatIndex(root, MemoryBlobStore())
    assert "a.gen" not in index.hashes()
    (root / ".gitignore").write_text("*.tmp\n")
    assert [c.path for c in index.rescan()] == [".gitignore"]
    assert [(c.path, c.kind) for c in index.rescan()] == [("a.gen", "created")]


def test_file_change_as_event() -> None:
    assert FileChange("a", "h1", "h2").as_event() == {"path": "a", "before": "h1", "after": "h2"}
