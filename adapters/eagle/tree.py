"""Pure tensor helpers for EAGLE's draft tree (no model, no eagle import).

Vocabulary of eagle-llm 1.2.1's tree buffers, which these functions read:

* a tree of ``n`` nodes; node 0 is the root (the token the previous cycle decided);
* ``tree_indices[i]`` (``(n,)``): node i's token is ``flat[tree_indices[i]]`` where
  ``flat = [root] + head_topk_tokens.view(-1)``; so ``(tree_indices[i] - 1) // topk`` is the row
  of the head's expansion (its parent's distribution) and ``(tree_indices[i] - 1) % topk`` the
  node's rank among its siblings (rank 0: the head's top-1 when greedy, its first sample when
  sampling);
* ``retrieve`` (``(paths, depth + 1)``): node indices of each root-to-leaf path, padded with -1;
* ``tree_mask`` (``(n, n)``): 1 where a node may attend to another (itself and its ancestors);
* ``tree_positions`` (``(n,)``): each node's depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


def path_length(retrieve_row: torch.Tensor) -> int:
    """Number of drafts on a path (nodes other than the root, padding excluded)."""
    return int((retrieve_row >= 0).sum()) - 1


def first_child_chain(retrieve: torch.Tensor, tree_indices: torch.Tensor, topk: int) -> int:
    """Row of ``retrieve`` holding the longest path through rank-0 children only."""
    best, best_len = 0, -1
    for j in range(retrieve.shape[0]):
        g = path_length(retrieve[j])
        nodes = retrieve[j, 1 : g + 1]
        if bool((((tree_indices[nodes] - 1) % topk) == 0).all()) and g > best_len:
            best, best_len = j, g
    return best


def node_drafter_probs(
    tree_indices: torch.Tensor,
    topk_tokens: torch.Tensor,
    topk_values: torch.Tensor,
    full_probs: torch.Tensor | None,
    vocab: int,
    topk: int,
) -> torch.Tensor:
    """p at every node (row 0, the root, stays zero): the head's distribution at its parent.

    With ``full_probs`` (``(rows, V)``, eagle's warped distributions when sampling) the rows are
    exact. Without (greedy: eagle keeps only the top-k logits ``topk_values``) p is the softmax of
    those k logits spread over the k tokens: an upper bound of the true p(x) on them.
    """
    rows = (tree_indices[1:] - 1) // topk
    out = torch.zeros((tree_indices.shape[0], vocab), dtype=torch.float32)
    if full_probs is not None:
        out[1:] = full_probs.float()[rows]
    else:
        out[1:].scatter_(1, topk_tokens[rows], topk_values.float().softmax(-1)[rows])
    return out


def longest_gated_path(
    candidates: torch.Tensor,
    retrieve: torch.Tensor,
    u_paths: torch.Tensor,
    p_nodes: torch.Tensor,
    gate: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
) -> int:
    """The path whose leading run of drafts passing ``gate(tokens, p, u)`` is longest (first on
    ties, like eagle's own greedy choice). ``u_paths``: ``(paths, depth + 1, V)``. A path no longer
    than the best run so far is not asked about: it cannot win (the gate is asked about fewer paths,
    the choice is the same)."""
    best, best_len = 0, -1
    for j in range(candidates.shape[0]):
        g = path_length(retrieve[j])
        if g <= best_len:  # its run cannot be longer than the best one's: ties keep the first, so skip it
            continue
        passes = gate(candidates[j, 1 : g + 1], p_nodes[retrieve[j, 1 : g + 1]], u_paths[j, : g + 1]) > 0.5
        run = int(torch.cumprod(passes.int(), 0).sum())
        if run > best_len:
            best, best_len = j, run
    return best


@dataclass(frozen=True)
class SubTree:
    """Two root-to-leaf paths of the tree, merged, plus one extra token after the first path.

    ``nodes``: the tree nodes kept, in tree order; ``mask`` (``(k+1, k+1)``) and ``positions``
    (``(k+1,)``) feed eagle's tree attention; ``rows[i]`` lists, for path i, the rows of the fed
    block along it (path 0 ends with the extra token's row).
    """

    nodes: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor
    rows: tuple[list[int], list[int]]


def two_path_subtree(tree_mask: torch.Tensor, tree_positions: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> SubTree:
    """Restricts the tree to ``first`` and ``second`` (node indices, root first) and appends an
    extra leaf after ``first``. A node set closed under ancestors keeps the tree mask valid."""
    nodes = sorted(set(first.tolist()) | set(second.tolist()))
    where = {node: i for i, node in enumerate(nodes)}
    index = torch.tensor(nodes)
    size = len(nodes) + 1
    mask = torch.zeros(size, size, dtype=tree_mask.dtype)
    mask[:-1, :-1] = tree_mask[index][:, index]
    mask[-1, [where[n] for n in first.tolist()]] = 1
    mask[-1, -1] = 1
    positions = torch.cat([tree_positions[index], tree_positions[first[-1:]] + 1])
    rows = ([where[n] for n in first.tolist()] + [size - 1], [where[n] for n in second.tolist()])
    return SubTree(index, mask, positions, rows)


def greedy_accepted(fed_tokens: torch.Tensor, argmax: torch.Tensor, rows: list[int]) -> int:
    """How many tokens along ``rows`` (after the first) match the verifier's argmax at the row
    before them, stopping at the first miss."""
    along = fed_tokens[rows]
    matches = (along[1:] == argmax[rows[:-1]]).int()
    return int(torch.cumprod(matches, 0).sum())


__all__ = [
    "SubTree",
    "first_child_chain",
    "greedy_accepted",
    "longest_gated_path",
    "node_drafter_probs",
    "path_length",
    "two_path_subtree",
]
