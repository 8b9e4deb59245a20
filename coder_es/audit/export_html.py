"""The HTML transcript: one self-contained file (inline CSS and SVG, no script, no network).

The conversation tree is drawn as an inline SVG: one dot per node coloured by role, an elbow line
from each parent, a ring around the head; the transcript below links each node to its entry.
"""

from __future__ import annotations

import json
from html import escape

from coder_es.audit.transcript import ChildTranscript, Transcript, tree_rows
from coder_es.domain.chain import shown

ROLE_COLOURS = {
    "user": "#2563eb",
    "assistant": "#16a34a",
    "tool_result": "#ea580c",
    "summary": "#7c3aed",
}
EDGE_COLOUR = "#0ea5e9"  # used nowhere else on the page, so a screenshot can find the tree
ROW, COL, PAD = 26, 22, 16

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:0;color:#0f172a;
background:#f8fafc}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:28px 0 8px}
table.meta td{padding:2px 12px 2px 0;vertical-align:top}table.meta td:first-child{color:#475569}
.tree{background:#fff;border:1px solid #e2e8f0;border-radius:8px;overflow:auto;padding:8px}
.tree text{font:12px ui-monospace,monospace;fill:#0f172a}
.entry{background:#fff;border:1px solid #e2e8f0;border-left:4px solid #cbd5e1;border-radius:6px;
margin:10px 0;padding:8px 12px}
.entry.user{border-left-color:#2563eb}.entry.assistant{border-left-color:#16a34a}
.entry.tool_result{border-left-color:#ea580c}.entry.summary{border-left-color:#7c3aed}
.entry.deny{border-left-color:#dc2626;background:#fef2f2}
.entry.allow{border-left-color:#0d9488}
.when{color:#64748b;font-size:12px}
pre{white-space:pre-wrap;word-break:break-word;background:#f1f5f9;padding:8px;border-radius:4px;
margin:6px 0;font:12px/1.4 ui-monospace,monospace}
.diff .add{color:#166534;background:#dcfce7}.diff .del{color:#991b1b;background:#fee2e2}
.diff .hunk{color:#6d28d9}
.redacted{color:#b45309;font-size:12px}.problem{color:#b91c1c}
details.subagent{border:1px solid #cbd5e1;border-radius:6px;margin:8px 0;padding:4px 10px;
background:#f8fafc}details.subagent>summary{cursor:pointer;font-weight:600}
"""

_ROLE_OF_KIND = {
    "UserMessageAdded": "user",
    "ModelResponded": "assistant",
    "ToolCallCompleted": "tool_result",
    "ContextCompacted": "summary",
}


def render_svg(t: Transcript, prefix: str = "") -> str:
    rows = tree_rows(t.tree)
    if not rows:
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="30">'
            '<text x="8" y="20">(no nodes)</text></svg>'
        )
    where: dict[str, tuple[int, int]] = {}
    for i, (node, depth) in enumerate(rows):
        where[node.id] = (PAD + depth * COL, PAD + i * ROW)
    width = max(x for x, _ in where.values()) + 460
    height = PAD * 2 + (len(rows) - 1) * ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="{prefix}tree" width="{width}" '
        f'height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="conversation tree">'
    ]
    for node, _ in rows:
        if node.parent in where:
            px, py = where[node.parent]
            x, y = where[node.id]
            if px == x:
                d = f"M{px} {py} L{x} {y}"
            else:  # a branch: down the parent's column, then a rounded turn right
                d = f"M{px} {py} L{px} {y - 8} Q{px} {y} {px + 8} {y} L{x} {y}"
            parts.append(f'<path d="{d}" fill="none" stroke="{EDGE_COLOUR}" stroke-width="2"/>')
    for node, _ in rows:
        x, y = where[node.id]
        colour = ROLE_COLOURS[node.role]
        if node.id == t.head:
            parts.append(
                f'<circle cx="{x}" cy="{y}" r="11" fill="none" stroke="#0f172a" stroke-width="2"/>'
            )
        parts.append(
            f'<a href="#{prefix}v{escape(node.id)}">'
            f'<circle cx="{x}" cy="{y}" r="7" fill="{colour}">'
            f"<title>{escape(node.role)} {escape(node.id)}</title></circle></a>"
        )
        labels = f" [{', '.join(node.labels)}]" if node.labels else ""
        weight = ' font-weight="bold"' if node.on_head_path else ""
        parts.append(
            f'<text x="{x + 14}" y="{y + 4}"{weight}>{escape(node.id + labels)} '
            f"{escape(node.label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _diff_html(text: str) -> str:
    out = []
    for line in text.split("\n"):
        cls = ""
        if line.startswith("+") and not line.startswith("+++"):
            cls = "add"
        elif line.startswith("-") and not line.startswith("---"):
            cls = "del"
        elif line.startswith("@@"):
            cls = "hunk"
        out.append(f'<span class="{cls}">{escape(line)}</span>' if cls else escape(line))
    return "\n".join(out)


def _meta(t: Transcript) -> list[str]:
    """The session's facts: where, which agent and model, how many events, its head, what the
    export left out or redacted, and the chain problems the store showed."""
    h = t.header
    out = ['<table class="meta">']
    for key in ("workspace", "agent", "provider", "model", "started", "events", "head"):
        out.append(f"<tr><td>{key}</td><td>{escape(str(h[key]))}</td></tr>")
    out.append(
        f"<tr><td>exported by</td><td>{escape(json.dumps(h['tools'], sort_keys=True))}</td></tr>"
    )
    if h["filters"]:
        out.append(
            f"<tr><td>filters</td><td>{escape(json.dumps(h['filters'], sort_keys=True))}</td></tr>"
        )
    out.append("</table>")
    if h["redactions"]:
        out.append("<h2>Redactions at export</h2><ul>")
        for r in h["redactions"]:
            versions = ", ".join(map(str, r["versions"])) or "none"
            out.append(
                f"<li><code>{escape(r['pattern'])}</code> → <code>{escape(r['replacement'])}"
                f"</code> in versions {escape(versions)}</li>"
            )
        out.append("</ul>")
    if h["store_problems"]:
        out.append("<h2>Chain problems found in the store</h2><ul>")
        out += [f'<li class="problem">{escape(p)}</li>' for p in h["store_problems"]]
        out.append("</ul>")
    return out


def _entries(t: Transcript, prefix: str) -> list[str]:
    out: list[str] = []
    under, after = t.placement()
    for e in t.entries:
        classes = ["entry", _ROLE_OF_KIND.get(e.kind, "")]
        if e.kind == "PermissionDecided":
            classes.append("deny" if "DENIED" in e.title else "allow")
        out.append(
            f'<section class="{" ".join(c for c in classes if c)}" id="{prefix}v{e.version}">'
        )
        out.append(
            f"<div><strong>{e.version}. {escape(e.title)}</strong> "
            f'<span class="when">{escape(e.kind)} · {escape(e.timestamp)}</span></div>'
        )
        if e.redacted:
            out.append(
                f'<div class="redacted">redacted at export: {escape(", ".join(e.redacted))}</div>'
            )
        if e.body:
            out.append(f"<pre>{escape(e.body)}</pre>")
        for d in e.diffs:
            out.append(f"<div><code>{escape(d.path)}</code>: {escape(d.caption)}</div>")
            out.append(f'<pre class="diff">{_diff_html(d.text)}</pre>')
        for child in under.get(e.version, []):
            out += _child(child)
        out.append("</section>")
    if after:
        out.append("<h2>Subagents</h2>")
        for child in after:
            out += _child(child)
    return out


def _child(c: ChildTranscript) -> list[str]:
    """A subagent's whole transcript, folded under the task call that started it."""
    summary = f"{c.title} · {c.description}"
    out = [f'<details class="subagent" id="s{escape(c.session)}"><summary>{escape(summary)}']
    out.append("</summary>")
    if c.transcript is None:
        out.append(f'<p class="problem">not in the export: {escape(c.missing or "")}</p>')
    else:
        prefix = f"s{c.session}-"
        out += _meta(c.transcript)
        out.append('<div class="tree">')
        out.append(render_svg(c.transcript, prefix))
        out.append("</div>")
        out += _entries(c.transcript, prefix)
    out.append("</details>")
    return out


def render_html(t: Transcript) -> bytes:
    h = t.header
    title = f"coder-es session {t.session}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>",
        f"<h1>{escape(title)}</h1>",
    ]
    if h["title"]:
        out.append(f"<p><strong>{escape(str(h['title']))}</strong></p>")
    out += _meta(t)
    out.append('<h2>Conversation tree</h2><div class="tree">')
    out.append(render_svg(t))
    out.append("</div><h2>Transcript</h2>")
    out += _entries(t, "")
    out.append("</main></body></html>")
    return shown("\n".join(out) + "\n").encode()
