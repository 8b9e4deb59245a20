"""A throwaway user config home and workspace, so no real ~/.config leaks into a test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ConfigHome:
    workspace: Path
    xdg: Path
    environ: dict[str, str]

    @property
    def user_file(self) -> Path:
        return self.xdg / "coder-es" / "config.toml"

    @property
    def project_file(self) -> Path:
        return self.workspace / ".coder-es" / "config.toml"

    def write_user(self, text: str) -> Path:
        self.user_file.parent.mkdir(parents=True, exist_ok=True)
        self.user_file.write_text(text, encoding="utf-8")
        return self.user_file

    def write_project(self, text: str, *, trusted: bool = False) -> Path:
        """The project config; ``trusted``: as after ``coder-es trust`` (an untrusted one may
        only tighten, coder_es.config.untrusted)."""
        self.project_file.parent.mkdir(parents=True, exist_ok=True)
        self.project_file.write_text(text, encoding="utf-8")
        if trusted:
            from coder_es.config.trust import TrustStore, digest

            TrustStore(self.environ).trust(self.project_file, digest(text.encode("utf-8")))
        return self.project_file
