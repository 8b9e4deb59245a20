"""coder_es: the event-sourced core of an AI coding agent.

The public Python API is what this module exports (``__all__``; docs/api.md has runnable
examples); every other module is private by convention and may change without notice::

    import coder_es

    async with coder_es.open_store("path/to/project") as store:
        model = coder_es.ScriptedProvider([...])
        session = await store.start(model, rules=[coder_es.allow("read")])
        result = await session.run("what does main.py do?")

Names load on first use (module ``__getattr__``): ``import coder_es`` stays as cheap as the CLI's
start-up needs (tests/core/test_cli_startup.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from coder_es._version import __version__

# name -> the module that defines it (the implementation lives in coder_es.sdk and the layers
# it wraps; a module here is imported only when one of its names is asked for).
_EXPORTS: dict[str, str] = {
    # stores and sessions
    "open_store": "coder_es.sdk.store",
    "Store": "coder_es.sdk.store",
    "Session": "coder_es.sdk.session",
    "TurnResult": "coder_es.sdk.session",
    "allow_asks": "coder_es.sdk.session",
    "reject_asks": "coder_es.sdk.session",
    "SessionSummary": "coder_es.summaries",
    # your own loop, recorded
    "OwnLoop": "coder_es.sdk.own_loop",
    "ToolUse": "coder_es.sdk.own_loop",
    "OwnLoopReplay": "coder_es.sdk.own_replay",
    "RecordedResponse": "coder_es.sdk.own_replay",
    "replay_own_loop": "coder_es.sdk.own_replay",
    # providers
    "provider": "coder_es.sdk.providers",
    "Provider": "coder_es.providers.base",
    "ScriptedProvider": "coder_es.providers.scripted",
    # tools
    "Tool": "coder_es.tools.base",
    "ToolContext": "coder_es.tools.base",
    "ToolResult": "coder_es.tools.base",
    "ToolFailure": "coder_es.tools.base",
    "Subject": "coder_es.permissions.subject",
    # rules and permissions
    "Rule": "coder_es.permissions.rules",
    "allow": "coder_es.sdk.rules",
    "ask": "coder_es.sdk.rules",
    "deny": "coder_es.sdk.rules",
    "PermissionAnswer": "coder_es.permissions.policy",
    "SandboxSettings": "coder_es.sandbox",
    # a turn's updates (the module holds every kind; the common ones by name)
    "updates": "coder_es.agent.updates",
    "Update": "coder_es.agent.updates",
    "PermissionRequired": "coder_es.agent.updates",
    "TextDelta": "coder_es.agent.updates",
    "ToolCompleted": "coder_es.agent.updates",
    "TurnEnded": "coder_es.agent.updates",
    # the tree
    "ConversationTree": "projections.tree",
    "MoveResult": "coder_es.branching",
    "LabelMove": "coder_es.branching",
    # audit, search, replay
    "VerifyReport": "coder_es.audit.problems",
    "verify_export": "coder_es.audit.verify",
    "SearchHit": "projections.search.query",
    "Cassette": "replay.cassette",
    "load_cassette": "replay.cassette",
    "replay_cassette": "coder_es.sdk.cassettes",
    "ReplayReport": "replay.report",
    "ReplayMismatch": "replay.report",
    # errors: every error coder_es raises on purpose is a CoderESError
    "CoderESError": "coder_es.errors",
    "UsageError": "coder_es.errors",
    "StoreError": "coder_es.errors",
    "SessionNotFoundError": "coder_es.errors",
    "UnknownNodeError": "coder_es.errors",
    "SessionBusyError": "coder_es.errors",
    "ProviderError": "coder_es.providers.errors",
}
# Exported under another name than the defining module's.
_RENAMED = {"SearchHit": "Hit"}
# Exported as modules (namespaces).
_MODULES = {"updates"}

# The public surface (a literal, for type checkers; a test keeps it equal to _EXPORTS).
__all__ = [
    "Cassette",
    "CoderESError",
    "ConversationTree",
    "LabelMove",
    "MoveResult",
    "OwnLoop",
    "OwnLoopReplay",
    "PermissionAnswer",
    "PermissionRequired",
    "Provider",
    "ProviderError",
    "RecordedResponse",
    "ReplayMismatch",
    "ReplayReport",
    "Rule",
    "SandboxSettings",
    "ScriptedProvider",
    "SearchHit",
    "Session",
    "SessionBusyError",
    "SessionNotFoundError",
    "SessionSummary",
    "Store",
    "StoreError",
    "Subject",
    "TextDelta",
    "Tool",
    "ToolCompleted",
    "ToolContext",
    "ToolFailure",
    "ToolResult",
    "ToolUse",
    "TurnEnded",
    "TurnResult",
    "UnknownNodeError",
    "Update",
    "UsageError",
    "VerifyReport",
    "__version__",
    "allow",
    "allow_asks",
    "ask",
    "deny",
    "load_cassette",
    "open_store",
    "provider",
    "reject_asks",
    "replay_cassette",
    "replay_own_loop",
    "updates",
    "verify_export",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'coder_es' has no attribute {name!r}"
        raise AttributeError(msg)
    loaded = import_module(module)
    value = loaded if name in _MODULES else getattr(loaded, _RENAMED.get(name, name))
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from coder_es.agent import (
        updates,
    )
    from coder_es.agent.updates import (
        PermissionRequired,
        TextDelta,
        ToolCompleted,
        TurnEnded,
        Update,
    )
    from coder_es.audit.problems import (
        VerifyReport,
    )
    from coder_es.audit.verify import (
        verify_export,
    )
    from coder_es.branching import (
        LabelMove,
        MoveResult,
    )
    from coder_es.errors import (
        CoderESError,
        SessionBusyError,
        SessionNotFoundError,
        StoreError,
        UnknownNodeError,
        UsageError,
    )
    from coder_es.permissions.policy import (
        PermissionAnswer,
    )
    from coder_es.permissions.rules import (
        Rule,
    )
    from coder_es.permissions.subject import Subject
    from coder_es.providers.base import (
        Provider,
    )
    from coder_es.providers.errors import (
        ProviderError,
    )
    from coder_es.providers.scripted import (
        ScriptedProvider,
    )
    from coder_es.sandbox import (
        SandboxSettings,
    )
    from coder_es.sdk.cassettes import (
        replay_cassette,
    )
    from coder_es.sdk.own_loop import (
        OwnLoop,
        ToolUse,
    )
    from coder_es.sdk.own_replay import (
        OwnLoopReplay,
        RecordedResponse,
        replay_own_loop,
    )
    from coder_es.sdk.providers import (
        provider,
    )
    from coder_es.sdk.rules import (
        allow,
        ask,
        deny,
    )
    from coder_es.sdk.session import (
        Session,
        TurnResult,
        allow_asks,
        reject_asks,
    )
    from coder_es.sdk.store import (
        Store,
        open_store,
    )
    from coder_es.summaries import SessionSummary
    from coder_es.tools.base import Tool, ToolContext, ToolFailure, ToolResult
    from projections.search.query import (
        Hit as SearchHit,
    )
    from projections.tree import (
        ConversationTree,
    )
    from replay.cassette import (
        Cassette,
        load_cassette,
    )
    from replay.report import (
        ReplayMismatch,
        ReplayReport,
    )
