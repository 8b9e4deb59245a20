"""What a shell command line really runs, read with a real shell grammar (tree-sitter-bash).

``parse_shell(line)`` returns every simple command the line would run, wherever it sits:
pipelines, lists (``;`` ``&&`` ``||`` ``&`` newlines), subshells, groups, command and process
substitutions, control flow, function bodies, here-documents fed to a shell. Common wrappers are
unwrapped, and both the wrapper and what it runs are reported: ``env`` (its options and
``VAR=x``), ``command``, ``builtin``, ``exec``, ``nice``, ``nohup``, ``setsid``, ``stdbuf``,
``timeout``, ``time``, ``sudo``, ``doas``, ``xargs``, ``busybox``, ``find -exec/-execdir/-ok``,
``sh|bash|zsh|dash|ksh -c 'literal'``, ``eval`` of literals, ``trap 'literal'``, ``alias
x='literal'``, ``watch``. ``find ... -delete`` is reported as an ``rm`` of find's start paths,
so a rule on ``rm`` covers it. A path to a binary (``/bin/rm``, ``./x/rm``) counts as its name;
leading ``VAR=1`` assignments and ``!`` are skipped; quoting (``\\rm``, ``r''m``, ``"rm"``,
``$'rm'``) is removed the way the shell removes it.

What the parser cannot see through makes a command **hidden** (the permission layer asks): a
command name that is not a literal (``$X``, ``$(..)``, a glob or brace expansion), ``eval`` or
``sh -c`` of a non-literal, a shell reading commands from a pipe or a file (``source``, ``.``,
``curl .. | sh``), ``${x@P}``, ``git -c`` with a key that can run a program, ``BASH_ENV=``,
``hash -p``, ``enable -f``, arithmetic in a line holding a literal ``$(..)`` (bash runs
``a[$(cmd)]`` found in a variable's value), and input the grammar cannot parse. A command with
a non-literal argument is **opaque**: a pattern rule cannot allow it (the argument's value is
unknown), a deny pattern still matches it.

Files a line touches are reported as ``PathUse``: redirection targets (``>``, ``>>``, ``>|``,
``&>``, ``&>>``, ``>&file``), ``tee FILE`` and ``dd of=FILE`` are writes; ``<`` sources, ``dd
if=`` and every literal argument are reads (the caller decides which of them are paths that
matter, e.g. outside the workspace). A redirection or ``tee`` to an expansion (``> $OUT``) is a
write of an unknown path (``known=False``). Device files like ``/dev/null`` are left out.

The result is a pure function of the line, cached.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import bracex
import tree_sitter_bash
from tree_sitter import Language, Node, Parser, Tree

from coder_es.permissions.git_options import unlisted_option

_Handler = Callable[[str, list["_Word"], "_Collector", int, "str | None"], None]

MAX_DEPTH = 12  # nested sh -c / eval levels before giving up (hidden)

SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "rbash"})
SYSTEM_BIN_DIRS = frozenset({"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"})
# Writing these is not writing a file.
DEVICE_PATHS = frozenset(
    {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero"}
)
# git -c keys that cannot make git run a program; any other key hides what git runs.
SAFE_GIT_CONFIG = re.compile(
    r"(user\.(name|email)|color\..*|core\.(quotepath|autocrlf|safecrlf|filemode)|"
    r"init\.defaultbranch|commit\.gpgsign|tag\.gpgsign|safe\.directory|advice\..*|"
    r"pull\.(rebase|ff)|merge\.conflictstyle|diff\.(noprefix|renames)|log\..*|"
    r"column\..*|i18n\..*|push\.default|fetch\.prune)=",
    re.IGNORECASE,
)
_CONTINUATION = re.compile(r"(?<!\\)((?:\\\\)*)\\\n")
_LITERAL_NODES = frozenset({"word", "raw_string", "string", "ansi_c_string", "heredoc_body"})
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPE_DQ = re.compile(r'\\([$`"\\])')
_PATTERN_CHARS = re.compile(r"[*?\[\]{}]")
_WHITE = re.compile(r"\s")
_QUOTED_NODES = frozenset({"string", "raw_string", "ansi_c_string", "translated_string"})
_BRACE_SPECIAL = re.compile(r"[\\{},]")
_BRACE_LIMIT = 256  # words one brace expansion may make before it counts as unknown paths
_ARITHMETIC_NODES = frozenset({"arithmetic_expansion", "subscript", "c_style_for_statement"})
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_WRITE_OPS = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
_READ_OPS = frozenset({"<", "<&"})

# Variables a command may be given and stay allowable: they change how a program formats what it
# prints, never what it runs, loads, reads or where it connects. An allow-list (issue 29): any
# other variable a line puts in a program's environment (``X=1 cmd``, ``env X=1``, ``export X``,
# ``declare -x``, ``env -i``/``-u``) can make an allowed command run something else
# (``GIT_CONFIG_*``, ``LD_PRELOAD``, ``PATH``, ``HOME``, ``PAGER``, ``GIT_EXTERNAL_DIFF``...).
FORMATTING_VARIABLES = frozenset(
    {
        "LANG",
        "LANGUAGE",
        "TZ",
        "NO_COLOR",
        "FORCE_COLOR",
        "CLICOLOR",
        "CLICOLOR_FORCE",
        "COLORTERM",
        "TERM",
        "COLUMNS",
        "LINES",
        "CI",
    }
)
_LOCALE_VARIABLE = re.compile(r"LC_[A-Z]+\Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ASSIGNMENT_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^]]*\])?\+?=")
# ``${X:=v}`` / ``${X=v}`` assign X; ``((X=1))``, ``X+=1``, ``X++`` in arithmetic do too.
_EXPANSION_ASSIGNS = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:\[[^]]*\])?:?=")
_ARITHMETIC_ASSIGNS = re.compile(
    r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[[^]]*\])?\s*(?:(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+|--)"
    r"|(?:\+\+|--)\s*([A-Za-z_][A-Za-z0-9_]*)"
)
# shopt options that change no word a line expands to (globstar, extglob, dotglob do).
_SAFE_SHOPT = frozenset({"nullglob", "failglob", "nocaseglob", "nocasematch", "lastpipe"})


def formatting_variable(name: str) -> bool:
    """Whether ``name`` is on the allow-list of variables that only change formatting."""
    return name in FORMATTING_VARIABLES or _LOCALE_VARIABLE.match(name) is not None


@dataclass(frozen=True)
class SimpleCommand:
    """One command the line runs: its words (the name first, quotes removed)."""

    words: tuple[str, ...]
    # A word's value is unknown (an expansion): pattern rules cannot allow the command.
    opaque: bool = False
    # Why the command that runs cannot be known (then the permission layer asks), or None.
    hidden: str | None = None

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class PathUse:
    path: str  # as written (``~`` not expanded), relative to the line's directory
    mode: str  # "read" | "write"
    # False: the path is an expansion (``> $OUT``), ``path`` is its source text.
    known: bool = True
    # The shell expands it as a glob (unquoted ``*``, ``?``, ``[``): it names whatever matches.
    glob: bool = False
    # The parser cannot tell which path the shell makes of it (a brace expansion too large to
    # list): the caller treats it as a path outside the workspace.
    unsure: bool = False
    # False: an argument of a command not known to only read its operands (``cp``, ``ln``,
    # ``sed``, ``cd``): it may write or change that path (the caller asks for protected ones).
    reader: bool = True


@dataclass(frozen=True)
class ShellLine:
    commands: tuple[SimpleCommand, ...]
    paths: tuple[PathUse, ...]
    # Variables the line gives its programs that are not on the allow-list (``GIT_DIR``,
    # ``env -i``...): any command of the line may then run something its words do not say.
    environment: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Word:
    value: str | None  # None: not a literal
    source: str
    # The words an unquoted brace expansion makes of it (None: no brace expansion, or too many
    # to list), and whether an unquoted glob character is in it.
    braces: tuple[str, ...] | None = None
    glob: bool = False
    unsure: bool = False

    @property
    def shown(self) -> str:
        return self.source if self.value is None else self.value


@dataclass
class _Collector:
    commands: list[SimpleCommand] = field(default_factory=list)
    paths: list[PathUse] = field(default_factory=list)
    # A literal holding ``$(``/backticks, and an arithmetic context, in the same line: bash
    # evaluates ``a[$(cmd)]`` in a variable's value when it does arithmetic with it.
    latent_code: bool = False
    arithmetic: bool = False
    # Variables put in programs' environments (not on the allow-list), and variables the shell
    # sets for itself: those reach a program only if exported (``set -a``) or inherited.
    environment: list[str] = field(default_factory=list)
    shell_variables: list[str] = field(default_factory=list)
    allexport: bool = False

    def exported(self, name: str, shown: str | None = None) -> None:
        if not formatting_variable(name):
            self.environment.append(shown or name)

    def shell_variable(self, name: str) -> None:
        if not formatting_variable(name):
            self.shell_variables.append(name)

    def hide(self, source: str, why: str) -> None:
        self.commands.append(SimpleCommand((source,), True, why))

    def use(
        self,
        path: str,
        mode: str,
        *,
        known: bool = True,
        glob: bool = False,
        unsure: bool = False,
        reader: bool = True,
    ) -> None:
        if path and path not in DEVICE_PATHS and not path.startswith("/dev/fd/"):
            self.paths.append(PathUse(path, mode, known, glob, unsure, reader))


_PARSER = Parser(Language(tree_sitter_bash.language()))


@lru_cache(maxsize=512)
def parse_shell(line: str) -> ShellLine:
    """Every simple command ``line`` runs and every path it names (see the module docstring)."""
    out = _Collector()
    _parse_into(line, out, 0)
    if out.latent_code and out.arithmetic:
        out.hide(line.strip(), "arithmetic on a value holding a command substitution runs it")
    environment = list(out.environment)
    for name in out.shell_variables:
        # A shell variable reaches a program when it is exported: by ``set -a``, or because it
        # came in the environment already. Utilities read upper-case names only (POSIX XBD
        # 8.1 leaves names with a lower-case letter to applications), so a lower-case one,
        # ``for f in``, ``read -r line``, is taken as not inherited.
        if out.allexport or not any(c.islower() for c in name):
            environment.append(name)
    if "CDPATH" in environment:
        out.hide(line.strip(), "CDPATH makes cd go to a directory the line does not name")
    return ShellLine(
        tuple(out.commands), tuple(dict.fromkeys(out.paths)), tuple(dict.fromkeys(environment))
    )


def _parse_into(script: str, out: _Collector, depth: int) -> None:
    if depth > MAX_DEPTH:
        out.hide(script.strip(), "commands nested too deeply to follow")
        return
    # A backslash-newline joins lines before the shell reads words (the grammar splits there).
    script = _CONTINUATION.sub(r"\1", script)
    # tree-sitter-bash 0.25 glues a line starting with a backslash to the line before
    # ("ls\n\\rm x" parses as one command): a space at the line's start is read the same.
    script = script.replace("\n\\", "\n \\")
    tree = _parse_without_prefix_keywords(script.encode("utf-8", "surrogateescape"))
    if tree.root_node.has_error:
        out.hide(script.strip(), "the shell grammar cannot parse it")
        return
    _walk(tree.root_node, out, depth, None)


def _parse_without_prefix_keywords(data: bytes) -> Tree:
    """Parse, with the ``!`` and ``time`` keywords blanked out: they change no command a line
    runs, and the grammar misreads what follows them when it is a compound command
    (``! { rm x; }`` parses as a command named ``{``)."""
    for _ in range(MAX_DEPTH):
        tree = _PARSER.parse(data)
        if b"!" not in data and b"time" not in data:
            break
        spans = list(_prefix_keywords(tree.root_node))
        if not spans:
            break
        buf = bytearray(data)
        for start, end in spans:
            buf[start:end] = b" " * (end - start)
        data = bytes(buf)
    return tree


def _prefix_keywords(node: Node) -> Iterator[tuple[int, int]]:
    if node.type == "negated_command" and node.children and node.children[0].type == "!":
        yield node.children[0].start_byte, node.children[0].end_byte
    if node.type == "command":
        name = node.child_by_field_name("name")
        if name is not None and name.text == b"time":
            end = name.end_byte
            first = node.child_by_field_name("argument")
            if first is not None and first.text == b"-p":
                end = first.end_byte
            yield name.start_byte, end
    for child in node.children:
        yield from _prefix_keywords(child)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _walk(node: Node, out: _Collector, depth: int, stdin: str | None) -> None:
    kind = node.type
    if kind == "command":
        _command(node, out, depth, stdin)
        return
    if kind == "redirected_statement":
        feed = None
        for child in node.children_by_field_name("redirect"):
            _redirect(child, out, depth)
            feed = _stdin_literal(child) if feed is None else feed
        body = node.child_by_field_name("body")
        if body is not None:
            _walk(body, out, depth, feed)
        return
    if kind in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
        _redirect(node, out, depth)
        return
    if kind == "declaration_command":
        words = [_word(c) for c in node.named_children if c.type != "variable_assignment"]
        out.arithmetic = out.arithmetic or _has_flag(words, "i")
        keyword = node.children[0].type if node.children else "declare"
        out.commands.append(
            SimpleCommand((keyword, *(w.shown for w in words)), any(w.value is None for w in words))
        )
        _declaration(node, keyword, words, out)
    if kind == "unset_command":
        _unset("unset", [_word(c) for c in node.named_children], out, depth, None)
    if kind == "for_statement":
        variable = node.child_by_field_name("variable")
        if variable is not None:
            out.shell_variable(_text(variable))
    if kind == "expansion":
        for m in _EXPANSION_ASSIGNS.finditer(_text(node)):
            out.shell_variable(m.group(1))
    if kind in _LITERAL_NODES:
        text = _text(node)
        if kind == "word" and "\n" in text:
            # An unquoted word never holds a newline: the grammar misread the line.
            out.hide(text, "the shell grammar misreads this line")
        out.latent_code = out.latent_code or "$(" in text or "`" in text
    if (
        kind in _ARITHMETIC_NODES
        or (kind == "compound_statement" and _text(node).startswith("(("))
        or (kind == "test_operator" and _text(node) in _ARITHMETIC_TESTS)
    ):
        out.arithmetic = True
        _arithmetic_assignments(_text(node), out)
    if kind == "expansion" and _text(node).endswith("@P}"):
        out.hide(_text(node), "${..@P} runs the command substitutions in a variable's value")
    if kind == "variable_assignment":
        _assignment(node, out)
    for child in node.named_children:
        _walk(child, out, depth, None)


def _assignment(node: Node, out: _Collector) -> None:
    name = node.child_by_field_name("name")
    if name is None:
        return
    if name.type == "subscript":  # a[1]=x assigns a
        name = name.child_by_field_name("name") or name
    variable = _text(name)
    if variable in ("BASH_ENV", "ENV"):
        out.hide(_text(node), f"{variable} makes the shell run the commands of a file")
    parent = node.parent.type if node.parent is not None else ""
    if parent == "command":
        out.exported(variable)  # X=1 cmd: in cmd's environment
    elif parent != "declaration_command":  # declarations are read by _declaration
        out.shell_variable(variable)


def _declaration(node: Node, keyword: str, words: list[_Word], out: _Collector) -> None:
    """``export``/``declare``/``typeset``/``local``/``readonly``: which variables they set, and
    whether for the environment (``export``, ``-x``, ``+x``)."""
    names = [
        _text(c.child_by_field_name("name") or c)
        for c in node.named_children
        if c.type == "variable_assignment"
    ]
    _declares(keyword, words, names, out)


def _declares(keyword: str, words: list[_Word], names: list[str], out: _Collector) -> None:
    flags = "".join((w.value or "x")[1:] for w in words if (w.value or "-")[:1] in "-+")
    if "n" in flags and keyword != "export":
        # A name reference makes any later assignment write the variable it names.
        out.environment.append(f"{keyword} -n")
        return
    exported = keyword == "export" or "x" in flags
    for w in words:
        if w.value is None:
            names.append(w.source)  # ``export "$X"=1``: which variable is unknown
        elif w.value[:1] not in "-+":
            names.append(w.value.split("=", 1)[0])  # ``export 'X=1'`` as well as ``export X``
    for name in names:
        name = name.split("[", 1)[0]
        if exported:
            out.exported(name)
        else:
            out.shell_variable(name)


def _declare_builtin(
    name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None
) -> None:
    """``builtin export X=1``, ``command declare -x X``: the grammar sees a plain command."""
    _declares(name, list(args), [], out)


def _arithmetic_assignments(text: str, out: _Collector) -> None:
    for m in _ARITHMETIC_ASSIGNS.finditer(text):
        out.shell_variable(m.group(1) or m.group(2))


def _redirect(node: Node, out: _Collector, depth: int) -> None:
    for child in node.named_children:
        _walk(child, out, depth, None)
    if node.type != "file_redirect":
        return
    op = next((c.type for c in node.children if not c.is_named), "")
    dest = node.child_by_field_name("destination")
    if dest is None:
        return
    target = _word(dest)
    if op in (">&", "<&") and (dest.type == "number" or target.value == "-"):
        return  # duplicates a descriptor, names no file
    if target.value is None:
        out.use(target.source, "write" if op in _WRITE_OPS or op == "<>" else "read", known=False)
        return
    # bash expands a glob in a redirection when it matches one file.
    if op in _WRITE_OPS or op == "<>":
        out.use(target.value, "write", glob=target.glob)
    if op in _READ_OPS or op == "<>":
        out.use(target.value, "read", glob=target.glob)


def _stdin_literal(node: Node) -> str | None:
    """The text a here-document or here-string feeds, when it is a literal."""
    if node.type == "heredoc_redirect":
        body = next((c for c in node.named_children if c.type == "heredoc_body"), None)
        if body is None:
            return ""
        if any(c.type != "heredoc_content" for c in body.named_children):
            return None  # expansions in the body: its text is not known
        return _text(body)
    if node.type == "herestring_redirect":
        words = [_word(c) for c in node.named_children]
        if words and all(w.value is not None for w in words):
            return " ".join(w.value or "" for w in words)
    return None


def _command(node: Node, out: _Collector, depth: int, stdin: str | None) -> None:
    words: list[_Word] = []
    for child in node.named_children:
        if child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            stdin = _stdin_literal(child) if stdin is None else stdin
        elif child.type == "command_name":
            words.append(_word(child.named_children[0] if child.named_children else child))
        elif child.type != "variable_assignment":
            words.append(_word(child))
        # Substitutions inside the words run too; redirections name files.
        _walk(child, out, depth, None)
    if words:
        _expand(words, out, depth, stdin)


# ---------------------------------------------------------------------- words


def _word(node: Node) -> _Word:
    value = _literal(node)
    source = _text(node)
    if value is None or not _PATTERN_CHARS.search(source):
        return _Word(value, source)
    # Only what is unquoted expands: ``'*'`` and ``"{a,b}"`` are literal.
    pieces = node.named_children if node.type == "concatenation" else [node]
    unquoted = "".join(_text(p) for p in pieces if p.type not in _QUOTED_NODES)
    glob = re.search(r"[*?\[]", unquoted) is not None
    if "{" not in unquoted:
        return _Word(value, source, None, glob)
    # bracex expands braces as bash does; quoted pieces are escaped so they stay literal.
    spelled = "".join(
        _BRACE_SPECIAL.sub(r"\\\g<0>", _literal(p) or "") if p.type in _QUOTED_NODES else _text(p)
        for p in pieces
    )
    try:
        braces = tuple(bracex.expand(spelled, limit=_BRACE_LIMIT))
    except bracex.ExpansionLimitException:
        return _Word(value, source, None, glob, unsure=True)
    return _Word(value, source, braces, glob)


def _literal(node: Node) -> str | None:
    kind = node.type
    text = _text(node)
    if kind in ("word", "number", "variable_name", "special_character"):
        return _UNESCAPE.sub(r"\1", text) if "\\" in text else text
    if kind == "raw_string":
        return text[1:-1]
    if kind in ("string", "translated_string"):
        inner = node
        if kind == "translated_string":
            inner = node.named_children[0] if node.named_children else node
        if any(c.type != "string_content" for c in inner.named_children):
            return None
        body = _text(inner)[1:-1]
        return _UNESCAPE_DQ.sub(r"\1", body) if "\\" in body else body
    if kind == "ansi_c_string":
        return _ansi_c(text[2:-1])
    if kind == "concatenation":
        parts = [_literal(c) for c in node.named_children]
        if any(p is None for p in parts) or not node.named_children:
            return None
        return "".join(p or "" for p in parts)
    return None


_ANSI_SIMPLE = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "e": "\x1b",
    "E": "\x1b",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


_ANSI_ESCAPE = re.compile(
    r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)


def _ansi_c(body: str) -> str:
    """The value of ``$'body'``. ``\\xHH`` and octal escapes are bytes, so the result is
    decoded like a file name (a byte that is not UTF-8 becomes a surrogate escape)."""
    out = bytearray()
    pos = 0
    for m in _ANSI_ESCAPE.finditer(body):
        out += body[pos : m.start()].encode("utf-8", "surrogateescape")
        pos = m.end()
        s = m.group(1)
        if s[0] in _ANSI_SIMPLE:
            out += _ANSI_SIMPLE[s[0]].encode()
        elif s[0] == "x":
            out.append(int(s[1:], 16)) if len(s) > 1 else out.extend(b"\\x")
        elif s[0] in "uU" and len(s) > 1 and int(s[1:], 16) <= 0x10FFFF:
            out += chr(int(s[1:], 16)).encode("utf-8", "surrogatepass")
        elif s[0] in "uU":
            out += b"\\" + s.encode()
        elif s[0] == "c":
            out.append(ord(s[1]) & 0x1F)
        else:
            out.append(int(s, 8) & 0xFF)
    out += body[pos:].encode("utf-8", "surrogateescape")
    return out.decode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------- wrappers


def _expand(words: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    """Report the command ``words`` run and, for a wrapper, the commands it runs in turn."""
    if depth > MAX_DEPTH:
        out.hide(" ".join(w.shown for w in words), "commands nested too deeply to follow")
        return
    name = words[0].value
    source = " ".join(w.shown for w in words)
    if name is None:
        out.hide(source, "the command name is not a literal")
        return
    if name not in ("[", "[[") and _PATTERN_CHARS.search(name):
        out.hide(source, "the command name is a pattern the shell expands")
        return
    if _WHITE.search(name):
        out.hide(source, "the command name contains white space")
        return
    args = words[1:]
    opaque = any(w.value is None for w in args)
    if "/" in name.rstrip("/"):
        # A path to a binary counts as its name for deny rules; a pattern only allows it from
        # the system's own directories (``./ls`` may be anything).
        directory, name = name.rsplit("/", 1)
        opaque = opaque or directory not in SYSTEM_BIN_DIRS
    if name == "git" and not opaque:
        # A read-only git command with an option off its allow-list (``--output``,
        # ``--ext-diff``) may write or run something: no pattern allows it.
        _, sub, rest = _git_command(args)
        opaque = sub is not None and unlisted_option(sub, (w.value or "" for w in rest)) is not None
    out.commands.append(SimpleCommand((name, *(w.shown for w in args)), opaque))
    reader = _only_reads(name, args)
    for arg in args:
        if arg.value is None:
            continue
        if arg.unsure:
            out.use(arg.value, "read", unsure=True, reader=reader)
            continue
        for value in arg.braces or (arg.value,):
            for path in path_candidates(value):
                out.use(path, "read", glob=arg.glob, reader=reader)
    handler = _WRAPPERS.get(name)
    if handler is not None:
        handler(name, args, out, depth, stdin)


def path_candidates(word: str) -> list[str]:
    """Every path a program may open for ``word``, whatever its options mean: the word itself
    (after ``--`` anything is a file, ``-/../x`` too), what follows each ``=`` (``--file=PATH``,
    ``if=PATH``, ``-c key=PATH``), each ``:``-separated part after the first ``=`` (``a=b:~/x``:
    bash expands the tilde there), and for a short option cluster each tail after its letters
    (``-f../x``: ``grep -f`` reads ``../x``; option letters are taken to be letters or digits)."""
    found = [word]
    if "=" in word:
        value = word.split("=", 1)[1]
        found += value.split(":")
        found += (word[i + 1 :] for i, c in enumerate(word) if c == "=")
    if word[:1] == "-" and word[1:2] not in ("-", ""):
        for i in range(2, len(word)):
            if not word[i - 1].isalnum():
                break
            found.append(word[i:])
    # A lone ``/`` glued to an option or after ``=`` is a delimiter (``cut -d/``, ``awk -F/``,
    # ``--sep=/``), not the root directory; as a word of its own (``ls /``) it is a path.
    parts = (p for p in found[1:] if p and p not in ("/", word))
    return [*([word] if word else []), *dict.fromkeys(parts)]


def _rest_after_options(
    args: list[_Word], with_value: frozenset[str] = frozenset()
) -> list[_Word] | None:
    """The words after a wrapper's options (``--`` ends them); None if one is not literal."""
    i = 0
    while i < len(args):
        value = args[i].value
        if value is None:
            return None
        if value == "--":
            return args[i + 1 :]
        if not value.startswith("-") or value == "-":
            return args[i:]
        if value in with_value:
            i += 1
        i += 1
    return []


def _run_rest(
    rest: list[_Word] | None, out: _Collector, depth: int, stdin: str | None, wrapper: str
) -> None:
    if rest is None:
        out.hide(wrapper, f"{wrapper}'s arguments are not literals")
        return
    # ``sudo X=1 cmd``, ``env X=1 cmd``: assignments before the command go to its environment.
    while rest and rest[0].value is not None and _ASSIGNMENT_WORD.match(rest[0].value):
        out.exported(rest[0].value.split("=", 1)[0].split("[", 1)[0])
        rest = rest[1:]
    if rest:
        _expand(rest, out, depth + 1, stdin)


def _simple_wrapper(with_value: frozenset[str] = frozenset(), skip: int = 0) -> _Handler:
    def handle(
        name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None
    ) -> None:
        rest = _rest_after_options(args, with_value)
        if rest is not None:
            rest = rest[skip:]
        _run_rest(rest, out, depth, stdin, name)

    return handle


def _env(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    i = 0
    while i < len(args):
        value = args[i].value
        if value is None:
            out.hide(name, "env's arguments are not literals")
            return
        if value in ("-S", "--split-string") or value.startswith(("-S", "--split-string=")):
            script = value.split("=", 1)[1] if "=" in value else value[2:]
            if not script and i + 1 < len(args):
                script = args[i + 1].value or ""
            _parse_into(script, out, depth + 1)
            return
        if value in ("-u", "--unset"):
            unset = args[i + 1].value if i + 1 < len(args) else None
            out.exported(unset or "", f"env -u {unset}")
            i += 2
            continue
        if value.startswith(("--unset=", "-u")):
            unset = value.split("=", 1)[1] if value.startswith("--") else value[2:]
            out.exported(unset, f"env -u {unset}")
            i += 1
            continue
        if value in ("-C", "--chdir"):
            i += 2
            continue
        if value.startswith("BASH_ENV=") or value.startswith("ENV="):
            out.hide(value, "BASH_ENV makes the shell run the commands of a file")
        if value in ("-", "-i", "--ignore-environment") or (
            value[:1] == "-" and value[1:2] != "-" and "i" in value
        ):
            # The environment the sandbox gives every command is dropped.
            out.environment.append("env -i")
        if value == "--":
            i += 1
            break
        if value.startswith("-"):
            i += 1
            continue
        if "=" in value and not value.startswith("="):
            out.exported(value.split("=", 1)[0])
            i += 1
            continue
        break
    # env reads NAME=VALUE words after ``--`` too.
    while i < len(args) and "=" in (args[i].value or "=")[1:]:
        out.exported((args[i].value or "").split("=", 1)[0])
        i += 1
    _run_rest(args[i:], out, depth, stdin, name)


def _command_builtin(
    name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None
) -> None:
    if any(w.value in ("-v", "-V") for w in args[:2]):
        return  # only prints what the name is
    _run_rest(_rest_after_options(args), out, depth, stdin, name)


def _timeout(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    rest = _rest_after_options(args, frozenset({"-s", "--signal", "-k", "--kill-after"}))
    _run_rest(None if rest is None else rest[1:], out, depth, stdin, name)


def _xargs(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    with_value = frozenset({"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "-e", "-l"})
    rest = _rest_after_options(args, with_value)
    if rest == []:
        rest = [_Word("echo", "echo")]
    if rest is not None:
        # xargs adds words read from its input: their values are unknown (``xargs env`` runs
        # whatever command the input names).
        rest = [*rest, _Word(None, "{xargs input}")]
    _run_rest(rest, out, depth, None, name)


def _find(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    starts = []
    for w in args:
        if w.value is None or w.value.startswith(("-", "(", "!")):
            break
        starts.append(w)
    i = 0
    while i < len(args):
        value = args[i].value
        if value in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(args) and args[end].value not in (";", "+"):
                end += 1
            _run_rest(args[i + 1 : end], out, depth, None, name)
            i = end
        elif value == "-delete":
            # find -delete removes files: it counts as rm of what find searches.
            targets = tuple(w.shown for w in starts) or (".",)
            out.commands.append(
                SimpleCommand(("rm", *targets), any(w.value is None for w in starts))
            )
        elif value in ("-fprint", "-fprint0", "-fprintf", "-fls") and i + 1 < len(args):
            out.use(args[i + 1].value or "", "write")
        i += 1


def _shell(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    i = 0
    command_mode = False
    while i < len(args):
        value = args[i].value
        if value is None:
            break
        if value == "--":
            i += 1
            break
        if value in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if value.startswith("-") and not value.startswith("--") and "c" in value:
            command_mode = True
        if not value.startswith(("-", "+")):
            break
        i += 1
    if command_mode:
        script = args[i] if i < len(args) else None
        if script is None or script.value is None:
            out.hide(name, f"{name} -c runs a command line that is not a literal")
        else:
            _parse_into(script.value, out, depth + 1)
        return
    if i < len(args):
        return  # runs a script file: the command itself (``bash x.sh``) is what rules see
    if stdin is None:
        out.hide(name, f"{name} runs commands it reads from its input")
    else:
        _parse_into(stdin, out, depth + 1)


def _eval(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    if any(w.value is None for w in args):
        out.hide(name, "eval of a value that is not a literal")
    else:
        _parse_into(" ".join(w.value or "" for w in args), out, depth + 1)


def _source(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    out.hide(" ".join([name, *(w.shown for w in args)]), f"{name} runs the commands of a file")


def _trap(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    rest = _rest_after_options(args)
    if rest:
        _eval(name, rest[:1], out, depth, stdin)


def _alias(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    for w in args:
        if w.value is None:
            out.hide(name, "an alias with a value that is not a literal")
        elif "=" in w.value:
            _parse_into(w.value.split("=", 1)[1], out, depth + 1)


def _watch(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    rest = _rest_after_options(args, frozenset({"-n", "--interval", "-d", "--differences"}))
    if rest is None or any(w.value is None for w in rest):
        out.hide(name, "watch runs a command line that is not a literal")
    elif rest:
        _parse_into(" ".join(w.value or "" for w in rest), out, depth + 1)


# Commands that only read the files their arguments name (an allow-list): any other command's
# arguments may be paths it writes, links, moves or changes (``cp``, ``ln``, ``sed -i``, ``cd``).
READERS = frozenset(
    {
        *("cat", "head", "tail", "less", "more", "wc", "file", "stat", "ls", "tree", "du"),
        *("grep", "egrep", "fgrep", "rg", "diff", "cmp", "od", "xxd", "hexdump", "strings"),
        *("md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum", "cksum", "nl", "echo"),
        *("test", "[", "[[", "realpath", "readlink", "basename", "dirname", "which", "pwd"),
        *("printf", "true", "false", ":", "type"),
    }
)
# git subcommands that only read (with ``--output`` they write a file).
GIT_READERS = frozenset(
    {
        *("status", "diff", "log", "show", "blame", "ls-files", "ls-tree", "rev-parse"),
        *("cat-file", "describe", "shortlog", "rev-list", "whatchanged", "annotate"),
    }
)
_GIT_GLOBAL_WITH_VALUE = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix"}
)
# ``git config`` actions that only read (git refuses two actions in one call).
_GIT_CONFIG_READS = frozenset(
    {
        *("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color"),
        *("--get-colorbool", "-l", "--list"),
    }
)


def _git_command(args: list[_Word]) -> tuple[list[_Word], str | None, list[_Word]]:
    """git's global options, its subcommand (None: not a literal, or none) and the rest."""
    i = 0
    while i < len(args):
        value = args[i].value
        if value is None:
            return args[:i], None, args[i:]
        if not value.startswith("-"):
            return args[:i], value, args[i + 1 :]
        i += 2 if value in _GIT_GLOBAL_WITH_VALUE else 1
    return args, None, []


def _only_reads(name: str, args: list[_Word]) -> bool:
    if name == "git":
        _, sub, rest = _git_command(args)
        return sub in GIT_READERS and not any(
            (w.value or "-").startswith(("--output", "-o")) for w in rest
        )
    return name in READERS


def _git(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    options, sub, rest = _git_command(args)
    for i, w in enumerate(options):
        if w.value is None:
            return
        if w.value in ("-c", "--config-env"):
            key = options[i + 1].value if i + 1 < len(options) else None
            if key is None or not SAFE_GIT_CONFIG.match(key):
                out.hide(f"git {w.value} {key}", "this git setting can make git run a program")
        elif w.value.startswith(("--exec-path=", "--config-env=")):
            out.hide(f"git {w.value}", "this git option can make git run a program")
    if sub is None:
        return
    values = [w.value for w in rest]
    if any(v is None for v in values):
        # Which action an unknown word asks git for cannot be told: count it as a write.
        if sub in ("config", "remote", "submodule", "init", "clone", "lfs", "maintenance"):
            out.use(".git/config", "write")
        return
    words = [v or "" for v in values]
    for target in _git_config_writes(sub, words):
        out.use(target, "write")
    if sub == "submodule" and words[:1] == ["foreach"]:
        # ``git submodule foreach CMD`` runs CMD with the shell.
        script = [w for w in words[1:] if not w.startswith("-")]
        _parse_into(" ".join(script), out, depth + 1)


def _git_config_writes(sub: str, words: list[str]) -> list[str]:
    """The git configuration (or hooks) files a git command writes: ``.git/config`` stands for
    the repository's, whichever file it is (the caller asks before writing it)."""
    positional = [w for w in words if not w.startswith("-")]
    options = [w.split("=", 1)[0] for w in words if w.startswith("-")]
    first = positional[0] if positional else None
    if sub == "config":
        if first in ("get", "list") or any(o in _GIT_CONFIG_READS for o in options):
            return []
        targets = [".git/config"]
        for i, w in enumerate(words):
            if w in ("-f", "--file") and i + 1 < len(words):
                targets.append(words[i + 1])
            elif w.startswith("--file="):
                targets.append(w.split("=", 1)[1])
            elif w == "--global":
                targets.append("~/.gitconfig")
            elif w == "--system":
                targets.append("/etc/gitconfig")
            elif w == "--worktree":
                targets.append(".git/config.worktree")
        return targets
    if sub == "remote":
        return [".git/config"] if first not in (None, "show", "get-url") else []
    if sub == "submodule":
        return [".git/config"] if first not in (None, "status", "summary", "foreach") else []
    upstream = ("-u", "--set-upstream", "--set-upstream-to", "--unset-upstream")
    if sub in ("branch", "checkout", "switch", "push") and any(
        o in (*upstream, "--edit-description", "-t", "--track") for o in options
    ):
        return [".git/config"]
    if sub in ("init", "clone") and any(
        o in ("--template", "-c", "--config", "--separate-git-dir") for o in options
    ):
        return [".git/config", ".git/hooks"]
    if sub == "lfs" and first in ("install", "update"):
        return [".git/hooks"]
    if sub == "maintenance" and first not in (None, "run"):
        return ["~/.gitconfig"]
    return []


def _has_flag(args: list[_Word], letter: str) -> bool:
    """Whether a short option holds ``letter`` (or an argument's value is unknown)."""
    return any(w.value is None or (w.value[:1] == "-" and letter in w.value) for w in args)


def _hash(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    if _has_flag(args, "p"):
        out.hide(" ".join([name, *(w.shown for w in args)]), "hash -p gives a name another binary")


def _enable(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    if _has_flag(args, "f"):
        out.hide(" ".join([name, *(w.shown for w in args)]), "enable -f loads code")


def _let(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    out.arithmetic = True
    for w in args:
        _arithmetic_assignments(w.shown, out)


def _dd(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    for w in args:
        if w.value is not None and w.value.startswith("of="):
            out.use(w.value[3:], "write")


def _tee(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    for w in args:
        if w.value is None:
            out.use(w.source, "write", known=False)
        elif not w.value.startswith("-"):
            out.use(w.value, "write")


def _cd(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    """``cd`` alone goes home, ``cd -`` to $OLDPWD, ``popd``/``pushd +N`` along the directory
    stack: later relative paths are then relative to a directory the line does not name."""
    operands = [w for w in args if w.value is None or not w.value.startswith("-") or w.value == "-"]
    if name == "popd" or not operands:
        out.use("~" if name == "cd" else "~-", "read")
    elif operands[0].value == "-" or (operands[0].value or "")[:1] == "+":
        out.use("~-", "read")


def _set(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    for i, w in enumerate(args):
        value = w.value
        if value is None:
            out.environment.append("set ...")
            return
        option = args[i + 1].value if value == "-o" and i + 1 < len(args) else None
        short = value[1:] if value[:1] == "-" and value[1:2] not in ("-", "o") else ""
        if "a" in short or option == "allexport":
            out.allexport = True  # every assignment after it is exported
        if "k" in short or option == "keyword":
            # Assignments anywhere in a command's words go to its environment.
            out.environment.append("set -k")


def _reads_variables(
    options_with_value: frozenset[str], default: str, named_by: str | None = None
) -> _Handler:
    """``read``, ``mapfile``, ``printf -v``, ``getopts``: the variables they set."""

    def handle(
        name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None
    ) -> None:
        names: list[str] = []
        i = 0
        while i < len(args):
            value = args[i].value
            if value is None:
                out.shell_variable(args[i].source)
            elif value in options_with_value or (named_by and value == named_by):
                if value == named_by or value == "-a":
                    target = args[i + 1].value if i + 1 < len(args) else None
                    names.append(target or "?")
                i += 1
            elif not value.startswith("-") and _NAME.match(value) and named_by is None:
                names.append(value)
            elif value.startswith("-") and _NAME.match(value[2:]):
                names.append(value[2:])  # a glued value (``-vNAME``, ``-aNAME``), to be safe
            i += 1
        if named_by is None and not names:
            names.append(default)
        for variable in names:
            out.shell_variable(variable)

    return handle


def _unset(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    if any(w.value == "-f" for w in args):
        return  # functions, not variables
    for w in args:
        if w.value is None or not w.value.startswith("-"):
            out.shell_variable(w.value or w.source)


def _shopt(name: str, args: list[_Word], out: _Collector, depth: int, stdin: str | None) -> None:
    if not any(w.value in ("-s", "-u") or w.value is None for w in args):
        return  # only prints settings
    unsafe = [
        w.shown
        for w in args
        if w.value is None or (not w.value.startswith("-") and w.value not in _SAFE_SHOPT)
    ]
    if unsafe:
        out.hide(f"shopt {' '.join(unsafe)}", "this shopt option changes what words expand to")


_WRAPPERS: dict[str, _Handler] = {
    "env": _env,
    "command": _command_builtin,
    "builtin": _simple_wrapper(),
    "exec": _simple_wrapper(frozenset({"-a"})),
    "nice": _simple_wrapper(frozenset({"-n", "--adjustment"})),
    "nohup": _simple_wrapper(),
    "setsid": _simple_wrapper(),
    "stdbuf": _simple_wrapper(frozenset({"-i", "-o", "-e"})),
    "time": _simple_wrapper(frozenset({"-f", "--format", "-o", "--output"})),  # /usr/bin/time
    "sudo": _simple_wrapper(
        frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-T", "-U", "--user"})
    ),
    "doas": _simple_wrapper(frozenset({"-u", "-C"})),
    "ionice": _simple_wrapper(frozenset({"-c", "-n", "-p", "-P", "-u"})),
    "chroot": _simple_wrapper(frozenset({"--userspec", "--groups"}), skip=1),
    "taskset": _simple_wrapper(skip=1),
    "unbuffer": _simple_wrapper(),
    "busybox": _simple_wrapper(),
    "coproc": _simple_wrapper(),
    "timeout": _timeout,
    "xargs": _xargs,
    "find": _find,
    "eval": _eval,
    "source": _source,
    ".": _source,
    "trap": _trap,
    "alias": _alias,
    "watch": _watch,
    "git": _git,
    "dd": _dd,
    "hash": _hash,
    "enable": _enable,
    "let": _let,
    "set": _set,
    **dict.fromkeys(("export", "declare", "typeset", "local", "readonly"), _declare_builtin),
    "cd": _cd,
    "pushd": _cd,
    "popd": _cd,
    "unset": _unset,
    "shopt": _shopt,
    "read": _reads_variables(frozenset({"-d", "-i", "-n", "-N", "-p", "-t", "-u"}), "REPLY"),
    "mapfile": _reads_variables(frozenset({"-d", "-n", "-O", "-s", "-u", "-C", "-c"}), "MAPFILE"),
    "readarray": _reads_variables(frozenset({"-d", "-n", "-O", "-s", "-u", "-C", "-c"}), "MAPFILE"),
    "printf": _reads_variables(frozenset(), "", named_by="-v"),
    "getopts": _reads_variables(frozenset(), "OPTARG"),
    "tee": _tee,
    **dict.fromkeys(SHELLS, _shell),
}
