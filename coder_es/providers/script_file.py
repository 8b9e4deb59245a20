"""``--script FILE``: which file a script argument names, checked before any session starts.

A script argument is a path, or the name of an example shipped with coder-es (``fix_add``,
``coder_es/data/scripts``) when no such file exists. The file must be a script the scripted
provider can run: an error says what is wrong with it (not a JSON file, not a list of turns, a
bad turn), never just that a script is "missing".
"""

from __future__ import annotations

import os
from pathlib import Path

from coder_es.data import bundled_script, bundled_scripts
from coder_es.errors import UsageError
from coder_es.providers.errors import ProviderConfigError
from coder_es.providers.scripted import load_script

SCRIPT_SUFFIXES = (".json", ".jsonl")


def resolve_script(text: str) -> Path:
    """The absolute path of the script ``text`` names; ``UsageError`` saying what is wrong."""
    path = Path(text)
    if not text:
        raise UsageError("--script needs a file name")
    if not path.exists():
        bundled = bundled_script(text)
        if bundled is None:
            examples = ", ".join(bundled_scripts())
            msg = f"cannot read the script {text}: no such file (bundled examples: {examples})"
            raise UsageError(msg)
        path = bundled
    elif path.is_dir():
        raise UsageError(f"the script {text} is a directory, not a script file")
    try:
        load_script(path)
    except ProviderConfigError as e:
        raise UsageError(f"{e} (the format: coder_es/providers/scripted.py)") from e
    except UnicodeDecodeError as e:
        raise UsageError(f"the script {text} is not a text file: not UTF-8 ({e.reason})") from e
    if path.suffix not in SCRIPT_SUFFIXES:
        raise UsageError(f"the script {text} must be named *.json or *.jsonl")
    return Path(os.path.abspath(path))
