"""Hot reload: a broken edit keeps the last good configuration; a fixed one is picked up."""

from __future__ import annotations

import os
import threading

import pytest
from config_helpers import ConfigHome

from coder_es.config import Config, ConfigError, ConfigWatcher, changed_sections


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Config] = []
        self.errors: list[ConfigError] = []
        self.event = threading.Event()

    def on_change(self, config: Config) -> None:
        self.changes.append(config)
        self.event.set()

    def on_error(self, error: ConfigError) -> None:
        self.errors.append(error)
        self.event.set()


def watcher_for(home: ConfigHome, rec: Recorder, interval: float = 1.0) -> ConfigWatcher:
    return ConfigWatcher(
        home.workspace,
        environ=home.environ,
        on_change=rec.on_change,
        on_error=rec.on_error,
        interval=interval,
    )


def test_broken_edit_keeps_last_good_config_and_a_fix_is_picked_up(home: ConfigHome) -> None:
    home.write_user('model = "claude-opus-4-1"\n[serve]\nport = 9000\n')
    rec = Recorder()
    watcher = watcher_for(home, rec)
    assert watcher.current.model == "claude-opus-4-1"
    assert watcher.check() is False  # nothing changed
    assert rec.changes == [] and rec.errors == []

    path = home.write_user('model = "claude-opus-4-1"\n[serve]\nport = "nine"\n')
    assert watcher.check() is False
    assert watcher.current.serve.port == 9000  # the last good value is still in force
    [error] = rec.errors
    assert watcher.error is error
    assert f"{path}:3: serve.port: expected an integer" in str(error)
    # The same broken content is reported once, not on every poll.
    assert watcher.check() is False
    assert len(rec.errors) == 1

    home.write_user('model = "claude-opus-4-1"\n[serve]\nport = 9001\n')
    assert watcher.check() is True
    assert watcher.current.serve.port == 9001
    assert [c.serve.port for c in rec.changes] == [9001]
    assert watcher.error is None


def test_half_written_toml_is_not_applied(home: ConfigHome) -> None:
    home.write_user('[permissions.rules]\nbash = "deny"\n')
    rec = Recorder()
    watcher = watcher_for(home, rec)
    # An editor that truncates and writes in two steps: the first step is not valid TOML.
    home.write_user('[permissions.rules]\nbash = "al')
    assert watcher.check() is False
    assert [r.action for r in watcher.current.permissions.rules] == ["deny"]
    assert "not valid TOML" in str(rec.errors[0])
    home.write_user('[permissions.rules]\nbash = "allow"\n')
    assert watcher.check() is True
    assert [r.action for r in watcher.current.permissions.rules] == ["allow"]


def test_created_and_deleted_files_are_noticed(home: ConfigHome) -> None:
    rec = Recorder()
    watcher = watcher_for(home, rec)
    assert watcher.current.agent == "build"
    home.write_project('agent = "explore"\n')
    assert watcher.check() is True
    assert watcher.current.agent == "explore"
    home.project_file.unlink()
    assert watcher.check() is True
    assert watcher.current.agent == "build"
    assert changed_sections(rec.changes[0], rec.changes[1]) == ["agent"]


def test_an_edit_that_keeps_size_and_mtime_is_still_seen(home: ConfigHome) -> None:
    path = home.write_project('agent = "plan"\n')
    before = os.stat(path)
    watcher = watcher_for(home, Recorder())
    path.write_text('agent = "buil"\n', encoding="utf-8")  # same length, and a typo
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert watcher.check() is False
    assert watcher.error is not None and "did you mean 'build'" in str(watcher.error)
    assert watcher.current.agent == "plan"


def test_content_rewritten_identically_does_not_call_back(home: ConfigHome) -> None:
    home.write_project('agent = "plan"\n')
    rec = Recorder()
    watcher = watcher_for(home, rec)
    home.write_project('agent = "plna"\n')
    watcher.check()
    home.write_project('agent = "plan"\n')  # back to what is in force
    assert watcher.check() is False
    assert rec.changes == [] and watcher.error is None


def test_a_broken_config_at_start_is_an_error(home: ConfigHome) -> None:
    home.write_project("permisions = 1\n")
    with pytest.raises(ConfigError, match="did you mean 'permissions'"):
        ConfigWatcher(home.workspace, environ=home.environ)


def test_the_thread_picks_up_changes(home: ConfigHome) -> None:
    rec = Recorder()
    with watcher_for(home, rec, interval=0.02) as watcher:
        home.write_user('model = "claude-haiku-4-5"\n')
        assert rec.event.wait(5), "the watcher thread did not notice the edit"
        assert watcher.current.model == "claude-haiku-4-5"
        rec.event.clear()
        home.write_user('model = "claude-haiku-4-5"\nbad = 1\n')
        assert rec.event.wait(5)
        assert watcher.current.model == "claude-haiku-4-5"
        assert "unknown key 'bad'" in str(rec.errors[0])
    assert watcher._thread is None


def test_a_failing_callback_does_not_stop_the_thread(home: ConfigHome) -> None:
    first, second = threading.Event(), threading.Event()
    calls: list[str] = []

    def on_change(config: Config) -> None:
        calls.append(config.agent)
        if len(calls) == 1:
            first.set()
            raise RuntimeError("the server could not apply it")
        second.set()

    with ConfigWatcher(home.workspace, environ=home.environ, on_change=on_change, interval=0.02):
        home.write_project('agent = "plan"\n')
        assert first.wait(5)
        home.write_project('agent = "explore"\n')
        assert second.wait(5)
    assert calls == ["plan", "explore"]
