"""CachedRunner and the speculative loop: exactness against plain forwards and ``generate``."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from transformers import GenerationConfig

from viasd_adapt.engine import ModelDrafter, TieredVerifier, speculative_generate
from viasd_adapt.errors import ConfigError
from viasd_adapt.hooks import hookimpl, make_plugin_manager
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing import RoutingMask, SlimVerifier
from viasd_adapt.runner import CachedRunner
from viasd_adapt.sampling import SamplingConfig, probs_from_logits
from viasd_adapt.settings import TierSettings
from viasd_adapt.tiers import Tier

torch.set_num_threads(1)

LAYERS = 6
PROMPT = [5, 17, 33, 2, 9]
GREEDY = SamplingConfig()


def sharpened(family: str, seed: int = 0, **kw):
    """A tiny model with a scaled-up LM head, so its distributions are peaked like a trained one's."""
    model = tiny_model(family, seed=seed, num_layers=LAYERS, **kw)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(30.0)
    return model


@pytest.fixture(scope="module", params=["llama", "gemma2", "gpt2", "gpt_neox"])
def target(request):
    return sharpened(request.param)


def make(target, mode="lossy", gamma=4, sampling=GREEDY, plugins=(), **settings):
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [2, 3, 4])).model, sampling)
    slim = SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [3, 4])) if mode != "none" else None
    verifier = TieredVerifier(
        target, TierSettings(mode=mode, gamma=gamma, **settings), sampling, slim=slim,
        plugin_manager=make_plugin_manager(list(plugins), load_entrypoints=False),
    )
    return drafter, verifier


def hf_greedy(target, prompt, n, eos=None):
    config = GenerationConfig(max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=0)
    with torch.no_grad():
        out = target.generate(torch.tensor([prompt]), generation_config=config)
    return out[0, len(prompt):].tolist()


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


# ============================================================================== exactness of none / lossless


@pytest.mark.parametrize("mode", ["none", "lossless"])
def test_greedy_output_is_token_identical_to_target_generate(target, mode):
    for prompt, n, gamma in ((PROMPT, 30, 4), ([7], 9, 1), ([3, 1, 4, 1, 5, 9, 2, 6], 21, 6)):
        reference = hf_greedy(target, prompt, n)
        assert len(reference) == n
        drafter, verifier = make(target, mode, gamma=gamma)
        out = speculative_generate(drafter, verifier, prompt, n)
        assert out.tokens == reference, (mode, prompt)


def test_lossless_greedy_stops_at_eos_like_generate(target):
    reference = hf_greedy(target, PROMPT, 30)
    eos = reference[11]
    expected = hf_greedy(target, PROMPT, 30, eos=eos)
    assert expected == reference[: reference.index(eos) + 1]
    drafter, verifier = make(target, "lossless")
    out = speculative_generate(drafter, verifier, PROMPT, 30, eos_token_ids=[eos])
    assert out.tokens == expected
    assert out.metrics.committed == len(expected) == len(out.tiers)


def test_lossless_sampling_matches_the_target_distribution():
    """Chi-square (significance 1e-3) on the 2nd and 3rd generated tokens of an 8-token vocabulary.

    A 4-layer target keeps this affordable: the drafter keeps layer 0 only, the slim verifier
    layers 0-1, so p, u and q all differ.
    """
    target = tiny_model("llama", seed=4, num_layers=4, vocab_size=8)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(6.0)
    sampling = SamplingConfig(do_sample=True, temperature=1.0)
    draft_model = SlimVerifier(target, RoutingMask.from_skipped(4, [1, 2, 3])).model
    slim = SlimVerifier(target, RoutingMask.from_skipped(4, [2, 3]))
    prompt = [3, 5]

    with torch.no_grad():  # exact marginals of q (and, for the power check, u) at generated positions 1, 2
        q0 = target(torch.tensor([prompt])).logits[0, -1].softmax(-1)
        pairs = torch.tensor([prompt + [a] for a in range(8)])
        q1 = target(pairs).logits[:, -1].softmax(-1)  # (8, 8): q(x1 | x0)
        u1 = slim.model(pairs).logits[:, -1].softmax(-1)
        triples = torch.tensor([prompt + [a, b] for a in range(8) for b in range(8)])
        q2 = target(triples).logits[:, -1].softmax(-1).reshape(8, 8, 8)
    marginal1 = (q0[:, None] * q1).sum(0)
    marginal2 = (q0[:, None, None] * q1[:, :, None] * q2).sum((0, 1))
    slim_marginal1 = (q0[:, None] * u1).sum(0)

    gen = torch.Generator().manual_seed(0)
    drafter = ModelDrafter(draft_model, sampling)
    verifier = TieredVerifier(target, TierSettings(mode="lossless", gamma=2), sampling, slim=slim,
                              plugin_manager=make_plugin_manager(load_entrypoints=False))
    samples1, samples2, slim_tokens = [], [], 0
    for _ in range(700):  # one verifier for all runs: its runners' caches follow each new sequence
        out = speculative_generate(drafter, verifier, prompt, 3, generator=gen)
        samples1.append(out.tokens[1])
        samples2.append(out.tokens[2])
        slim_tokens += out.metrics.slim_tokens
    assert slim_tokens > 0  # u's corrections did reach the output (after q's check)

    def pvalue(samples, probs):
        observed = torch.bincount(torch.tensor(samples), minlength=8).double()
        expected = probs.double() / probs.double().sum() * len(samples)
        return chisquare(observed.numpy(), expected.numpy()).pvalue

    assert pvalue(samples1, marginal1) > 1e-3
    assert pvalue(samples2, marginal2) > 1e-3
    assert pvalue(samples1, slim_marginal1) < 1e-3  # power: u's distribution is told apart


# ============================================================================== budgets and errors


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_max_new_tokens_is_honoured_exactly(mode):
    target = sharpened("llama", seed=5)
    for n in (1, 2, 5, 17):
        for gamma in (1, 3, 8):
            drafter, verifier = make(target, mode, gamma=gamma)
            out = speculative_generate(drafter, verifier, PROMPT, n)
            assert len(out.tokens) == len(out.tiers) == out.metrics.committed == n
            assert sum(out.metrics.accepted_lengths) == n
            if n == 1:  # the prefill alone fills the budget: nothing is drafted
                assert out.metrics.drafted == drafter.passes == 0 and out.metrics.cycles == 1


def test_eos_stops_generation_in_lossy_mode(target):
    drafter, verifier = make(target, "lossy")
    reference = speculative_generate(drafter, verifier, PROMPT, 30).tokens
    eos = reference[9]
    drafter, verifier = make(target, "lossy")
    out = speculative_generate(drafter, verifier, PROMPT, 30, eos_token_ids=[eos])
    assert out.tokens == reference[: reference.index(eos) + 1]
    assert out.tokens[-1] == eos and eos not in out.tokens[:-1]


def test_bad_inputs_are_config_errors():
    target = tiny_model("llama", seed=0, num_layers=2)
    drafter = ModelDrafter(target, GREEDY)
    verifier = TieredVerifier(target, TierSettings(mode="none"), GREEDY)
    with pytest.raises(ConfigError, match="prompt"):
        speculative_generate(drafter, verifier, [], 5)
    for bad in (0, -3, 2.5):
        with pytest.raises(ConfigError, match="max_new_tokens"):
            speculative_generate(drafter, verifier, [1, 2], bad)
    with pytest.raises(ConfigError, match="mask"):
        TieredVerifier(target, TierSettings(mode="lossy"), GREEDY)


# ============================================================================== metrics of the tiered modes


class CycleLog:
    def __init__(self):
        self.cycles = []

    @hookimpl
    def viasd_cycle_finished(self, cycle, metrics):
        self.cycles.append(cycle)


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_metrics_add_up(target, mode):
    log = CycleLog()
    drafter, verifier = make(target, mode, plugins=[log])
    out = speculative_generate(drafter, verifier, PROMPT, 40)
    m = out.metrics
    assert m.draft_tokens + m.slim_tokens + m.full_tokens == m.committed == len(out.tokens) == 40
    assert len(m.accepted_lengths) == m.cycles == len(log.cycles)
    assert sum(m.accepted_lengths) == 40
    assert m.mean_accepted_length == pytest.approx(40 / m.cycles)
    assert 0 <= m.drafts_rejected <= m.drafts_judged <= m.drafted
    assert 0.0 <= m.rejection_rate <= 1.0
    assert m.draft_passes == drafter.passes == m.drafted  # one drafter forward per drafted token
    assert m.full_passes_per_token == pytest.approx(m.full_passes / 40)
    drafting_cycles = m.cycles - 1  # the first "cycle" is the prefill
    escalated_cycles = sum(1 for c in log.cycles if c.escalated)
    if mode == "none":
        assert (m.full_passes, m.slim_passes, m.slim_tokens) == (m.cycles, 0, 0)
    elif mode == "lossless":
        assert (m.full_passes, m.slim_passes) == (m.cycles, drafting_cycles)
    elif mode == "lossy":
        assert m.slim_passes == drafting_cycles
        assert m.full_passes == 1 + escalated_cycles
        # Every other cycle ends with exactly one slim token (the last one may be cut by the budget).
        assert drafting_cycles - escalated_cycles - 1 <= m.slim_tokens <= drafting_cycles - escalated_cycles
        assert m.tv_distance is None
    else:
        assert (m.full_passes, m.slim_passes) == (m.cycles, drafting_cycles)
        assert m.audited == 40 - 1  # every token a tier decided (the prefill token is q's own)
        assert 0.0 <= m.tv_distance <= 1.0 and 0.0 <= m.overrule_rate <= 1.0
        assert all(0 <= pos < 40 for pos in m.overruled_positions)
    for cycle in log.cycles[1:]:
        assert cycle.tiers.count(Tier.SLIM) <= (1 if mode != "lossless" else len(cycle.tokens))


def test_lossy_saves_full_passes_when_slim_is_confident():
    target = sharpened("llama", seed=0)
    runs = {}
    for mode in ("none", "lossy"):
        drafter, verifier = make(target, mode)
        runs[mode] = speculative_generate(drafter, verifier, PROMPT, 40).metrics
    assert runs["lossy"].slim_tokens > 0
    assert runs["lossy"].full_passes < runs["none"].full_passes


def test_a_reused_verifier_reports_each_generation_on_its_own():
    target = sharpened("llama", seed=0)
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


def test_lossless_sampling_with_top_k_top_p_matches_the_warped_target():
    """Every tier compares warped distributions: the output follows q after temperature/top-k/top-p."""
    target = tiny_model("llama", seed=4, num_layers=4, vocab_size=8)
    with torch.no_grad():
        target.get_output_embeddings().weight.mul_(6.0)
    sampling = SamplingConfig(do_sample=True, temperature=0.8, top_k=4, top_p=0.9)
    slim = SlimVerifier(target, RoutingMask.from_skipped(4, [2, 3]))
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(4, [1, 2, 3])).model, sampling)
    verifier = TieredVerifier(target, TierSettings(mode="lossless", gamma=2), sampling, slim=slim,
                              plugin_manager=make_plugin_manager(load_entrypoints=False))
    prompt = [3, 5]
    with torch.no_grad():
        q0 = probs_from_logits(target(torch.tensor([prompt])).logits[0, -1], sampling)
        q1 = probs_from_logits(target(torch.tensor([prompt + [a] for a in range(8)])).logits[:, -1], sampling)
    marginal = (q0[:, None] * q1).sum(0).double()
    gen = torch.Generator().manual_seed(1)
    samples = [speculative_generate(drafter, verifier, prompt, 2, generator=gen).tokens[1] for _ in range(500)]
    observed = torch.bincount(torch.tensor(samples), minlength=8).double()
    support = marginal > 0
    assert not support.all()  # the warp really masked tokens out ...
    assert observed[~support].sum() == 0  # ... and none of them was ever produced
    expected = marginal[support] / marginal[support].sum() * len(samples)
    assert chisquare(observed[support].numpy(), expected.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("share_prefix", [True, False])
def test_full_verifier_catches_up_on_slim_tokens_in_one_forward(share_prefix):
    """Lossy mode: q skips the cycles u resolves, then sees all the tokens committed meanwhile in the
    same forward that verifies the next block, with logits equal to a fresh full forward (also when
    that forward resumes at the slim verifier's first skipped layer)."""
    target = sharpened("llama", seed=0)
    checked = []
    drafter = ModelDrafter(SlimVerifier(target, RoutingMask.from_skipped(LAYERS, [2, 3, 4])).model, GREEDY)
    verifier = TieredVerifier(target, TierSettings(gamma=4), GREEDY,
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
