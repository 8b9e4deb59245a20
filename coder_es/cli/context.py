"""What every command needs: the workspace, the store configuration, the opened application."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coder_es.application import CoderApp
from coder_es.config import Config, Overrides, load_config
from coder_es.domain.chain import canonical_json
from coder_es.errors import UsageError
from coder_es.redaction import Redactor
from coder_es.store.config import StoreConfig


@dataclass
class Context:
    workspace: Path
    settings: Config
    """The validated configuration: defaults < user file < project file < environment < flags."""
    config: StoreConfig
    """Where the events and blobs live (from ``settings.store``)."""
    _app: CoderApp | None = field(default=None, repr=False)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Context:
        workspace = Path(args.workspace).resolve()
        if not workspace.is_dir():
            msg = f"the workspace {workspace} is not a directory"
            raise UsageError(msg)
        settings = load_config(workspace, overrides=Overrides.from_args(args))
        return cls(workspace=workspace, settings=settings, config=settings.store.to_store_config())

    @property
    def app(self) -> CoderApp:
        if self._app is None:
            redaction = self.settings.redaction
            self._app = CoderApp(
                self.config,
                redactor=Redactor.with_settings(redaction.env_vars, redaction.patterns),
            )
        return self._app

    def close(self) -> None:
        if self._app is not None:
            self._app.close()
            self._app = None


def print_json(value: Any) -> None:
    """One JSON document on one line (stable key order, so scripts can diff outputs)."""
    sys.stdout.write(canonical_json(value) + "\n")
