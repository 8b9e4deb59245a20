"""Hot reload for long-running processes (``serve``, ``acp``).

``ConfigWatcher.check()`` looks at the config files once: when their content changed it loads
the configuration again; a good one replaces ``current`` and goes to ``on_change``, a broken one
goes to ``on_error`` while ``current`` keeps the last good configuration. ``start()`` runs
``check()`` on a daemon thread every ``interval`` seconds; tests call ``check()`` directly.

Change detection compares file contents, not modification times: config files are small, and
mtimes are too coarse on some filesystems to see two quick saves (the second would be missed).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from coder_es.config.load import Overrides, config_paths, load_config
from coder_es.config.problems import ConfigError
from coder_es.config.trust import trust_file
from coder_es.config.values import Config

log = logging.getLogger(__name__)

Fingerprint = tuple[str | None, ...]

_SECTIONS = (
    "provider",
    "model",
    "agent",
    "providers",
    "permissions",
    "redaction",
    "serve",
    "store",
)


def _fingerprint(paths: list[Path], workspace: Path) -> Fingerprint:
    from coder_es.config.hook_scripts import project_trust
    from coder_es.config.load import project_config_path

    out: list[str | None] = []
    # The scripts the project's hooks run: an edit of one needs trusting again (reloaded, the
    # hooks are held back until then).
    project = project_config_path(workspace)
    try:
        out.append(project_trust(project, project.read_bytes())[0])
    except OSError:
        out.append(None)
    for path in paths:
        try:
            out.append(hashlib.sha256(path.read_bytes()).hexdigest())
        except FileNotFoundError:
            out.append(None)
        except OSError as e:
            # Unreadable counts as a change, so the load reports why.
            out.append(f"error:{e.errno}")
    return tuple(out)


def changed_sections(old: Config, new: Config) -> list[str]:
    """The top-level parts that differ (``store`` changes need a restart to take effect)."""
    return [n for n in _SECTIONS if getattr(old, n) != getattr(new, n)]


class ConfigWatcher:
    """Keeps the last good configuration of a workspace and reloads it when a file changes.

    The first load happens in the constructor and raises ``ConfigError`` if it fails: there is no
    good configuration to fall back on yet.
    """

    def __init__(
        self,
        workspace: str | Path,
        *,
        environ: Mapping[str, str] = os.environ,
        overrides: Overrides | None = None,
        on_change: Callable[[Config], None] | None = None,
        on_error: Callable[[ConfigError], None] | None = None,
        interval: float = 1.0,
    ) -> None:
        self.workspace = Path(workspace)
        # A copy: a later change to os.environ must not make reloads disagree with each other.
        self.environ = dict(environ)
        self.overrides = overrides
        self.on_change = on_change
        self.on_error = on_error
        self.interval = interval
        # The trust records too: `coder-es trust` while serve/acp runs applies what it trusted.
        self.paths = [*config_paths(self.workspace, self.environ), trust_file(self.environ)]
        self._lock = threading.Lock()
        self._fingerprint = _fingerprint(self.paths, self.workspace)
        self._current = self._load()
        self.error: ConfigError | None = None
        """The problem with the files as they are now, or None when they loaded."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> Config:
        """The last configuration that loaded without problems."""
        return self._current

    def _load(self) -> Config:
        return load_config(self.workspace, self.environ, self.overrides)

    def check(self) -> bool:
        """Reload if a config file changed. True when a new configuration was applied."""
        with self._lock:
            # Read the fingerprint before loading: an edit that lands during the load changes
            # the files again, and the next check sees it.
            fingerprint = _fingerprint(self.paths, self.workspace)
            if fingerprint == self._fingerprint:
                return False
            self._fingerprint = fingerprint
            try:
                config = self._load()
            except ConfigError as e:
                self.error = e
                log.warning("config not reloaded, keeping the last good one: %s", e)
                if self.on_error is not None:
                    self.on_error(e)
                return False
            self.error = None
            if config == self._current:
                return False
            self._current = config
        if self.on_change is not None:
            self.on_change(config)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception:
                # A failing callback must not end hot reload for the rest of the process.
                log.exception("config watcher callback failed")

    def start(self) -> ConfigWatcher:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="config-watcher", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> ConfigWatcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
