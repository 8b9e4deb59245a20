"""Files related to a task, ranked and packed into a token budget as a repo map.

Ranking is personalized PageRank over the import graph, restarting at the seed files (the files
in the conversation; with no seeds, at every file, which ranks the repository as a whole). A
walk follows an import to the file imported (weight 1) and, at half the weight, back to a file
importing the current one: both what a file uses and what uses it are related to a change.
Only files the walk reaches are related.

The map lists each ranked file with the source lines its definitions start on (like aider's
repo map). Within a file, definitions the seed files reference come first, then classes, types
and functions, then the rest; they are shown in source order. Files are added best first while
the budget allows; a file that does not fit whole is cut to the definitions that fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from projections.depgraph.model import Definition, FileTags, RankedFile, RepoMap


class DepGraph(Protocol):
    """What ranking reads of ``graph.DepGraph`` (which calls into this module: a protocol here,
    not an import, keeps the two out of a circle)."""

    @property
    def files(self) -> tuple[str, ...]: ...

    def direct_dependencies(self, path: str) -> tuple[str, ...]: ...

    def tags(self, path: str) -> FileTags: ...


DAMPING = 0.85
BACKWARD_WEIGHT = 0.5
_MAX_ITERATIONS = 100
BREADTH = 5  # definitions per file in the first packing pass
_TOLERANCE = 1e-10
_KIND_ORDER = {
    "class": 0, "interface": 0, "type": 0, "module": 1, "function": 1, "macro": 2, "method": 3
}  # fmt: skip


def default_token_counter(text: str) -> int:
    """About four characters a token: close enough for budgeting when no tokenizer is given."""
    return (len(text) + 3) // 4


def pagerank(graph: DepGraph, seeds: Sequence[str]) -> dict[str, float]:
    nodes = graph.files
    index = {p: i for i, p in enumerate(nodes)}
    out_links: list[list[tuple[int, float]]] = [[] for _ in nodes]
    for i, path in enumerate(nodes):
        for target in graph.direct_dependencies(path):
            j = index.get(target)
            if j is not None:
                out_links[i].append((j, 1.0))
                out_links[j].append((i, BACKWARD_WEIGHT))
    totals = [sum(w for _, w in links) for links in out_links]
    restart = [0.0] * len(nodes)
    if seeds:
        for s in set(seeds):
            restart[index[s]] = 1.0 / len(set(seeds))
    elif nodes:
        restart = [1.0 / len(nodes)] * len(nodes)
    rank = list(restart)
    for _ in range(_MAX_ITERATIONS):
        nxt = [(1.0 - DAMPING) * r for r in restart]
        dangling = 0.0
        for i, links in enumerate(out_links):
            if not links:
                dangling += rank[i]
                continue
            share = DAMPING * rank[i] / totals[i]
            for j, w in links:
                nxt[j] += share * w
        if dangling:
            for i, r in enumerate(restart):
                nxt[i] += DAMPING * dangling * r
        delta = sum(abs(a - b) for a, b in zip(nxt, rank, strict=True))
        rank = nxt
        if delta < _TOLERANCE:
            break
    return {nodes[i]: r for i, r in enumerate(rank) if r > 0.0}


def related_files(
    graph: DepGraph,
    seeds: Sequence[str],
    budget_tokens: int,
    token_counter: Callable[[str], int] | None = None,
    *,
    include_seeds: bool = False,
) -> RepoMap:
    count = token_counter or default_token_counter
    scores = pagerank(graph, seeds)
    seed_set = set(seeds)
    ranked = sorted(
        ((score, path) for path, score in scores.items() if include_seeds or path not in seed_set),
        key=lambda sp: (-sp[0], sp[1]),
    )
    wanted_names: set[str] = set()
    for seed in sorted(seed_set):
        wanted_names |= graph.tags(seed).referenced_names()

    # Breadth first: each file in rank order with its few most wanted definitions; then the
    # budget left deepens the files in the same order.
    used = 0
    paths: list[str] = []
    queues: dict[str, list[Definition]] = {}
    picked: dict[str, list[Definition]] = {}
    for _, path in ranked:
        cost = count(f"{path}:\n")
        if used + cost > budget_tokens:
            break
        used += cost
        paths.append(path)
        queues[path] = _by_priority(graph.tags(path).definitions, wanted_names)
        picked[path] = []
        used = _fill(queues[path], picked[path], used, budget_tokens, count, BREADTH)
    for path in paths:
        used = _fill(queues[path], picked[path], used, budget_tokens, count, None)
    chosen = [RankedFile(path, scores[path], tuple(sorted(picked[path]))) for path in paths]
    blocks = [f"{f.path}:\n" + "".join(_line(d) for d in f.definitions) for f in chosen]
    text = "".join(blocks)
    # Token counts of pieces need not add up exactly for a real tokenizer: trim until it fits.
    while chosen and count(text) > budget_tokens:
        last = chosen[-1]
        if last.definitions:
            chosen[-1] = RankedFile(last.path, last.score, last.definitions[:-1])
        else:
            chosen.pop()
        text = "".join(f"{f.path}:\n" + "".join(_line(d) for d in f.definitions) for f in chosen)
    return RepoMap(tuple(chosen), text, count(text) if text else 0)


def _fill(
    queue: list[Definition],
    picked: list[Definition],
    used: int,
    budget: int,
    count: Callable[[str], int],
    limit: int | None,
) -> int:
    taken = 0
    while queue and (limit is None or taken < limit):
        cost = count(_line(queue[0]))
        if used + cost > budget:
            break
        picked.append(queue.pop(0))
        used += cost
        taken += 1
    return used


def _by_priority(definitions: Sequence[Definition], wanted: set[str]) -> list[Definition]:
    return sorted(
        definitions,
        key=lambda d: (d.name not in wanted, _KIND_ORDER.get(d.kind, 4), d.line, d.name),
    )


def _line(definition: Definition) -> str:
    return f"{definition.line:>5}│{definition.text}\n"
