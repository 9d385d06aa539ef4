"""DIMR search loop and candidate generators on constructed objectives (no models: fast)."""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch

from viasd_adapt.errors import ConfigError
from viasd_adapt.config.mask import skip_count
from viasd_adapt.search.candidates import (
    all_masks,
    one_swaps,
    random_swaps,
    random_unseen,
    space_size,
)
from viasd_adapt.search.candidates import BudgetSpace, FixedCountSpace, check_cardinality
from viasd_adapt.search.config import SearchConfig
from viasd_adapt.search.dimr import BO, RANDOM, dimr_search, random_masks


def dimr(**changes) -> SearchConfig:
    """A DIMR search's config (the strategy's schedule: steps, bo_every, patience, seed)."""
    return SearchConfig(strategy="dimr", **changes)


def layered_cost(num_layers: int, seed: int = 0):
    """A constructed cost with a U-shaped layer importance (ends matter most) and pair interactions,
    as real mask costs have. Deterministic in ``bits``."""
    g = torch.Generator().manual_seed(seed)
    positions = torch.linspace(-1, 1, num_layers)
    importance = (positions**2) * 3 + torch.rand(num_layers, generator=g)
    interaction = torch.randn(num_layers, num_layers, generator=g) * 0.15
    interaction = (interaction + interaction.T) / 2

    def cost(bits) -> float:
        skipped = torch.tensor([1.0 - b for b in bits])
        return float(skipped @ importance + skipped @ interaction @ skipped)

    return cost


def test_candidates_keep_cardinality_and_dedup():
    bits = (1, 0, 1, 0, 0, 1, 1, 1)
    swaps = one_swaps(bits)
    assert len(swaps) == 3 * 5 and len(set(swaps)) == 15
    assert all(sum(1 for b in s if b == 0) == 3 for s in swaps)
    assert all(sum(x != y for x, y in zip(s, bits)) == 2 for s in swaps)
    g = torch.Generator().manual_seed(0)
    two = random_swaps(bits, 2, 20, g)
    assert all(sum(1 for b in s if b == 0) == 3 and sum(x != y for x, y in zip(s, bits)) == 4 for s in two)
    # a small space fills up exactly, then says so
    seen: set = set()
    for _ in range(space_size(5, 2)):
        new = random_unseen(5, 2, seen, g)
        assert new is not None and new not in seen
        seen.add(new)
    assert seen == set(all_masks(5, 2))
    assert random_unseen(5, 2, seen, g) is None


def test_every_mask_has_k_skips_no_duplicates_and_bo_every_theta():
    cost = layered_cost(12)
    result = dimr_search(cost, FixedCountSpace(12, 5), dimr(steps=30, bo_every=4, patience=0, seed=3))
    assert result.evaluations == 30 and result.stop_reason == "steps"
    masks = [e.bits for e in result.history]
    assert len(set(masks)) == len(masks)
    assert all(len(m) == 12 and m.count(0) == 5 for m in masks)
    kinds = [e.kind for e in result.history]
    assert kinds == [BO if step % 4 == 0 else RANDOM for step in range(1, 31)]
    assert [e.cost for e in result.history] == [cost(m) for m in masks]
    assert result.best.cost == min(e.cost for e in result.history)
    curve = result.best_curve()
    assert all(a >= b for a, b in zip(curve, curve[1:]))


def test_same_seed_same_search_different_seed_different_search():
    cost = layered_cost(10)
    settings = dimr(steps=15, bo_every=3, patience=0, seed=11)
    first = dimr_search(cost, FixedCountSpace(10, 4), settings)
    second = dimr_search(cost, FixedCountSpace(10, 4), settings)
    other = dimr_search(cost, FixedCountSpace(10, 4), dimr(steps=15, bo_every=3, patience=0, seed=12))
    assert [e.bits for e in first.history] == [e.bits for e in second.history]
    assert [e.bits for e in first.history] != [e.bits for e in other.history]


def test_random_only_has_no_bo_steps():
    result = dimr_search(layered_cost(8), FixedCountSpace(8, 3), dimr(steps=10, bo_every=0, patience=0))
    assert {e.kind for e in result.history} == {RANDOM}


def test_small_space_is_exhausted_not_repeated():
    result = dimr_search(layered_cost(5), FixedCountSpace(5, 2), dimr(steps=40, bo_every=3, patience=0))
    assert result.stop_reason == "exhausted"
    assert sorted(e.bits for e in result.history) == sorted(all_masks(5, 2))
    # the exhaustive search must then hold the exact optimum
    assert result.best.cost == min(layered_cost(5)(m) for m in all_masks(5, 2))


def test_patience_stops_early():
    calls = []

    def flat(bits):
        calls.append(bits)
        return 1.0  # never improves after the first mask

    result = dimr_search(flat, FixedCountSpace(10, 4), dimr(steps=50, bo_every=0, patience=6))
    assert result.stop_reason == "patience"
    assert result.evaluations == 7 == len(calls)


def test_search_beats_median_random_on_constructed_case():
    num_layers, k = 14, 6
    cost = layered_cost(num_layers, seed=5)
    every = sorted(cost(m) for m in all_masks(num_layers, k))
    result = dimr_search(cost, FixedCountSpace(num_layers, k), dimr(steps=50, bo_every=5, patience=0, seed=0))
    random_costs = [cost(m) for m in random_masks(FixedCountSpace(num_layers, k), 20, seed=1)]
    assert result.best.cost <= statistics.median(random_costs)
    # and it is in the best 1% of all 3003 masks, which 50 blind draws reach only ~40% of the time
    assert result.best.cost <= every[len(every) // 100]


def test_bad_cardinalities_are_clear_errors():
    with pytest.raises(ConfigError, match="at least one layer"):
        check_cardinality(6, 0)
    with pytest.raises(ConfigError, match="at least one layer must remain"):
        check_cardinality(6, 6)
    with pytest.raises(ConfigError, match=r"\(0, 1\)"):
        skip_count(6, 1.2)
    with pytest.raises(ConfigError, match=r"\(0, 1\)"):
        skip_count(6, 0.0)
    with pytest.raises(ConfigError, match="at least one layer must remain"):
        skip_count(6, 0.95)
    with pytest.raises(ConfigError, match="steps must be >= 0"):
        dimr(steps=-1)


def test_all_masks_enumeration_is_complete():
    assert len(set(all_masks(7, 3))) == 35 == len(list(itertools.combinations(range(7), 3)))


def test_bo_leaves_global_rng_alone_and_a_failed_fit_falls_back_to_random(monkeypatch):
    state = torch.get_rng_state()
    dimr_search(layered_cost(8), FixedCountSpace(8, 3), dimr(steps=6, bo_every=3, patience=0))
    assert torch.equal(state, torch.get_rng_state())

    import viasd_adapt.search.dimr as dimr_module

    def broken(*args, **kwargs):
        raise RuntimeError("cholesky failed")

    with monkeypatch.context() as patch:
        patch.setattr(dimr_module, "propose_bo", broken)
        result = dimr_search(layered_cost(8), FixedCountSpace(8, 3), dimr(steps=6, bo_every=3, patience=0))
    assert {e.kind for e in result.history} == {RANDOM} and result.evaluations == 6
    assert len(result.extras["bo_failures"]) == 2 and "cholesky" in result.extras["bo_failures"][0]


def test_budget_space_holds_exactly_the_masks_within_their_shared_prefix_cost():
    from viasd_adapt.search.candidates import marginal_layers, neighbours

    space = BudgetSpace(8, 2)
    members = set(space.enumerate())
    brute = {bits for bits in itertools.product((0, 1), repeat=8)
             if bits[0] == 1 and 0 in bits and marginal_layers(bits) <= 2}
    assert members == brute and space.size() == len(brute)
    assert marginal_layers((1, 1, 0, 1, 0, 1, 1, 0)) == 3  # s1 = 2; layers 3, 5, 6 retained after it
    generator = torch.Generator().manual_seed(0)
    draws = [space.random(generator) for _ in range(200)]
    assert all(space.contains(b) for b in draws)
    assert {b.index(0) for b in draws} == set(range(1, 8))  # every s1 is drawn, late ones too
    for bits in draws[:20]:
        assert all(space.contains(n) for n in neighbours(bits, space)) and neighbours(bits, space)


def test_dimr_searches_the_budget_space_with_bo():
    """A constructed objective that prefers late first-skipped layers and few skips: the search must
    find the optimum of the budget space, which no fixed-count space contains."""
    space = BudgetSpace(10, 2)

    def cost(bits):
        s1 = bits.index(0)
        return 10.0 - s1 + 0.5 * bits.count(0) + 0.1 * sum(i * (1 - b) for i, b in enumerate(bits))

    best = min(space.enumerate(), key=cost)
    result = dimr_search(cost, space, dimr(steps=60, bo_every=3, patience=0, seed=1))
    assert all(space.contains(e.bits) for e in result.history)
    assert len({e.bits for e in result.history}) == result.evaluations  # never twice
    assert BO in {e.kind for e in result.history}
    assert result.best.cost <= cost(best) + 0.5
