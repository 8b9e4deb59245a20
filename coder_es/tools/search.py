"""``grep`` and ``find``: searching the workspace, skipping what ``.gitignore`` ignores.

Both walk the files in a worker thread (a big tree must not stall the loop) and stop early when
the call is cancelled. Results are sorted by path so that the same tree gives the same output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from coder_es.permissions.rules import glob_match
from coder_es.permissions.subject import Subject
from coder_es.tools.base import Tool, ToolContext, ToolFailure, ToolResult
from coder_es.tools.paths import dir_subject
from coder_es.tools.schema import doc

# asyncio is imported where it runs: building the registry (`context`, which only lists the
# tools' definitions) must not load the event loop's modules (start-up time, issue 35).

MAX_GREP_FILE_BYTES = 2 * 1024 * 1024
MAX_MATCH_LINE_CHARS = 300


@dataclass(frozen=True)
class GrepInput:
    pattern: str = field(metadata=doc("regular expression (Python syntax)"))
    path: str | None = field(
        default=None, metadata=doc("file or directory to search (default: the workspace)")
    )
    ignore_case: bool = field(default=False, metadata=doc("case-insensitive match"))
    max_results: int = field(default=100, metadata=doc("most matching lines to return", minimum=1))


@dataclass(frozen=True)
class FindInput:
    pattern: str = field(
        metadata=doc("glob: '*.py' matches names at any depth; 'src/**/test_*.py' matches paths")
    )
    path: str | None = field(
        default=None, metadata=doc("directory to search (default: the workspace)")
    )
    max_results: int = field(default=200, metadata=doc("most paths to return", minimum=1))


def _start(ctx: ToolContext, path: str | None) -> str:
    if path is None or path in ("", ".", "./"):
        return "."
    rp = ctx.workspace.resolve(path, outside_ok=ctx.outside_ok)
    if not rp.inside:
        raise ToolFailure(f"{path} is outside the workspace; searching there is not supported")
    if not rp.abs.exists():
        raise ToolFailure(f"{path} does not exist")
    return str(rp.rel)


class GrepTool(Tool[GrepInput]):
    name = "grep"
    description = (
        "Search file contents with a regular expression. Returns path:line: text for each "
        "matching line. Files ignored by .gitignore and binary files are skipped."
    )
    input_type = GrepInput
    read_only = True

    def subject(self, args: GrepInput, root: Path) -> Subject:
        return dir_subject(args.path, root)

    async def run(self, args: GrepInput, ctx: ToolContext) -> ToolResult:
        import asyncio

        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as e:
            raise ToolFailure(f"invalid regular expression {args.pattern!r}: {e}") from e
        start = _start(ctx, args.path)
        return await asyncio.to_thread(self._search, regex, start, args.max_results, ctx)

    def _search(
        self, regex: re.Pattern[str], start: str, limit: int, ctx: ToolContext
    ) -> ToolResult:
        root = ctx.workspace.root
        hits: list[str] = []
        files = 0
        more = False
        for rel in ctx.workspace.iter_files(start):
            if ctx.cancelled.is_set():
                break
            path = root / rel
            try:
                if path.stat().st_size > MAX_GREP_FILE_BYTES:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\0" in data[:8000]:
                continue
            files += 1
            text = data.decode("utf-8", "replace")
            for number, line in enumerate(text.splitlines(), 1):
                if regex.search(line):
                    if len(hits) >= limit:
                        more = True
                        break
                    shown = (
                        line
                        if len(line) <= MAX_MATCH_LINE_CHARS
                        else line[:MAX_MATCH_LINE_CHARS] + "..."
                    )
                    hits.append(f"{rel}:{number}: {shown}")
            if more:
                break
        if not hits:
            return ToolResult(f"No matches in {files} file(s).")
        tail = f"\n... (stopped at {limit} matches; narrow the search)" if more else ""
        return ToolResult("\n".join(hits) + tail)


class FindTool(Tool[FindInput]):
    name = "find"
    description = (
        "Find files by glob pattern. Returns matching paths relative to the workspace, sorted. "
        "Files ignored by .gitignore are skipped."
    )
    input_type = FindInput
    read_only = True

    def subject(self, args: FindInput, root: Path) -> Subject:
        return dir_subject(args.path, root)

    async def run(self, args: FindInput, ctx: ToolContext) -> ToolResult:
        import asyncio

        start = _start(ctx, args.path)
        return await asyncio.to_thread(self._find, args, start, ctx)

    def _find(self, args: FindInput, start: str, ctx: ToolContext) -> ToolResult:
        by_name = "/" not in args.pattern
        prefix = "" if start == "." else start + "/"
        found: list[str] = []
        for rel in ctx.workspace.iter_files(start):
            if ctx.cancelled.is_set():
                break
            target = rel.rsplit("/", 1)[-1] if by_name else rel[len(prefix) :]
            if glob_match(args.pattern, target, "path"):
                found.append(rel)
        found.sort()
        if not found:
            return ToolResult(f"No files match {args.pattern!r}.")
        shown = found[: args.max_results]
        tail = (
            f"\n... ({len(found) - len(shown)} more; narrow the pattern)"
            if len(found) > len(shown)
            else ""
        )
        return ToolResult("\n".join(shown) + tail)
