"""From duplicate pairs to merge groups: connected components, biggest first.

Pairs come from an approximate scan, and near-duplication is not transitive (a ~ b and
b ~ c does not make a ~ c), so a group here is only a proposal: the writer picks the
survivor and merges only the members that are duplicates *of the survivor*
(``workers/store/dedup.merge_groups``). Whatever it leaves is proposed again next pass.
"""

from __future__ import annotations

from collections.abc import Iterable

from trusty_memory.common.messages import DuplicatePair


def group_pairs(pairs: Iterable[DuplicatePair]) -> list[list[str]]:
    """Connected components of the duplicate graph, each sorted, biggest group first."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    for pair in pairs:
        a, b = find(pair.a), find(pair.b)
        if a != b:
            parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for x in parent:
        groups.setdefault(find(x), []).append(x)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: (-len(g), g[0]))


def chunks(items: list, size: int) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
