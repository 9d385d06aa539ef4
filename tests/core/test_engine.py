"""CachedRunner and the engine loop (``speculative_generate``): what is particular to it.

The concerns every framework shares (greedy identity, the sampling distribution, the mode
invariants, errors, scopes) are in tests/conformance/, run on the engine too. Here: the cached
runner against plain forwards, the budget's effect on the prefill and the blocks, the exact pass
counts of each mode's cycle structure, reuse of a verifier, q catching up on u's tokens in one
forward, and the engine's own argument checks (custom drafters, settings types).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from viasd_adapt.core.monitor import ViasdQualityWarning
from viasd_adapt.engine.drafters import ModelDrafter
from tests.support.verifiers import tiered_verifier
from viasd_adapt.engine.loop import speculative_generate
from tests.support.frameworks import Recorder
from tests.support.pairs import sharpened_model
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.core.hooks import make_plugin_manager
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.routing.runner import CachedRunner
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier


LAYERS = 6
PROMPT = [5, 17, 33, 2, 9]
GREEDY = SamplingConfig()


def make(target, mode="lossy", gamma=4, sampling=GREEDY, plugins=(), **settings):
    """A drafter that is the target with layers 2-4 skipped, and a verifier whose u skips 3-4."""
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [2, 3, 4])).model, sampling)
    slim = SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [3, 4])) if mode != "none" else None
    verifier = tiered_verifier(
        target, TierSettings(mode=mode, gamma=gamma, **settings), sampling, slim=slim,
        plugin_manager=make_plugin_manager(list(plugins), load_entrypoints=False),
    )
    return drafter, verifier


# ============================================================================== CachedRunner


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2"])
def test_cached_runner_matches_full_forward_under_random_crops_and_edits(family):
    model = tiny_model(family, seed=1, num_layers=LAYERS)
    gen = torch.Generator().manual_seed(0)
    base = torch.randint(0, 96, (48,), generator=gen).tolist()
    runner = CachedRunner(model)
    sequence = base[:3]
    for step in range(25):
        action = int(torch.randint(0, 3, (1,), generator=gen))
        if action == 0 and len(sequence) > 4:  # roll back some tokens (rejected drafts)
            sequence = sequence[: len(sequence) - int(torch.randint(1, 4, (1,), generator=gen))]
        elif action == 1 and len(sequence) > 2:  # replace the last token (a correction)
            sequence = sequence[:-1] + [int(torch.randint(0, 96, (1,), generator=gen))]
        sequence = sequence + torch.randint(0, 96, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen).tolist()
        sequence = sequence[:48]
        tail = int(torch.randint(1, min(len(sequence), 6) + 1, (1,), generator=gen))
        expected = model(torch.tensor([sequence])).logits[0, -tail:]
        torch.testing.assert_close(runner.logits_for(sequence, tail), expected, rtol=0, atol=1e-5)
    assert runner.passes == 25
    assert runner.fed == sequence


def test_cached_runner_rollback_and_bad_arguments():
    model = tiny_model("llama", seed=2, num_layers=2)
    runner = CachedRunner(model)
    seq = list(range(10, 30))
    runner.logits_for(seq, 1)
    runner.rollback(12)
    assert runner.fed == seq[:12] and runner.cache.get_seq_length() == 12
    torch.testing.assert_close(runner.logits_for(seq, 3), model(torch.tensor([seq])).logits[0, -3:], rtol=0, atol=1e-5)
    with pytest.raises(ConfigError, match="empty"):
        runner.logits_for([], 1)
    with pytest.raises(ValueError, match="n_tail"):
        runner.logits_for(seq, 0)
    with pytest.raises(ValueError, match="n_tail"):
        runner.logits_for(seq, len(seq) + 1)
    assert runner.cache_bytes() > 0


# ============================================================================== budgets and pass counts


@pytest.fixture(scope="module", params=["llama", "gemma2", "gpt2", "gpt_neox"])
def target(request):
    return sharpened_model(request.param, 30.0, num_layers=LAYERS)


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_blocks_shrink_to_the_budget_and_a_budget_of_one_is_the_prefill_alone(mode):
    target = sharpened_model("llama", 30.0, seed=5, num_layers=LAYERS)
    for n in (1, 2, 5, 17):
        for gamma in (1, 3, 8):
            drafter, verifier = make(target, mode, gamma=gamma)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = speculative_generate(drafter, verifier, PROMPT, n)
            # this tiny random drafter is junk to the sharpened target, and lossy may say so (test_monitor.py)
            assert all(issubclass(w.category, ViasdQualityWarning) and mode == "lossy" for w in caught), caught
            assert len(out.tokens) == len(out.tiers) == out.metrics.committed == n
            assert sum(out.metrics.accepted_lengths) == n
            if n == 1:  # the prefill alone fills the budget: nothing is drafted
                assert out.metrics.drafted == drafter.passes == 0 and out.metrics.cycles == 1


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_pass_counts_follow_each_modes_cycle_structure(target, mode):
    """The first cycle is q's prefill; then u runs once per drafting cycle in the tiered modes, q once
    per cycle except in lossy (only on escalation), and only lossless lets u commit several tokens.
    Each mode's own structure: the tier on every cycle (the adaptive tier's is test_adaptive_step.py's)."""
    log = Recorder()
    drafter, verifier = make(target, mode, plugins=[log], adaptive=False)
    out = speculative_generate(drafter, verifier, PROMPT, 40)
    m = out.metrics
    assert m.committed == 40 and len(m.accepted_lengths) == m.cycles == len(log.results)
    assert m.draft_passes == drafter.passes == m.drafted  # one drafter forward per drafted token
    drafting_cycles = m.cycles - 1
    escalated_cycles = sum(1 for c in log.results if c.escalated)
    if mode == "none":
        assert (m.full_passes, m.slim_passes, m.slim_tokens) == (m.cycles, 0, 0)
    elif mode == "lossless":
        assert (m.full_passes, m.slim_passes) == (m.cycles, drafting_cycles)
    elif mode == "lossy":
        assert m.slim_passes == drafting_cycles
        assert m.full_passes == 1 + escalated_cycles
        # Every other cycle ends with exactly one slim token (the last one may be cut by the budget).
        assert drafting_cycles - escalated_cycles - 1 <= m.slim_tokens <= drafting_cycles - escalated_cycles
    else:
        assert (m.full_passes, m.slim_passes) == (m.cycles, drafting_cycles)
        assert m.audited == 40 - 1  # every token a tier decided (the prefill token is q's own)
    for cycle in log.results[1:]:
        assert cycle.tiers.count(Tier.SLIM) <= (1 if mode != "lossless" else len(cycle.tokens))


def test_a_reused_verifier_reports_each_generation_on_its_own():
    target = sharpened_model("llama", 30.0, num_layers=LAYERS)
    drafter, verifier = make(target, "lossy")
    first = speculative_generate(drafter, verifier, PROMPT, 20)
    first_metrics = first.metrics.to_dict()
    second = speculative_generate(drafter, verifier, [9, 8, 7], 15)
    fresh_drafter, fresh_verifier = make(target, "lossy")
    expected = speculative_generate(fresh_drafter, fresh_verifier, [9, 8, 7], 15)
    assert second.tokens == expected.tokens and second.tiers == expected.tiers
    assert second.metrics.to_dict() == expected.metrics.to_dict()
    assert first.metrics.to_dict() == first_metrics  # the earlier output's metrics are untouched
    assert len(first.tiers) == first.metrics.committed == 20


@pytest.mark.parametrize("share_prefix", [True, False])
def test_full_verifier_catches_up_on_slim_tokens_in_one_forward(share_prefix):
    """Lossy mode: q skips the cycles u resolves, then sees all the tokens committed meanwhile in the
    same forward that verifies the next block, with logits equal to a fresh full forward (also when
    that forward resumes at the slim verifier's first skipped layer)."""
    target = sharpened_model("llama", 30.0, num_layers=LAYERS)
    checked = []
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [2, 3, 4])).model, GREEDY)
    verifier = tiered_verifier(target, TierSettings(gamma=4, adaptive=False), GREEDY,
                               slim=SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [3, 4])),
                               plugin_manager=make_plugin_manager(load_entrypoints=False), share_prefix=share_prefix)
    runners = verifier.runners
    full_logits = runners.full_logits

    def checking_full_logits(sequence, n_tail):
        fed_before = list(runners.q.fed if share_prefix else runners.full.fed)
        logits = full_logits(sequence, n_tail)
        with torch.no_grad():
            fresh = target(torch.tensor([sequence])).logits[0, -n_tail:]
        torch.testing.assert_close(logits, fresh, rtol=0, atol=1e-4)
        checked.append(len(sequence) - len(fed_before))
        return logits

    runners.full_logits = checking_full_logits
    out = speculative_generate(drafter, verifier, PROMPT, 40)
    assert out.metrics.slim_tokens > 0 and len(checked) == out.metrics.full_passes
    # Some escalation came after slim-only cycles: q then had more new tokens than one block.
    assert max(checked[1:]) > 4 + 1
    assert (out.metrics.resumed_full_passes > 0) == share_prefix


# ============================================================================== the engine's own argument checks


@pytest.fixture(scope="module")
def models():
    return tiny_model("llama", num_layers=4), tiny_model("llama", seed=1, num_layers=1)


class FixedDrafter:
    """A custom drafter (the Drafter protocol) that returns one fixed, possibly broken, block."""

    passes = 0

    def __init__(self, drafts, p):
        self.drafts, self.p = drafts, p

    def propose(self, sequence, gamma, generator):
        return self.drafts, self.p


def _verifier(target, mode="lossy", sampling=GREEDY):
    slim = SlimVerifier(target, RoutingMask.from_skipped(4, [1, 3])) if mode == "lossy" else None
    return tiered_verifier(target, TierSettings(mode=mode), sampling, slim=slim)


UNIFORM = torch.full((1, 96), 1 / 96)


@pytest.mark.parametrize("drafts, p, error, message", [
    (torch.tensor([1, 2]), torch.full((3, 96), 1 / 96), ConfigError, "2 drafts but probabilities of shape"),
    (torch.tensor([1]), torch.full((1, 50), 1 / 50), ModelMismatchError, "cover 50 tokens, the target's 96"),
    (torch.tensor([500]), UNIFORM, ConfigError, "token id 500, outside the vocabulary"),
    (torch.tensor([1]), torch.full((1, 96), float("nan")), ConfigError, "NaN"),  # ran silently before
    (torch.tensor([1.0]), UNIFORM, ConfigError, "1-D integer tensor"),
])
def test_a_custom_drafters_broken_block_is_refused(models, drafts, p, error, message):
    target, _ = models
    with pytest.raises(error, match=message):
        speculative_generate(FixedDrafter(drafts, p), _verifier(target), [1, 2, 3], 4)


def test_engine_argument_types(models):
    target, drafter = models
    for bad in (-3, 2.5):  # 0 and the other bad inputs every framework refuses: tests/conformance/test_errors.py
        with pytest.raises(ConfigError, match="max_new_tokens"):
            speculative_generate(ModelDrafter(drafter, GREEDY), _verifier(target), [1, 2], bad)
    with pytest.raises(ConfigError, match="eos token ids"):  # "12" would have been read as [1, 2]
        speculative_generate(ModelDrafter(drafter, GREEDY), _verifier(target), [1], 3, eos_token_ids="12")
    with pytest.raises(ConfigError, match="torch.Generator"):
        speculative_generate(ModelDrafter(drafter, GREEDY), _verifier(target), [1], 3, generator=5)
    with pytest.raises(ConfigError, match="SamplingConfig"):
        tiered_verifier(target, TierSettings(mode="none"), None)
    with pytest.raises(ConfigError, match="SamplingConfig"):
        ModelDrafter(drafter, "greedy")
    with pytest.raises(ConfigError, match="must be a RoutingMask"):
        SlimVerifier(target, [1, 0, 1, 1])


@pytest.mark.parametrize("build, message", [
    (lambda: TierSettings(mode=None), "mode must be one of"),  # was read as mode "none"
    (lambda: TierSettings(mode=3), "mode must be one of"),
    (lambda: SamplingConfig(do_sample="no", temperature=0.5), "do_sample must be True or False"),  # was sampling
    (lambda: SamplingConfig(do_sample=None), "do_sample must be True or False"),
])
def test_settings_types(build, message):
    with pytest.raises(ConfigError, match=message):
        build()
