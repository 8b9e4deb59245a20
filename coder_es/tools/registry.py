"""The set of tools the loop offers, and the executor seam that runs a call.

``ToolExecutor`` is what the loop calls to run a tool. ``LocalExecutor`` runs the real tools;
replay can pass an executor that serves results from a recording instead. Whatever a tool does,
the executor returns a ``ToolResult``: a tool bug becomes an error result, never a crash of the
loop (cancellation still propagates, so the loop can record it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from coder_es.errors import CoderESError
from coder_es.tools.base import Tool, ToolCall, ToolContext, ToolResult
from coder_es.tools.schema import ToolInputError

# asyncio is imported where it runs: building the registry (`context`, which only lists the
# tools' definitions) must not load the event loop's modules (start-up time, issue 35).

if TYPE_CHECKING:
    from coder_es.permissions.subagents import AgentDefinition


class ToolRegistry:
    """Tools by name, in the order they are offered to the model."""

    def __init__(self, tools: Iterable[Tool[Any]]) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            if tool.name in self._tools:
                msg = f"two tools are named {tool.name!r}"
                raise ValueError(msg)
            self._tools[tool.name] = tool
        self._definitions: dict[tuple[str, ...], list[dict[str, Any]]] = {}

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def replaced(self, tool: Tool[Any]) -> ToolRegistry:
        """This registry with ``tool`` in place of the tool of the same name."""
        return ToolRegistry(tool if t.name == tool.name else t for t in self._tools.values())

    def definitions(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Tool definitions for a request (cached: they are the same every step)."""
        key = tuple(n for n in self._tools if names is None or n in set(names))
        cached = self._definitions.get(key)
        if cached is None:
            cached = [self._tools[n].definition() for n in key]
            self._definitions[key] = cached
        return cached


class ToolExecutor(Protocol):
    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult: ...


def error_result(call: ToolCall, error: CoderESError) -> ToolResult:
    """What the model is told when a call fails in a way it can act on: invalid arguments, a
    refusal (``ToolFailure``), a store or workspace error."""
    if isinstance(error, ToolInputError):
        return ToolResult(f"Invalid arguments for {call.name}: {error}", is_error=True)
    return ToolResult(str(error), is_error=True)


class LocalExecutor:
    """Runs calls with the real tools of a registry."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        import asyncio

        tool = (ctx.tools or self.registry).get(call.name)
        if tool is None:
            return ToolResult(f"Unknown tool {call.name!r}.", is_error=True)
        try:
            args = tool.parse(call.input)
            return await tool.run(args, ctx)
        except asyncio.CancelledError:
            ctx.cancelled.set()
            raise
        except CoderESError as e:
            return error_result(call, e)
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            return ToolResult(f"{call.name} failed: {e.strerror or e}{where}", is_error=True)
        except Exception as e:  # a tool bug must not take the loop down
            return ToolResult(
                f"{call.name} failed unexpectedly: {type(e).__name__}: {e}", is_error=True
            )


def default_registry(agents: Mapping[str, AgentDefinition] | None = None) -> ToolRegistry:
    """The built-in tools; ``task`` offers ``agents`` (default: the built-in subagents)."""
    from coder_es.tools.bash import BashTool
    from coder_es.tools.files import EditTool, ReadTool, WriteTool
    from coder_es.tools.search import FindTool, GrepTool
    from coder_es.tools.task import TaskTool

    return ToolRegistry(
        [
            ReadTool(),
            GrepTool(),
            FindTool(),
            BashTool(),
            WriteTool(),
            EditTool(),
            TaskTool(agents),
        ]
    )
