"""The Markdown transcript: header, conversation tree, then every event with its diffs."""

from __future__ import annotations

import json
import re

from coder_es.audit.transcript import ChildTranscript, Transcript, tree_rows
from coder_es.domain.chain import shown

_ROLE_MARK = {"user": "U", "assistant": "A", "tool_result": "T", "summary": "S"}


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any backtick run inside, so recorded text cannot close it early.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _md_inline(text: str) -> str:
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", text)


def _meta(t: Transcript) -> list[str]:
    h = t.header
    out = ["| | |", "|---|---|"]
    for key in ("workspace", "agent", "provider", "model", "started", "events", "head"):
        out.append(f"| {key} | {_md_inline(str(h[key]))} |")
    out.append(f"| exported by | {_md_inline(json.dumps(h['tools'], sort_keys=True))} |")
    if h["filters"]:
        out.append(f"| filters | {_md_inline(json.dumps(h['filters'], sort_keys=True))} |")
    out.append("")
    if h["redactions"]:
        out += ["## Redactions at export", ""]
        for r in h["redactions"]:
            out.append(
                f"- `{r['pattern']}` → `{r['replacement']}` in versions "
                f"{', '.join(map(str, r['versions'])) or 'none'}"
            )
        out.append("")
    if h["store_problems"]:
        out += ["## Chain problems found in the store", ""]
        out += [f"- {_md_inline(p)}" for p in h["store_problems"]]
        out.append("")
    return out


def _body(t: Transcript) -> list[str]:
    """The conversation tree, then every event, each subagent quoted under its task call."""
    out = ["## Conversation tree", ""]
    lines = []
    for node, depth in tree_rows(t.tree):
        mark = "*" if node.id == t.head else " "
        labels = f" [{', '.join(node.labels)}]" if node.labels else ""
        lines.append(
            f"{'  ' * depth}{mark}{_ROLE_MARK[node.role]} {node.id}{labels}"
            f" (parent {node.parent or '-'}): {node.label}"
        )
    out += [
        _fence("\n".join(lines) or "(no nodes)"),
        "",
        "`*` marks the head; U user, A assistant, T tool result, S summary.",
        "",
        "## Transcript",
        "",
    ]
    under, after = t.placement()
    for e in t.entries:
        out.append(f"### {e.version}. {_md_inline(e.title)}")
        out.append("")
        out.append(f"*{e.kind} at {e.timestamp}*")
        if e.redacted:
            out.append(f"*redacted at export: {', '.join(e.redacted)}*")
        out.append("")
        if e.body:
            out += [_fence(e.body), ""]
        for d in e.diffs:
            out += [f"**{_md_inline(d.path)}**: {d.caption}", ""]
            out += [_fence(d.text, "diff" if d.text.startswith("---") else ""), ""]
        for child in under.get(e.version, []):
            out += _child(child)
    if after:
        out += ["## Subagents", ""]
        for child in after:
            out += _child(child)
    return out


def _child(c: ChildTranscript) -> list[str]:
    """A subagent's transcript as a block quote (its own fences and headings inside it)."""
    inner = [f"**{_md_inline(c.title)}**: {_md_inline(c.description)}", ""]
    if c.transcript is None:
        inner.append(f"not in the export: {_md_inline(c.missing or '')}")
    else:
        inner += _meta(c.transcript) + _body(c.transcript)
    text = "\n".join(inner).rstrip("\n")
    return [f"> {line}" if line else ">" for line in text.split("\n")] + [""]


def render_md(t: Transcript) -> bytes:
    h = t.header
    out = [f"# coder-es session {t.session}", ""]
    if h["title"]:
        out += [f"**{_md_inline(str(h['title']))}**", ""]
    out += _meta(t) + _body(t)
    return shown("\n".join(out).rstrip("\n") + "\n").encode()
