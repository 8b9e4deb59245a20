"""Start-up cost of the command line: whole processes, as a user runs them.

    python3 bench/cli.py [--reps N] [--events N] [--importtime]

Medians over ``--reps`` runs (after one warm-up) of the read commands (``--help``,
``sessions``, ``tree``, ``show``, ``diff``, ``search``, ``pending``, ``export``, ``context``,
``verify SESSION``) on a workspace holding one ``--events``-event session (LMDB), and of the
first ``run`` in a new store (scripted provider: the model excluded), each with its ratio to
``python -c pass`` measured in the same run, in turns with it so that machine load hits every
figure alike. Each process runs what the installed ``coder-es`` script runs (``from
coder_es.cli.main import run; run()``), without a shell or a version-manager shim in front.
Targets (issue 35): ``--help`` <= 60 ms; ``sessions``, ``tree``, ``show``, ``diff``,
``search``, ``pending`` <= 150 ms; ``export``, ``context``, ``verify`` <= 300 ms; the first
``run`` in a new store <= 1 s. The warm-up round also fills the user's generated-code cache
(``coder_es.cli.codecache``), as any earlier run of coder-es does.
``--importtime`` also prints the ten slowest imports of each command (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ENTRY = "from coder_es.cli.main import run; run()"
TARGETS_MS = {
    "--help": 60.0,
    "sessions": 150.0,
    "tree": 150.0,
    "show": 150.0,
    "diff": 150.0,
    "search": 150.0,
    "pending": 150.0,
    "export": 300.0,
    "context": 300.0,
    "verify": 300.0,
    "first run": 1000.0,
}


PYCACHE = Path(tempfile.mkdtemp(prefix="coder-es-bench-pycache-"))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # Compiled once like an installed package is (pip writes .pyc files), not on every run
    # (PYTHONDONTWRITEBYTECODE would measure the compiler); kept out of the checkout.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def make_workspace(root: Path, events: int) -> str:
    from tree import make_session  # bench/tree.py: whole turns with edits

    from coder_es.application import CoderApp
    from coder_es.store.config import StoreConfig

    ws = root / "ws"
    app = CoderApp(StoreConfig(backend="lmdb", path=ws / ".coder-es"))
    try:
        sid = make_session(app, ws, 20, events)
    finally:
        app.close()
    return str(sid)


def _nodes(ws: Path, sid: str) -> tuple[str, str]:
    """The first and the last node of the session (for ``diff``)."""
    import json

    argv = [sys.executable, "-c", ENTRY, "tree", sid[:8], "--json"]
    done = subprocess.run(argv, cwd=ws, env=_env(), capture_output=True, check=True)
    nodes = [n["id"] for n in json.loads(done.stdout)["nodes"]]
    return nodes[0], nodes[-1]


def _first_run(root: Path, rep: int) -> tuple[list[str], Path]:
    """A new workspace (a git repository with a file) for one first ``run`` in a new store."""
    import json

    ws = root / f"new-{rep}"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    script = ws.parent / "turn.json"
    if not script.exists():
        turns = [
            {"blocks": [{"type": "tool_use", "name": "read", "input": {"path": "a.py"}}]},
            {"blocks": [{"type": "text", "text": "read it"}]},
        ]
        script.write_text(json.dumps({"turns": turns}))
    return ["run", "read a.py", "--script", str(script)], ws


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) milliseconds of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True)
    elapsed = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed, cpu


def slowest_imports(args: list[str], cwd: Path, n: int = 10) -> list[str]:
    argv = [sys.executable, "-X", "importtime", "-c", ENTRY, *args]
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True)
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    rows.sort(reverse=True)
    return [f"{us / 1000:7.1f} ms {name}" for us, name in rows[:n]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--importtime", action="store_true")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sid = make_workspace(root, opts.events)
        ws = root / "ws"
        first, last = _nodes(ws, sid)
        commands: dict[str, list[str]] = {
            "--help": ["--help"],
            "sessions": ["sessions"],
            "tree": ["tree", sid[:8]],
            "show": ["show", sid[:8]],
            "diff": ["diff", sid[:8], first, last, "--stat"],
            "search": ["search", "edit"],
            "pending": ["pending"],
            "export": ["export", sid[:8], "--format", "jsonl", "-o", str(root / "x.jsonl")],
            "context": ["context", sid[:8]],
            "verify": ["verify", sid[:8]],
            "first run": [],  # a new workspace per run: _first_run
        }
        baseline_argv = [sys.executable, "-c", "pass"]
        names = ["python -c pass", *commands]
        wall: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}
        for rep in range(opts.reps + 1):
            for name, args in [("python -c pass", None), *commands.items()]:
                cwd = ws
                if name == "first run":
                    args, cwd = _first_run(root, rep)
                argv = baseline_argv if args is None else [sys.executable, "-c", ENTRY, *args]
                ms, cpu_ms = timed(argv, cwd)
                if rep:  # the first round compiles the modules and warms the page cache
                    wall[name].append(ms)
                    cpu[name].append(cpu_ms)
        base = statistics.median(wall["python -c pass"])
        base_cpu = statistics.median(cpu["python -c pass"])
        print(f"{opts.events}-event session, LMDB, {opts.reps} runs each, medians (wall / CPU)")
        print(f"{'python -c pass':<22} {base:7.1f} ms / {base_cpu:6.1f} ms CPU")
        for name in commands:
            ms = statistics.median(wall[name])
            cpu_ms = statistics.median(cpu[name])
            target = TARGETS_MS[name]
            verdict = "met" if ms <= target else "MISSED"
            print(
                f"{'coder-es ' + name:<22} {ms:7.1f} ms / {cpu_ms:6.1f} ms CPU  "
                f"{ms / base:5.2f}x python -c pass (CPU {cpu_ms / base_cpu:5.2f}x)  "
                f"target <= {target:.0f} ms: {verdict}"
            )
        if opts.importtime:
            for name, args in commands.items():
                if name == "first run":
                    continue
                print(f"\nslowest imports of coder-es {name} (cumulative):")
                for line in slowest_imports(args, ws):
                    print(f"  {line}")
    shutil.rmtree(PYCACHE, ignore_errors=True)


if __name__ == "__main__":
    main()
