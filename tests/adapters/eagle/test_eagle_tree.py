"""Pure helpers over EAGLE's draft tree, checked against eagle-llm's own tree buffers."""

from __future__ import annotations

import pytest
import torch

utils = pytest.importorskip("eagle.model.utils")

from viasd_adapt.adapters.eagle.tree import (  # noqa: E402
    first_child_chain,
    greedy_accepted,
    longest_gated_path,
    node_drafter_probs,
    path_length,
    two_path_subtree,
)

from eagle.model.choices import mc_sim_7b_63  # noqa: E402

BUFFERS = utils.generate_tree_buffers(mc_sim_7b_63, device="cpu")
RETRIEVE = BUFFERS["retrieve_indices"]
TREE_INDICES = BUFFERS["tree_indices"]
TREE_MASK = BUFFERS["tree_attn_mask"][0, 0]
POSITIONS = BUFFERS["tree_position_ids"]
SORTED = sorted(mc_sim_7b_63, key=lambda x: (len(x), x))


def _choice(node: int) -> list[int]:
    return SORTED[node - 1]


def test_first_child_chain_is_the_all_zero_path():
    j = first_child_chain(RETRIEVE, TREE_INDICES, utils.TOPK)
    g = path_length(RETRIEVE[j])
    assert g == max(len(c) for c in mc_sim_7b_63 if set(c) == {0})
    assert all(set(_choice(int(n))) == {0} for n in RETRIEVE[j, 1 : g + 1])


def test_two_path_subtree_keeps_ancestry_and_adds_an_extra_leaf():
    chain = RETRIEVE[first_child_chain(RETRIEVE, TREE_INDICES, utils.TOPK)]
    other = next(r for r in RETRIEVE if path_length(r) >= 2 and r[1] != chain[1])
    first, second = other[: path_length(other) + 1], chain[: path_length(chain) + 1]
    sub = two_path_subtree(TREE_MASK, POSITIONS, first, second)
    k = sub.nodes.numel()
    assert k == len(set(first.tolist()) | set(second.tolist()))
    # each kept node attends exactly to its kept ancestors and itself, as in the full tree
    assert torch.equal(sub.mask[:k, :k], TREE_MASK[sub.nodes][:, sub.nodes])
    assert sub.mask[-1].sum() == first.numel() + 1 and sub.positions[-1] == POSITIONS[first[-1]] + 1
    assert [int(sub.nodes[r]) for r in sub.rows[1]] == second.tolist()
    assert sub.rows[0][-1] == k


def test_greedy_accepted_stops_at_the_first_miss():
    fed = torch.tensor([5, 1, 2, 3, 4])
    argmax = torch.tensor([1, 2, 9, 4, 0])
    assert greedy_accepted(fed, argmax, [0, 1, 2, 3]) == 2
    assert greedy_accepted(fed, argmax, [0, 1]) == 1
    assert greedy_accepted(fed, torch.zeros(5, dtype=torch.long), [0, 1, 2]) == 0


def test_node_drafter_probs_greedy_and_sampling():
    rows = int(((TREE_INDICES - 1) // utils.TOPK).max()) + 1
    vocab = 40
    tokens = torch.stack([torch.randperm(vocab)[: utils.TOPK] for _ in range(rows)])
    values = torch.randn(rows, utils.TOPK)
    greedy = node_drafter_probs(TREE_INDICES, tokens, values, None, vocab, utils.TOPK)
    assert torch.allclose(greedy[1:].sum(-1), torch.ones(TREE_INDICES.numel() - 1))
    node = 1  # first child of the root: row 0 of the head's expansions
    assert torch.allclose(greedy[node, tokens[0]], values[0].softmax(-1))
    full = torch.rand(rows, vocab).softmax(-1)
    sampled = node_drafter_probs(TREE_INDICES, tokens, values, full, vocab, utils.TOPK)
    assert torch.equal(sampled[node], full[0]) and sampled[0].sum() == 0


def test_longest_gated_path_prefers_the_longest_passing_run():
    candidates = torch.tensor([[0, 1, 2, -1], [0, 1, 3, 4], [0, 5, 6, 7]])
    retrieve = torch.tensor([[0, 1, 2, -1], [0, 1, 3, 4], [0, 5, 6, 7]])
    allowed = {1, 3, 4}
    gate = lambda tokens, p, u: torch.tensor([float(int(t) in allowed) for t in tokens])
    u = torch.zeros(3, 4, 2)
    p = torch.zeros(8, 2)
    assert longest_gated_path(candidates, retrieve, u, p, gate) == 1


def test_longest_gated_path_asks_only_about_paths_that_could_win_and_chooses_the_same():
    """A path no longer than the best run so far cannot win (ties keep the first): the gate is not
    asked about it, and the path chosen is the one an exhaustive search chooses, on random trees."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        paths, depth = 6, 5
        lengths = torch.randint(1, depth + 1, (paths,), generator=generator)
        retrieve = torch.full((paths, depth + 1), -1)
        candidates = torch.full((paths, depth + 1), -1)
        for j, g in enumerate(lengths.tolist()):
            retrieve[j, : g + 1] = torch.arange(g + 1) + 10 * j
            candidates[j, : g + 1] = torch.randint(0, 4, (g + 1,), generator=generator)
        asked = []

        def gate(tokens, p, u):
            asked.append(len(tokens))
            return (tokens < 3).float()

        chosen = longest_gated_path(candidates, retrieve, torch.zeros(paths, depth + 1, 2), torch.zeros(70, 2), gate)
        runs = [int(torch.cumprod((candidates[j, 1 : g + 1] < 3).int(), 0).sum()) for j, g in enumerate(lengths.tolist())]
        assert chosen == runs.index(max(runs))  # the first of the longest runs, as asking about every path finds
        assert len(asked) <= paths
    # the control: with every draft passing, only paths longer than the first are asked about
    candidates = torch.tensor([[0, 1, 1, 1], [0, 1, 1, -1], [0, 1, 1, 1]])
    retrieve = torch.tensor([[0, 1, 2, 3], [0, 4, 5, -1], [0, 6, 7, 8]])
    asked = []
    chosen = longest_gated_path(candidates, retrieve, torch.zeros(3, 4, 2), torch.zeros(9, 2),
                                lambda tokens, p, u: asked.append(len(tokens)) or torch.ones(len(tokens)))
    assert chosen == 0 and asked == [3]
