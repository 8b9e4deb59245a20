"""Which options keep a read-only git command read-only: an allow-list (issue 28).

``git status``/``diff``/``log``/``show``/``blame``/``ls-files``/``rev-parse`` only look, until
an option makes them write (``--output=FILE``), run a program (``--ext-diff``, ``--textconv``,
``--show-signature`` runs gpg, ``--help`` a browser or pager) or something added to git later.
So a rule pattern (``git log *`` of the ``plan`` preset) allows such a command only when every
long option before ``--`` is on this list; any other option makes the command opaque, and the
read-only presets ask. Short options are all read-only for these subcommands (their values,
``-O<file>``, ``-S<text>``, are checked as paths like any argument).
"""

from __future__ import annotations

from collections.abc import Iterable

_DIFF = {
    *("--stat", "--numstat", "--shortstat", "--dirstat", "--summary", "--name-only"),
    *("--name-status", "--patch", "--no-patch", "--raw", "--patch-with-raw"),
    *("--patch-with-stat", "--unified", "--word-diff", "--word-diff-regex", "--color"),
    *("--no-color", "--color-words", "--color-moved", "--color-moved-ws", "--no-color-moved"),
    *("--no-renames", "--find-renames", "--find-copies", "--find-copies-harder"),
    *("--irreversible-delete", "--diff-filter", "--diff-algorithm", "--histogram"),
    *("--patience", "--minimal", "--ignore-space-change", "--ignore-all-space"),
    *("--ignore-blank-lines", "--ignore-space-at-eol", "--ignore-cr-at-eol"),
    *("--ignore-matching-lines", "--inter-hunk-context", "--function-context"),
    *("--exit-code", "--quiet", "--check", "--full-index", "--binary", "--abbrev"),
    *("--no-abbrev", "--src-prefix", "--dst-prefix", "--no-prefix", "--default-prefix"),
    *("--relative", "--no-relative", "--text", "--cached", "--staged", "--merge-base"),
    *("--no-index", "--ignore-submodules", "--submodule", "--compact-summary"),
    *("--stat-width", "--stat-count", "--stat-name-width", "--stat-graph-width"),
    *("--indent-heuristic", "--no-indent-heuristic", "--anchored", "--line-prefix"),
    *("--ita-invisible-in-index", "--no-ext-diff", "--no-textconv", "--find-object"),
    *("--pickaxe-all", "--pickaxe-regex", "--skip-to", "--rotate-to", "--orderfile"),
    *("--renames", "--break-rewrites", "--ws-error-highlight", "--output-indicator-new"),
    *("--output-indicator-old", "--output-indicator-context", "--null"),
}
_LOG = {
    *("--oneline", "--graph", "--decorate", "--no-decorate", "--decorate-refs"),
    *("--decorate-refs-exclude", "--clear-decorations", "--all", "--branches", "--tags"),
    *("--remotes", "--author", "--committer", "--grep", "--all-match", "--invert-grep"),
    *("--since", "--after", "--until", "--before", "--max-count", "--skip", "--format"),
    *("--pretty", "--abbrev-commit", "--no-abbrev-commit", "--date", "--relative-date"),
    *("--reverse", "--first-parent", "--merges", "--no-merges", "--min-parents"),
    *("--max-parents", "--no-min-parents", "--no-max-parents", "--follow", "--left-right"),
    *("--cherry-pick", "--cherry-mark", "--cherry", "--boundary", "--ancestry-path"),
    *("--topo-order", "--date-order", "--author-date-order", "--simplify-by-decoration"),
    *("--full-history", "--dense", "--sparse", "--simplify-merges", "--no-walk", "--do-walk"),
    *("--notes", "--no-notes", "--show-notes", "--standard-notes", "--walk-reflogs"),
    *("--log-size", "--source", "--use-mailmap", "--mailmap", "--no-mailmap"),
    *("--regexp-ignore-case", "--extended-regexp", "--fixed-strings", "--perl-regexp"),
    *("--basic-regexp", "--encoding", "--expand-tabs", "--no-expand-tabs", "--children"),
    *("--parents", "--full-diff", "--diff-merges", "--combined-all-paths", "--remerge-diff"),
    *("--cc", "--no-diff-merges", "--exclude", "--glob", "--not", "--show-linear-break"),
    *("--reflog", "--single-worktree", "--count", "--show-pulls", "--exclude-first-parent-only"),
    *("--no-color", "--color"),
}
_STATUS = {
    *("--short", "--branch", "--porcelain", "--long", "--verbose", "--untracked-files"),
    *("--ignored", "--ignore-submodules", "--column", "--no-column", "--ahead-behind"),
    *("--no-ahead-behind", "--renames", "--no-renames", "--find-renames", "--show-stash"),
    *("--null",),
}
_BLAME = {
    *("--root", "--show-stats", "--incremental", "--line-porcelain", "--porcelain"),
    *("--show-name", "--show-number", "--show-email", "--contents", "--ignore-rev"),
    *("--ignore-revs-file", "--color-lines", "--color-by-age", "--minimal", "--progress"),
    *("--no-progress", "--abbrev", "--date", "--reverse", "--first-parent", "--encoding"),
}
_LS_FILES = {
    *("--cached", "--deleted", "--modified", "--others", "--ignored", "--stage"),
    *("--unmerged", "--killed", "--directory", "--no-empty-directory", "--exclude"),
    *("--exclude-from", "--exclude-per-directory", "--exclude-standard", "--error-unmatch"),
    *("--with-tree", "--full-name", "--recurse-submodules", "--abbrev", "--debug", "--eol"),
    *("--deduplicate", "--format", "--sparse", "--resolve-undo", "--no-empty-directory"),
}
_REV_PARSE = {
    *("--abbrev-ref", "--short", "--verify", "--quiet", "--show-toplevel", "--show-prefix"),
    *("--show-cdup", "--git-dir", "--git-common-dir", "--absolute-git-dir"),
    *("--is-inside-work-tree", "--is-inside-git-dir", "--is-bare-repository"),
    *("--is-shallow-repository", "--symbolic", "--symbolic-full-name", "--all", "--branches"),
    *("--tags", "--remotes", "--glob", "--exclude", "--since", "--until", "--default"),
    *("--revs-only", "--no-revs", "--flags", "--no-flags", "--sq", "--sq-quote"),
    *("--local-env-vars", "--resolve-git-dir", "--git-path", "--show-object-format"),
    *("--show-superproject-working-tree", "--shared-index-path", "--show-ref-format"),
    *("--path-format", "--verify"),
}

READ_ONLY_OPTIONS: dict[str, frozenset[str]] = {
    "status": frozenset(_STATUS),
    "diff": frozenset(_DIFF),
    "log": frozenset(_LOG | _DIFF),
    "show": frozenset(_LOG | _DIFF),
    "blame": frozenset(_BLAME),
    "ls-files": frozenset(_LS_FILES),
    "rev-parse": frozenset(_REV_PARSE),
}


def unlisted_option(subcommand: str, words: Iterable[str]) -> str | None:
    """The first option of a read-only git subcommand that is not on its allow-list (None:
    every option is). Subcommands without a list are not judged here (None)."""
    allowed = READ_ONLY_OPTIONS.get(subcommand)
    if allowed is None:
        return None
    for word in words:
        if word == "--":
            return None
        if word.startswith("--") and word.split("=", 1)[0] not in allowed:
            return word
    return None
