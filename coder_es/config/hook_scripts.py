"""The workspace files a project's hooks run, in the digest that workspace trust records.

Trusting a project config trusts what its hooks run. A hook's command line is in the file, but
the script it names (``./scripts/check.sh``, ``python3 .claude/hooks/lint.py``,
``"$CLAUDE_PROJECT_DIR"/hooks/stop.sh``) is another file of the repository: edited after the
trust, it would run unreviewed. So the trust digest of a project config whose hooks name files
inside the workspace covers those files too: any change to one of them (content, a link's
target, its creation or removal) needs trusting again, like an edit of the config.

A word of a hook's command (split as the shell splits it, ``$CLAUDE_PROJECT_DIR`` and
``$CODER_ES_PROJECT_DIR`` standing for the workspace) names a file when it holds a ``/`` or
ends in a script extension, and resolves inside the workspace. What a script itself reads or
sources is not followed (the files named on the command line are what a reviewer sees).
A config without such a word keeps the plain digest of its bytes (records made before stay
valid).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
from pathlib import Path
from typing import Any

_SCRIPT = re.compile(r"\.(sh|bash|zsh|py|js|mjs|cjs|ts|rb|pl|php|lua)$")
_PROJECT_DIR = re.compile(r"\$(\{(CLAUDE_PROJECT_DIR|CODER_ES_PROJECT_DIR)\}|"
                          r"(CLAUDE_PROJECT_DIR|CODER_ES_PROJECT_DIR)\b)")  # fmt: skip
MAX_SCRIPT_BYTES = 16 << 20


def hook_commands(raw: dict[str, Any]) -> list[str]:
    """The hook commands of a parsed config (``[[hooks.EVENT]]``), in file order."""
    hooks = raw.get("hooks")
    out: list[str] = []
    if not isinstance(hooks, dict):
        return out
    for entries in hooks.values():
        for entry in entries if isinstance(entries, list) else ():
            command = entry.get("command") if isinstance(entry, dict) else None
            if isinstance(command, str) and not command.startswith("plugin:"):
                out.append(command)
    return out


def named_files(command: str, root: Path) -> list[str]:
    """The workspace-relative paths of the files ``command`` names (see the module doc)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    found: list[str] = []
    for word in words:
        word = _PROJECT_DIR.sub(lambda _m: str(root), word)
        if "/" not in word and not _SCRIPT.search(word):
            continue
        path = Path(os.path.normpath(word if os.path.isabs(word) else root / word))
        if path == root or root not in path.parents:
            continue
        rel = path.relative_to(root).as_posix()
        if rel not in found:
            found.append(rel)
    return found


def file_digest(path: Path) -> str:
    """What trust compares for one named file: its bytes' sha256, ``link:TARGET`` for a link
    (never followed), ``absent``, or ``other`` (a directory, a special file)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"unreadable:{e.errno}"
    if stat.S_ISLNK(st.st_mode):
        return "link:" + os.readlink(path)
    if not stat.S_ISREG(st.st_mode):
        return "other"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            return hashlib.sha256(f.read(MAX_SCRIPT_BYTES + 1)).hexdigest()
    except OSError as e:
        return f"unreadable:{e.errno}"


def hook_scripts(raw: dict[str, Any], root: Path) -> dict[str, str]:
    """path -> ``file_digest`` of every workspace file the config's hooks name."""
    out: dict[str, str] = {}
    for command in hook_commands(raw):
        for rel in named_files(command, root):
            out.setdefault(rel, file_digest(root / rel))
    return out


def trust_digest(config_sha256: str, scripts: dict[str, str]) -> str:
    """The digest trust records: the config's bytes' digest alone when its hooks name no
    workspace file, else that and every named file's."""
    if not scripts:
        return config_sha256
    lines = [config_sha256, *(f"{p}\0{d}" for p, d in sorted(scripts.items()))]
    return hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def project_trust(path: Path, data: bytes) -> tuple[str, dict[str, str]]:
    """The trust digest of the project config ``path`` (``<workspace>/.coder-es/config.toml``)
    holding ``data``, and the files its hooks name. A file that does not parse has no hooks to
    run: its plain digest."""
    import tomllib

    sha = hashlib.sha256(data).hexdigest()
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return sha, {}
    scripts = hook_scripts(raw, Path(os.path.realpath(path.parent.parent)))
    return trust_digest(sha, scripts), scripts
