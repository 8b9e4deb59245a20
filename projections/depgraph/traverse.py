"""Walks over a dependency adjacency (file -> the files it depends on).

Deterministic throughout: neighbours are visited in sorted order and ties are broken by path.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping

from projections.depgraph.model import Reached

Adjacency = Mapping[str, Collection[str]]


def reach(adjacency: Adjacency, start: str, max_depth: int | None) -> tuple[Reached, ...]:
    """Files reachable from ``start`` (not counting itself), each at its shortest depth."""
    seen = {start: 0}
    frontier = [start]
    depth = 0
    while frontier and (max_depth is None or depth < max_depth):
        depth += 1
        nxt = []
        for node in frontier:
            for target in adjacency.get(node, ()):
                if target not in seen:
                    seen[target] = depth
                    nxt.append(target)
        frontier = nxt
    del seen[start]
    return tuple(sorted(Reached(d, p) for p, d in seen.items()))


def strongly_connected(adjacency: Adjacency, nodes: Iterable[str]) -> list[tuple[str, ...]]:
    """Tarjan's components (iterative, so deep import chains cannot hit the recursion limit),
    each sorted; components come out dependencies first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[tuple[str, ...]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(adjacency.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for nxt in children:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(adjacency.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(tuple(sorted(component)))
    return out


def dependency_order(adjacency: Adjacency, nodes: Iterable[str]) -> list[tuple[str, ...]]:
    """Components in an order where every component comes after all it depends on; among the
    ready ones, the one with the smallest path goes first (so the order is canonical)."""
    all_nodes = set(nodes)
    components = strongly_connected(adjacency, all_nodes)
    owner = {member: i for i, comp in enumerate(components) for member in comp}
    needs: list[set[int]] = [set() for _ in components]
    users: list[set[int]] = [set() for _ in components]
    for i, comp in enumerate(components):
        for member in comp:
            for target in adjacency.get(member, ()):
                j = owner.get(target)
                if j is not None and j != i:
                    needs[i].add(j)
                    users[j].add(i)
    remaining = [len(n) for n in needs]
    ready = [(comp[0], i) for i, comp in enumerate(components) if remaining[i] == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, i = heapq.heappop(ready)
        ordered.append(components[i])
        for j in users[i]:
            remaining[j] -= 1
            if remaining[j] == 0:
                heapq.heappush(ready, (components[j][0], j))
    return ordered
