"""Guided DIMR (probes, warm starts, swap trust region, GP) on constructed costs with a known
optimum, and the calibration window cache."""

from __future__ import annotations

import itertools

import pytest
import torch

from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.cache_check import CacheEntryWarning
from viasd_adapt.search.decoder_windows import WindowCache, build_calibration, window_cache_path
from viasd_adapt.search.candidates import BudgetSpace, FixedCountSpace, bits_from_skipped
from viasd_adapt.search.config import GuidedConfig, SearchConfig
from viasd_adapt.search.dimr import dimr_search
from viasd_adapt.search.guided import PROBE, default_steps, guided_search, structured_starts
from viasd_adapt.search.objective import MaskObjective, escalation_rate
from viasd_adapt.core.rules import BUILTIN_RULES
from viasd_adapt.core.settings import TierSettings


def dimr(**changes) -> SearchConfig:
    """A DIMR search's config (the strategy's schedule: steps, bo_every, patience, seed)."""
    return SearchConfig(strategy="dimr", **changes)


def planted_cost(num_layers: int, optimum: tuple[int, ...], seed: int = 0):
    """A cost shaped like the real one: every layer matters (importance grows towards both ends,
    with noise), skipping neighbours compounds (a superadditive exponential), and the planted
    skip set ``optimum`` is strictly the cheapest mask of its size (its layers are made the least
    important and none are adjacent, so it minimises both terms: the proof is
    ``test_planted_optimum_is_the_exact_minimum``)."""
    g = torch.Generator().manual_seed(seed)
    positions = torch.linspace(-1, 1, num_layers)
    importance = 0.6 + positions.abs() * 1.5 + torch.rand(num_layers, generator=g) * 0.8
    for i in optimum:
        importance[i] = 0.15 + 0.05 * torch.rand(1, generator=g).item()
    adjacent = 0.25

    def cost(bits) -> float:
        skipped = [i for i, b in enumerate(bits) if b == 0]
        pairs = sum(1 for a, b in zip(skipped, skipped[1:]) if b == a + 1)
        return float(torch.exp(importance[skipped].sum() * 0.9 + adjacent * pairs).item() * 100)

    cost.importance = importance
    return cost


def guided_config(steps: int, seed: int, **parts) -> SearchConfig:
    """A guided search of ``steps`` evaluations without patience, its ingredients and internals ``parts``."""
    return SearchConfig(steps=steps, seed=seed, patience=0, guided=GuidedConfig(**parts))


L, K = 24, 6
OPTIMUM = (3, 7, 11, 14, 18, 21)  # non-adjacent, scattered: no structured start is it


def test_planted_optimum_is_the_exact_minimum():
    """The cost is increasing in the skipped layers' summed importance and in adjacent skipped pairs
    (>= 0). OPTIMUM holds the K least important layers, strictly, and no adjacent pair, so it
    minimises both terms and every other K-subset has a larger importance sum."""
    cost = planted_cost(L, OPTIMUM)
    order = torch.argsort(cost.importance).tolist()
    assert set(order[:K]) == set(OPTIMUM)
    assert cost.importance[order[K - 1]] < cost.importance[order[K]]
    assert all(b - a > 1 for a, b in zip(OPTIMUM, OPTIMUM[1:]))


def test_guided_search_reaches_the_planted_optimum_where_random_search_does_not():
    """Budget 60 evaluations (24 probes + 36 searched masks) on C(24, 6) = 134,596 masks."""
    cost = planted_cost(L, OPTIMUM)
    space = FixedCountSpace(L, K)
    optimum = cost(bits_from_skipped(L, OPTIMUM))
    budget = 60
    for seed in (0, 1):
        guided = guided_search(cost, space, guided_config(steps=budget, seed=seed, fit_maxiter=30, refit_every=4))
        randomised = dimr_search(cost, space, dimr(steps=budget, bo_every=0, patience=0, seed=seed))
        assert guided.evaluations == budget == randomised.evaluations
        assert guided.best.cost == pytest.approx(optimum)  # the exact optimum
        assert randomised.best.cost > 1.5 * optimum  # random search is far from it
        assert sum(e.kind == PROBE for e in guided.history) == L
        assert all(space.contains(e.bits) for e in guided.history if e.kind != PROBE)
        assert len({e.bits for e in guided.history}) == guided.evaluations  # nothing evaluated twice


def test_guided_search_is_reproducible_and_every_ingredient_runs_alone():
    cost = planted_cost(12, (2, 5, 8))
    space = FixedCountSpace(12, 3)
    first = guided_search(cost, space, guided_config(steps=30, seed=4, fit_maxiter=30))
    second = guided_search(cost, space, guided_config(steps=30, seed=4, fit_maxiter=30))
    assert [e.bits for e in first.history] == [e.bits for e in second.history]
    for flags in (dict(warm=False, local=False, gp=False), dict(probe=False, local=False, gp=False),
                  dict(probe=False, warm=False, gp=False), dict(probe=False, warm=False, local=False)):
        result = guided_search(cost, space, guided_config(steps=18, seed=0, fit_maxiter=20, **flags))
        assert result.evaluations == 18 and space.contains(result.best.bits)
        assert (result.extras["probe_evaluations"] == 12) == flags.get("probe", True)
    assert default_steps(30) == 90 and default_steps(16) == 55


def test_structured_starts_are_valid_and_sensitivity_first():
    space = FixedCountSpace(10, 3)
    sens = [5, 4, 1, 9, 1, 8, 1, 7, 6, 9]
    starts = structured_starts(space, sens)
    assert starts[0] == bits_from_skipped(10, (2, 4, 6))  # the three least sensitive layers
    assert bits_from_skipped(10, (7, 8, 9)) in starts  # early exit
    assert all(space.contains(b) for b in starts) and len(set(starts)) == len(starts)
    budget = BudgetSpace(10, 6.0, escalation=0.25)
    assert all(budget.contains(b) for b in structured_starts(budget, sens))


def test_budget_space_cycle_price_includes_escalation():
    space = BudgetSpace(8, 5.0, escalation=0.5)
    early_exit = (1, 1, 1, 0, 0, 0, 0, 0)  # slim 3 layers, q resumes at 3: 3 + 0.5 * 5 = 5.5
    assert space.cycle_price(early_exit) == 5.5 and not space.contains(early_exit)
    assert space.contains((1, 1, 0, 0, 0, 0, 0, 0))  # 2 + 0.5 * 6 = 5
    late = (1, 1, 1, 1, 1, 1, 1, 0)  # the marginal price calls this free; a cycle pays 7 + 0.5
    assert BudgetSpace(8, 2).contains(late) and not space.contains(late)
    members = set(space.enumerate())
    brute = {b for b in itertools.product((0, 1), repeat=8) if b[0] == 1 and 0 in b and space.cycle_price(b) <= 5.0}
    assert members == brute and space.size() == len(brute)
    g = torch.Generator().manual_seed(0)
    assert all(space.contains(space.random(g)) for _ in range(100))
    result = guided_search(lambda b: float(sum(b)) + b.index(0), space, guided_config(steps=25, seed=0, fit_maxiter=30))
    assert all(space.contains(e.bits) for e in result.history if e.in_space) and space.contains(result.best.bits)


# ----------------------------------------------------------------------------- models


VOCAB = 96


def _prompts(n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(VOCAB, (8 + i,), generator=g).tolist() for i in range(n)]


@pytest.fixture(scope="module", params=["qwen2", "gpt2"])
def pair(request):
    return tiny_model(request.param, seed=0, num_layers=6), tiny_model(request.param, seed=1, num_layers=1)


def test_prefix_states_score_exactly_like_the_plain_slim_forward(pair):
    target, draft = pair
    calibration = build_calibration(target, draft, _prompts(3, 0), new_tokens=4)
    plain, cached = MaskObjective(target, calibration, prefix=False), MaskObjective(target, calibration)
    assert cached.prefix is not None
    for skipped in ((0,), (2, 3), (4, 5), (5,), (1, 4)):
        mask = RoutingMask.from_bits(bits_from_skipped(6, skipped))
        a, b = plain.score(mask), cached.score(mask)
        assert b.cost == pytest.approx(a.cost, rel=1e-5, abs=1e-4) and b.agreement == a.agreement
        assert 0.0 <= b.escalation <= 1.0


def test_escalation_rate_counts_cycles():
    # u agrees with p everywhere and is confident: no cycle escalates
    logp = torch.log_softmax(torch.tensor([[8.0, 0, 0]] * 10), -1)
    assert escalation_rate(logp, logp, TierSettings()) == 0.0
    # u is flat (never confident) and rejects p's token everywhere: every cycle escalates at once
    flat = torch.log_softmax(torch.zeros(10, 3), -1)
    assert escalation_rate(flat, logp, TierSettings()) == 1.0


def test_escalation_rate_holds_a_bounded_share_of_a_large_vocabulary_with_the_same_estimate(monkeypatch):
    """The rules see a few positions at a time (fewer, the larger the vocabulary); the estimate is the same."""
    import viasd_adapt.search.objective as objective

    g = torch.Generator().manual_seed(5)
    slim = torch.log_softmax(torch.randn(40, 7, generator=g) * 3, -1)
    draft = torch.log_softmax(torch.randn(40, 7, generator=g) * 3, -1)
    whole = escalation_rate(slim, draft, TierSettings())
    seen = []

    class Counting:  # the built-in rules, counting the positions each call is shown
        def __getattr__(self, name):
            return getattr(BUILTIN_RULES, name)

        def viasd_slim_confidence(self, **kwargs):
            seen.append(kwargs["u"].shape[0])
            return BUILTIN_RULES.viasd_slim_confidence(**kwargs)

    monkeypatch.setattr(objective, "RULE_CHUNK_ELEMENTS", 3 * 7)
    assert escalation_rate(slim, draft, TierSettings(), rules=Counting()) == whole and 0.0 < whole < 1.0
    assert max(seen) == 3 and sum(seen) == 40


def test_escalation_rate_asks_the_rules_as_a_greedy_cycle_does():
    """Gate 1 and the router come from the rules: greedy_gates and plugins count here as in decoding."""
    from viasd_adapt.core.hooks import hook_rules, hookimpl, make_plugin_manager

    # p proposes token 0 (0.4); u gives it 0.28 and prefers token 1 (0.62): gate 1 passes it in the
    # paper's reading (0.28 >= 0.5 * 0.4) but not in the top reading (0.28 < 0.5 * 0.62)
    p = torch.log(torch.tensor([[0.4, 0.3, 0.3]] * 10))
    u = torch.log(torch.tensor([[0.28, 0.62, 0.1]] * 10))
    unsure = TierSettings(gamma=5)  # the router wants max u >= 0.7
    assert escalation_rate(u, p, unsure) == 1.0  # two whole blocks, each escalating at its last position
    assert escalation_rate(u, p, unsure.with_(greedy_gates="top")) == 1.0  # ten cycles, each rejected at once
    confident = TierSettings(gamma=5, alpha2=0.45)  # the router trusts u at 0.55
    assert escalation_rate(u, p, confident) == 0.0
    assert escalation_rate(u, p, confident.with_(greedy_gates="top")) == 0.0

    class NeverTrustSlim:
        @hookimpl
        def viasd_slim_resolves(self, confidence, settings):
            return torch.zeros_like(confidence, dtype=torch.bool)

    class RejectAll:
        def __init__(self):
            self.positions = 0

        @hookimpl
        def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
            assert greedy
            self.positions += tokens.shape[0]
            return torch.zeros(tokens.shape[0])

    assert escalation_rate(u, p, confident, rules=hook_rules(make_plugin_manager([NeverTrustSlim()], load_entrypoints=False))) == 1.0
    rejecting = RejectAll()
    rules = hook_rules(make_plugin_manager([rejecting], load_entrypoints=False))
    # every position a rejection the router resolves: ten cycles, none escalating; gate 1 asked once per position
    assert escalation_rate(u, p, confident, rules=rules) == 0.0 and rejecting.positions == 10


def test_escalation_rate_counts_cycles_of_the_top_reading():
    """greedy_gates changes the cycles walked: the top reading rejects where the paper's passes."""
    p = torch.log(torch.tensor([[0.4, 0.3, 0.3]] * 12))
    u = torch.log(torch.tensor([[0.28, 0.62, 0.1]] * 11 + [[0.1, 0.1, 0.8]]))
    # proposer: blocks 0-4 and 6-10 pass, their bonus rows (5 and 11) decide: 5 is unsure, 11 sure
    assert escalation_rate(u, p, TierSettings(gamma=5, alpha2=0.3)) == 0.5
    # top: every one of positions 0-10 is rejected at once (11 cycles, 11 unsure), and 11 is confident
    assert escalation_rate(u, p, TierSettings(gamma=5, alpha2=0.3, greedy_gates="top")) == 11 / 12


def test_window_cache_hits_and_is_invalidated_by_target_prompts_and_settings(tmp_path):
    target = tiny_model("qwen2", seed=0, num_layers=2)
    path = window_cache_path(tmp_path / "mask.json")
    assert path.name == "mask.windows.pt"
    prompts = _prompts(2, 0)

    first = WindowCache(path)
    windows = first.windows(target, prompts, 4)
    first.save()
    assert (first.hits, first.misses) == (0, 1)

    again = WindowCache(path)
    cached = again.windows(target, prompts, 4)
    assert (again.hits, again.misses) == (1, 0)
    assert torch.equal(cached.input_ids, windows.input_ids) and torch.equal(cached.scored, windows.scored)

    def misses(model, ids, new_tokens, pad_id=0):
        cache = WindowCache(path)
        cache.windows(model, ids, new_tokens, pad_id)
        return cache.misses

    assert misses(target, _prompts(2, 1), 4) == 1  # other prompts
    assert misses(target, [p[:-1] for p in prompts], 4) == 1  # the same prompts cut shorter (a template, a cut)
    assert misses(target, prompts, 5) == 1  # another number of new tokens
    assert misses(target, prompts, 4, pad_id=1) == 1  # another pad id
    assert misses(tiny_model("qwen2", seed=1, num_layers=2), prompts, 4) == 1  # another target
    changed = tiny_model("qwen2", seed=0, num_layers=2)
    with torch.no_grad():  # the same target with one weight moved (a fine-tune the fingerprint sketch can miss)
        next(p for n, p in changed.named_parameters() if "mlp" in n).view(-1)[7] += 1e-3
    assert misses(changed, prompts, 4) == 1
    assert misses(target, prompts, 4) == 0  # and the original still hits
    path.write_bytes(b"not a torch file")  # a damaged cache is a miss, not an error, and says so
    with pytest.warns(CacheEntryWarning, match=r"window cache .* is unusable \(it cannot be read .*\); regenerating it"):
        assert misses(target, prompts, 4) == 1
