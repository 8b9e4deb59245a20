"""Errors of the client front ends."""

from __future__ import annotations

from coder_es.errors import CoderESError, UsageError


class ClientError(CoderESError):
    """Something a client asked for cannot be done; the message says why (sent to the client)."""

    def __init__(self, message: str, code: str = "bad_request", re: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.re = re
        """The ``id`` of the request refused, echoed as ``re`` (None: no id was readable)."""


class ServeSetupError(UsageError):
    """``coder-es serve`` cannot start as configured (an exposed address without a token)."""
