"""Benchmark: the dependency graph against grimp, and incremental update latency.

    python3 bench/depgraph.py [--files 2000] [--runs 5] [--package sympy]

Builds a synthetic Python package of ``--files`` modules with realistic imports (absolute,
relative, inside functions, under TYPE_CHECKING, doctest lines in docstrings that must not
count), then in the same process times grimp's graph build and ours (cold cache, so every file
is parsed), compares the internal import edges file-to-module, and times one-file updates.
With ``--package`` the build comparison is repeated on an installed package. Prints medians
and ratios.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grimp

from projections.depgraph import DepGraph, ParseCache

PACKAGE = "synthpkg"


def generate(root: Path, n_files: int, seed: int = 7) -> list[str]:
    """Write a synthetic package under ``root``; returns its module paths (relative to root)."""
    rng = random.Random(seed)
    n_sub = max(1, n_files // 50)
    per_sub = -(-(n_files - n_sub - 1) // n_sub)
    modules = [(s, m) for s in range(n_sub) for m in range(per_sub)][: n_files - n_sub - 1]
    pkg = root / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The synthetic package."""\n\n__version__ = "1.0"\n')
    paths = [f"{PACKAGE}/__init__.py"]
    for s in range(n_sub):
        sub = pkg / f"sub{s}"
        sub.mkdir()
        (sub / "__init__.py").write_text(
            "from .mod0 import Thing0 as Thing\n\n__all__ = ['Thing']\n"
        )
        paths.append(f"{PACKAGE}/sub{s}/__init__.py")
    stdlib = [
        "os",
        "sys",
        "json",
        "re",
        "typing",
        "collections",
        "itertools",
        "functools",
        "dataclasses",
    ]
    for s, m in modules:
        # The doctest lines and the indented example must not count as imports.
        lines = [
            f'"""Module {m} of subpackage {s}.\n\nExample::\n\n'
            f"    >>> from {PACKAGE}.sub{s} import mod{m}\n    >>> mod{m}.Thing{m}()\n"
            '"""\n'
        ]
        lines.append("from __future__ import annotations\n")
        for name in rng.sample(stdlib, 3):
            lines.append(f"import {name}\n")
        for _ in range(rng.randint(2, 6)):
            ts, tm = rng.choice(modules)
            kind = rng.random()
            if kind < 0.35:
                lines.append(f"from {PACKAGE}.sub{ts} import mod{tm}\n")
            elif kind < 0.55:
                lines.append(f"import {PACKAGE}.sub{ts}.mod{tm}\n")
            elif kind < 0.75 and ts == s:
                lines.append(f"from .mod{tm} import Thing{tm}\n")
            elif kind < 0.9:
                lines.append(
                    f"from ..sub{ts}.mod{tm} import (\n    Thing{tm},\n    helper{tm},\n)\n"
                )
            else:
                lines.append(f"from {PACKAGE}.sub{ts} import Thing\n")
        ts, tm = rng.choice(modules)
        lines.append(
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
            f"    from {PACKAGE}.sub{ts}.mod{tm} import Thing{tm} as T\n"
        )
        lines.append(
            f"\n\nclass Thing{m}:\n    '''A thing.\n\n    from nowhere import nothing\n    '''\n\n"
        )
        for k in range(rng.randint(4, 10)):
            lines.append(
                f"    def method{k}(self, value: int = {k}) -> int:\n        total = value\n"
            )
            lines.append(
                "        for i in range(3):\n            total += i * 2\n        return total\n\n"
            )
        lines.append(
            f"\ndef helper{m}(x):\n    from {PACKAGE} import __version__  # a late import\n"
            "    return x, __version__\n"
        )
        path = pkg / f"sub{s}" / f"mod{m}.py"
        path.write_text("".join(lines))
        paths.append(f"{PACKAGE}/sub{s}/mod{m}.py")
    return paths


def median_time(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def module_of(package: str, rel: str) -> str:
    stem = rel.rsplit(".", 1)[0]
    if stem == "__init__" or stem.endswith("/__init__"):
        stem = stem[: -len("__init__")].rstrip("/")
    return package + ("." + stem.replace("/", ".") if stem else "")


def interleaved_medians(fns: list[Callable[[], object]], runs: int) -> list[tuple[float, float]]:
    """(wall, CPU) median times of ``fns``, run in turn ``runs`` times over, so a burst of load
    from elsewhere on the machine lands on all of them rather than on one. CPU time (all
    threads of the process) is the steadier figure on a busy machine."""
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[i].append(time.perf_counter() - start)
            cpu[i].append(time.process_time() - start_cpu)
    return [(statistics.median(w), statistics.median(c)) for w, c in zip(wall, cpu, strict=True)]


def compare(package: str, package_dir: Path, runs: int) -> dict[str, float]:
    (grimp_s, grimp_cpu), (ours_s, ours_cpu) = interleaved_medians(
        [
            lambda: grimp.build_graph(package, cache_dir=None),
            lambda: DepGraph.build(package_dir, ParseCache()),
        ],
        runs,
    )
    cache = ParseCache()
    DepGraph.build(package_dir, cache)
    warm_s = median_time(lambda: DepGraph.build(package_dir, cache), runs)
    g = grimp.build_graph(package, cache_dir=None)
    theirs = {(a, b) for a in g.modules for b in g.find_modules_directly_imported_by(a) if a != b}
    graph = DepGraph.build(package_dir, cache)
    ours = {(module_of(package, e.source), module_of(package, e.target)) for e in graph.edges()}
    ours = {(a, b) for a, b in ours if a in g.modules}
    return {
        "files": len(graph),
        "grimp_s": grimp_s,
        "ours_cold_s": ours_s,
        "ours_warm_s": warm_s,
        "ratio": ours_s / grimp_s,
        "grimp_cpu_s": grimp_cpu,
        "ours_cold_cpu_s": ours_cpu,
        "cpu_ratio": ours_cpu / grimp_cpu,
        "grimp_edges": len(theirs),
        "found": len(ours & theirs) / max(1, len(theirs)),
        "extra": len(ours - theirs),
    }


def update_latency(package_dir: Path, paths: list[str], n: int = 60) -> dict[str, float]:
    graph = DepGraph.build(package_dir)
    rng = random.Random(3)
    targets = [p for p in paths if p.endswith(".py") and "/mod" in p]
    body_edit, import_edit, add_remove = [], [], []
    for i in range(n):
        path = rng.choice(targets)
        original = (package_dir / path).read_bytes()
        start = time.perf_counter()
        graph.update({path: original + f"\n\ndef extra{i}():\n    return {i}\n".encode()})
        body_edit.append(time.perf_counter() - start)
        other = module_of(PACKAGE, rng.choice(targets))
        start = time.perf_counter()
        graph.update({path: f"import {other}\n".encode() + original})
        import_edit.append(time.perf_counter() - start)
        graph.update({path: original})
        new = f"sub0/fresh{i}.py"
        start = time.perf_counter()
        graph.update({new: f"from {PACKAGE}.sub1 import mod1\n".encode()})
        graph.update({new: None})
        add_remove.append((time.perf_counter() - start) / 2)
    return {
        "body_edit_ms": statistics.median(body_edit) * 1000,
        "import_edit_ms": statistics.median(import_edit) * 1000,
        "add_or_remove_ms": statistics.median(add_remove) * 1000,
        "full_build_ms": median_time(lambda: DepGraph.build(package_dir), 3) * 1000,
    }


def _row(label: str, ms: float, note: str) -> None:
    print(f"  {label:<24} {ms:9.2f} ms   {note}")


def _report(result: dict[str, float]) -> None:
    _row("grimp build (median)", result["grimp_s"] * 1000, "baseline")
    _row("depgraph build, cold", result["ours_cold_s"] * 1000, f"{result['ratio']:.2f}x grimp")
    _row("grimp build, CPU", result["grimp_cpu_s"] * 1000, "baseline (CPU time)")
    cpu_ratio = f"{result['cpu_ratio']:.2f}x grimp (CPU time)"
    _row("depgraph cold, CPU", result["ours_cold_cpu_s"] * 1000, cpu_ratio)
    warm = result["ours_warm_s"] / result["grimp_s"]
    _row("depgraph build, warm", result["ours_warm_s"] * 1000, f"{warm:.2f}x grimp (cache hit)")
    found, extra = result["found"] * 100, int(result["extra"])
    print(f"  grimp edges found: {found:.2f}%, edges grimp does not have: {extra}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--package", default="", help="also compare on this installed package")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = generate(root, args.files)
        sys.path.insert(0, str(root))
        try:
            result = compare(PACKAGE, root / PACKAGE, args.runs)
        finally:
            sys.path.remove(str(root))
        print(f"synthetic package: {result['files']} files, {result['grimp_edges']} grimp edges")
        _report(result)
        latency = update_latency(root / PACKAGE, [p.split("/", 1)[1] for p in paths])
        print("one-file updates (median):")
        _row("body edit", latency["body_edit_ms"], "target < 20 ms")
        _row("edit adding an import", latency["import_edit_ms"], "")
        _row("add or remove a file", latency["add_or_remove_ms"], "")
        ratio = latency["full_build_ms"] / latency["body_edit_ms"]
        _row("full rebuild", latency["full_build_ms"], f"{ratio:.0f}x a body edit")
    if args.package:
        module = importlib.import_module(args.package)
        assert module.__file__ is not None
        result = compare(args.package, Path(module.__file__).parent, args.runs)
        files, edges = result["files"], result["grimp_edges"]
        print(f"installed package {args.package}: {files} files, {edges} grimp edges")
        _report(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
