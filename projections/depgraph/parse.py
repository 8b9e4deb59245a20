"""Extracting imports, definitions and references from one file's content with tree-sitter.

Imports are what the graph needs for every file, so that pass is kept cheap. For Python, where
repositories are largest, a byte scan finds where import statements can start (a line beginning
with ``import``/``from``, outside triple-quoted strings) and tree-sitter parses only those ranges
(``Parser.included_ranges``), which keeps byte offsets and line numbers true. When every
statement found is a plain, certainly well-formed one (nearly always), even that parse is
skipped and the statements are read from their text (``python_lines``). A file whose triple
quotes do not pair up cleanly gets a full parse instead. ``python_imports_full`` is the
plain full-tree extraction; a test holds the two equal on real packages.

Definitions and references (the grammar's tags query) need the full tree; they are asked for per
file, only for the files a repo map renders, and cached by content like everything here.
"""

from __future__ import annotations

import re

from tree_sitter import Node, Point, QueryCursor, Range

from projections.depgraph.languages import imports_query, parser, tags_query
from projections.depgraph.model import Definition, FileImports, FileTags, Import, Reference
from projections.depgraph.python_lines import plain_imports

_MAX_DEFINITION_TEXT = 120


def extract_imports(language: str, data: bytes) -> FileImports:
    if language == "python":
        return FileImports("python", python_imports(data))
    if language == "go":
        return _go_imports(data)
    if language == "rust":
        return FileImports("rust", _rust_imports(data))
    return FileImports(language, _js_imports(language, data))


# -- Python ---------------------------------------------------------------------------------------

_STATEMENT_BODY = (
    rb"[ \t]*+(import(?![A-Za-z0-9_])|from(?=[ \t.])[^\n]*?[ \t]import(?![A-Za-z0-9_]))"
)
# Led by the newline, a literal the regex engine scans for quickly; the first line apart.
_STATEMENT_START = re.compile(rb"\n" + _STATEMENT_BODY)
_FIRST_STATEMENT = re.compile(_STATEMENT_BODY)
_AFTER_SEMICOLON = re.compile(rb";[ \t]*(?:import|from)[ \t]")


def python_imports(data: bytes) -> tuple[Import, ...]:
    starts = _statement_starts(data)
    if not starts:
        return ()
    strings = _triple_quoted_spans(data)
    if strings is None or _AFTER_SEMICOLON.search(data):
        # Unpaired triple quotes, or an import after ``;`` (which the line scan does not
        # see): parse the whole file rather than guess.
        return python_imports_full(data)
    starts = _outside(starts, strings)
    if not starts:
        return ()
    plain = plain_imports(data, starts)
    if plain is not None:
        return tuple(Import(*key) for key in sorted(set(plain)))
    ranges: list[tuple[int, int]] = []
    end = -1
    for start in starts:
        if start < end:
            continue
        end = _statement_end(data, start)
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], end)  # consecutive lines parse as one range
        else:
            ranges.append((start, end))
    if not ranges:
        return ()
    p = parser("python")
    p.included_ranges = _ranges(data, ranges)
    try:
        tree = p.parse(data)
    finally:
        p.included_ranges = []
    return _python_imports_from(tree.root_node)


def _statement_starts(data: bytes) -> list[int]:
    """Offsets of ``import``/``from`` keywords that begin a line's statement: ``import`` first on
    a line, or ``from`` first on a line that has a blank-preceded ``import`` later. Every import
    statement contains the word ``import``, and one regular expression finds them at C speed."""
    starts = [m.start(1) for m in _STATEMENT_START.finditer(data)]
    first = _FIRST_STATEMENT.match(data)
    if first is not None:
        starts.insert(0, first.start(1))
    return starts


def _ranges(data: bytes, spans: list[tuple[int, int]]) -> list[Range]:
    out = []
    line = 0
    counted = 0
    for start, end in spans:
        line += data.count(b"\n", counted, start)
        start_point = Point(line, start - (data.rfind(b"\n", 0, start) + 1))
        end_line = line + data.count(b"\n", start, end)
        end_point = Point(end_line, end - (data.rfind(b"\n", 0, end) + 1))
        out.append(Range(start_point, end_point, start, end))
        line, counted = end_line, end
    return out


def python_imports_full(data: bytes) -> tuple[Import, ...]:
    """Imports from a parse of the whole file, read from the nodes (the reference the fast path
    is tested against)."""
    return _python_imports_from(parser("python").parse(data).root_node, decode_text=False)


def _python_imports_from(root: Node, decode_text: bool = True) -> tuple[Import, ...]:
    found: list[Import] = []
    for name, nodes in QueryCursor(imports_query("python")).captures(root).items():
        for node in nodes:
            if decode_text and not node.has_error:
                found.extend(_python_statement(node, name))
            elif name == "import":
                found.extend(_python_import(node))
            else:
                found.extend(_python_from(node))
    return _sorted(found)


def _sorted(found: list[Import]) -> tuple[Import, ...]:
    unique = {(i.line, i.kind, i.module, i.names, i.level): i for i in found}
    return tuple(unique[k] for k in sorted(unique))


_COMMENT = re.compile(r"#[^\n]*")
_AROUND_DOT = re.compile(r"\s*\.\s*")
_FROM = re.compile(r"from\s*(\.*)\s*([\w.]*)\s*import\b(.*)", re.S)


def _python_statement(node: Node, kind: str) -> list[Import]:
    """Decode an import statement tree-sitter found without errors from its text: the
    grammar of these statements is small, and reading the text once is much cheaper than
    walking their nodes from Python. ``python_imports_full`` walks the nodes instead, and the
    tests hold the two equal."""
    text = _text(node)
    if "#" in text:
        text = _COMMENT.sub("", text)
    text = _AROUND_DOT.sub(".", text.replace("\\\n", " "))
    line = node.start_point.row + 1
    if kind == "import":
        out = []
        for part in text[len("import") :].split(","):
            words = part.split()
            if words:
                out.append(Import(line, "import", words[0]))
        return out
    m = _FROM.match(text)
    if m is None:
        return _python_from(node)
    names = set()
    for part in m.group(3).replace("(", " ").replace(")", " ").split(","):
        words = part.split()
        if words:
            names.add(words[0])
    if not names:
        return []
    return [Import(line, "from", m.group(2), tuple(sorted(names)), len(m.group(1)))]


def _python_import(node: Node) -> list[Import]:
    out = []
    for child in node.children_by_field_name("name"):
        dotted = child.child_by_field_name("name") if child.type == "aliased_import" else child
        if dotted is not None and dotted.type == "dotted_name":
            out.append(Import(node.start_point.row + 1, "import", _text(dotted)))
    return out


def _python_from(node: Node) -> list[Import]:
    module = node.child_by_field_name("module_name")
    if module is None:
        return []
    level = 0
    if module.type == "relative_import":
        dotted = None
        for child in module.named_children:
            if child.type == "import_prefix":
                level = _text(child).count(".")
            elif child.type == "dotted_name":
                dotted = child
        name = _text(dotted) if dotted is not None else ""
    elif module.type == "dotted_name":
        name = _text(module)
    else:
        return []
    names: list[str] = []
    for child in node.children_by_field_name("name"):
        dotted = child.child_by_field_name("name") if child.type == "aliased_import" else child
        if dotted is not None:
            names.append(_text(dotted))
    if any(c.type == "wildcard_import" for c in node.named_children):
        names.append("*")
    if not names:  # an unfinished statement: nothing is imported yet
        return []
    return [Import(node.start_point.row + 1, "from", name, tuple(sorted(set(names))), level)]


def _triple_quoted_spans(data: bytes) -> list[tuple[int, int]] | None:
    """The byte spans of triple-quoted strings, or None when the quotes do not pair up.

    A triple quote inside a comment or a one-line string would throw the pairing off; such a
    triple quote makes the count odd or leaves a string open at the end in practice, and then the
    caller falls back to a full parse rather than trusting the scan.
    """
    spans = []
    find = data.find
    # The next of each kind of triple quote at or after ``pos`` (plain substring searches, much
    # faster than a regular expression over a large file), refreshed once passed.
    double = find(b'"""')
    single = find(b"'''")
    while double >= 0 or single >= 0:
        if single < 0 or 0 <= double < single:
            open_at, quote = double, b'"""'
        else:
            open_at, quote = single, b"'''"
        if _in_comment_or_string(data, open_at):
            return None
        # The closing quote is the next unescaped one of the same kind (searched from where
        # the previous candidate ended, as a scan of non-overlapping matches would).
        close = find(quote, open_at + 3)
        while close >= 0 and _escaped(data, close):
            close = find(quote, close + 3)
        if close < 0:
            return None
        spans.append((open_at, close + 3))
        pos = close + 3
        if 0 <= double < pos:
            double = find(b'"""', pos)
        if 0 <= single < pos:
            single = find(b"'''", pos)
    return spans


def _in_comment_or_string(data: bytes, pos: int) -> bool:
    line = data[data.rfind(b"\n", 0, pos) + 1 : pos]
    return b"#" in line or line.count(b'"') % 2 == 1 or line.count(b"'") % 2 == 1


def _escaped(data: bytes, pos: int) -> bool:
    n = 0
    while pos - n - 1 >= 0 and data[pos - n - 1] == 0x5C:
        n += 1
    return n % 2 == 1


def _outside(starts: list[int], spans: list[tuple[int, int]]) -> list[int]:
    out = []
    i = 0
    for s in starts:
        while i < len(spans) and spans[i][1] <= s:
            i += 1
        if i < len(spans) and spans[i][0] <= s:
            continue
        out.append(s)
    return out


def _statement_end(data: bytes, start: int) -> int:
    """Where the statement starting at ``start`` ends: the newline after it, following
    parentheses and backslash continuations."""
    nl = data.find(b"\n", start)
    if nl < 0:
        return len(data)
    first = data[start:nl]
    if b"(" not in first and b"\\" not in first:
        return nl + 1  # the common case: a one-line statement
    pos = start
    depth = 0
    n = len(data)
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            return n
        line = data[pos:nl]
        hash_at = line.find(b"#")
        code = line if hash_at < 0 else line[:hash_at]
        depth += code.count(b"(") - code.count(b")")
        if depth > 0 or code.rstrip(b" \t\r").endswith(b"\\"):
            pos = nl + 1
            continue
        return nl + 1


# -- JavaScript / TypeScript ----------------------------------------------------------------------


def _js_imports(language: str, data: bytes) -> tuple[Import, ...]:
    root = parser(language).parse(data).root_node
    found = set()
    for _, caps in QueryCursor(imports_query(language)).matches(root):
        sources = caps.get("source")
        if not sources:
            continue
        kind = next((k for k in ("import", "export", "require", "dynamic") if k in caps), "import")
        statement = caps[kind][0]
        spec = _string_value(sources[0])
        if spec:
            found.add(Import(statement.start_point.row + 1, kind, spec))
    return _sorted(list(found))


def _string_value(node: Node) -> str:
    text = _text(node)
    if len(text) >= 2 and text[0] in "\"'`" and text[-1] == text[0]:
        return text[1:-1]
    return ""


# -- Go -------------------------------------------------------------------------------------------


def _go_imports(data: bytes) -> FileImports:
    root = parser("go").parse(data).root_node
    package = ""
    found = set()
    for _, caps in QueryCursor(imports_query("go")).matches(root):
        if "package" in caps:
            package = _text(caps["package"][0])
        elif "source" in caps:
            spec = _string_value(caps["source"][0])
            if spec:
                found.add(Import(caps["import"][0].start_point.row + 1, "import", spec))
    return FileImports("go", _sorted(list(found)), package)


# -- Rust -----------------------------------------------------------------------------------------


def _rust_imports(data: bytes) -> tuple[Import, ...]:
    root = parser("rust").parse(data).root_node
    found = set()
    for _, caps in QueryCursor(imports_query("rust")).matches(root):
        if "mod" in caps:
            node = caps["mod"][0]
            path = [_text(caps["name"][0])]
            parent = node.parent
            while parent is not None:
                # A `mod x;` inside an inline `mod outer { ... }` lives at outer/x.rs.
                if parent.type == "mod_item":
                    name = parent.child_by_field_name("name")
                    if name is not None:
                        path.append(_text(name))
                parent = parent.parent
            found.add(Import(node.start_point.row + 1, "mod", "::".join(reversed(path))))
        elif "use" in caps:
            line = caps["use"][0].start_point.row + 1
            for use_path in _use_paths(caps["argument"][0]):
                found.add(Import(line, "use", use_path))
    return _sorted(list(found))


def _use_paths(node: Node) -> list[str]:
    kind = node.type
    if kind == "use_as_clause":
        path = node.child_by_field_name("path")
        return _use_paths(path) if path is not None else []
    if kind == "use_wildcard":
        inner = node.named_children
        return [_compact(inner[0])] if inner else []
    if kind == "use_list":
        out = []
        for child in node.named_children:
            out.extend(_use_paths(child))
        return out
    if kind == "scoped_use_list":
        prefix_node = node.child_by_field_name("path")
        prefix = _compact(prefix_node) if prefix_node is not None else ""
        items = node.child_by_field_name("list")
        tails = _use_paths(items) if items is not None else []
        out = []
        for tail in tails:
            if tail == "self":
                out.append(prefix)
            elif prefix:
                out.append(f"{prefix}::{tail}")
            else:
                out.append(tail)
        return out
    if kind in ("identifier", "scoped_identifier", "crate", "self", "super"):
        return [_compact(node)]
    return []


def _compact(node: Node) -> str:
    return "".join(_text(node).split())


# -- tags -----------------------------------------------------------------------------------------


def extract_tags(language: str, data: bytes) -> FileTags:
    root = parser(language).parse(data).root_node
    lines = data.split(b"\n")
    definitions = set()
    references: dict[tuple[str, str], int] = {}
    for _, caps in QueryCursor(tags_query(language)).matches(root):
        names = caps.get("name")
        if not names:
            continue
        name = _text(names[0])
        for capture, nodes in caps.items():
            if capture.startswith("definition."):
                row = nodes[0].start_point.row
                text = lines[row].decode("utf-8", "replace").rstrip()
                if len(text) > _MAX_DEFINITION_TEXT:
                    text = text[: _MAX_DEFINITION_TEXT - 1] + "…"
                definitions.add(Definition(row + 1, name, capture[11:], text))
            elif capture.startswith("reference."):
                key = (name, capture[10:])
                line = nodes[0].start_point.row + 1
                if key not in references or references[key] > line:
                    references[key] = line
    return FileTags(
        tuple(sorted(definitions)),
        tuple(sorted(Reference(n, k, line) for (n, k), line in references.items())),
    )


def _text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""
