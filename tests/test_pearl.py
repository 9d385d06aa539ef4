"""PEARL adapter: greedy losslessness, the round structure, threads, budget/EOS, modes, bad input.

Models are tiny random Llamas (and one GPT-2) made to behave like a real pair:
* the target's LM head is scaled up so its distributions are peaky (random init is near uniform);
* the drafter is a noisy copy of the target, so it agrees often but not always (both the accept and
  the reject paths of every round type run);
* for the lossy tests, one target layer is damped, so the slim verifier that skips it sits between
  the drafter and the target, as the demo pair's LayerDrop training makes it.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest
import torch

from viasd_adapt.adapters.pearl import PearlDecoder, RoleWorkers, pearl_generate, resolve_parallel
from viasd_adapt.cycle import StopRule, end_at_block
from viasd_adapt.engine import ModelDrafter
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.hooks import hookimpl
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, model_fingerprint
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import TierSettings
from viasd_adapt.tiers import CycleResult, Tier

torch.set_num_threads(1)

PROMPTS = ([1, 2, 3, 4, 5], [7, 8, 9], [10, 20, 30, 40, 50, 60])
SAMPLING = SamplingConfig(do_sample=True)
NONE = TierSettings(mode="none")


# ----------------------------------------------------------------------------- model helpers


def sharpened(model: torch.nn.Module, factor: float) -> torch.nn.Module:
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


def damped_layer(model: torch.nn.Module, layer: int, factor: float) -> torch.nn.Module:
    """Shrinks one Llama layer's residual updates, so skipping it changes little."""
    block = model.model.layers[layer]
    with torch.no_grad():
        block.self_attn.o_proj.weight.mul_(factor)
        block.mlp.down_proj.weight.mul_(factor)
    return model


def noisy_copy(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    clone = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in clone.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp_min(1e-3))
    return clone


def make_pair(family: str = "llama", vocab_size: int = 64, noise: float = 0.25, seed: int = 0):
    """A (target, drafter) pair with partial agreement."""
    target = sharpened(tiny_model(family, seed, num_layers=4, vocab_size=vocab_size), 20.0)
    if family == "llama":
        damped_layer(target, 3, 0.05)
    return target, noisy_copy(target, noise, seed + 1)


def greedy_reference(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding: a full forward per token, no cache, argmax."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt) :]


def pearl_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("pearl-")]


@pytest.fixture(scope="module")
def pair():
    return make_pair()


@pytest.fixture(scope="module")
def mask():
    return RoutingMask.from_skipped(4, [3])


# ----------------------------------------------------------------------------- pure helpers


def test_end_at_block_drops_only_tokens_after_a_fully_committed_block():
    block = [5, 6, 7]
    bonus = CycleResult([5, 6, 7, 9], [Tier.DRAFT] * 3 + [Tier.FULL], 3, 0)
    trimmed = end_at_block(bonus, block)
    assert trimmed.tokens == [5, 6, 7] and trimmed.tiers == [Tier.DRAFT] * 3
    assert (trimmed.drafts_judged, trimmed.drafts_rejected) == (3, 0)
    cascade = CycleResult([5, 6, 7, 4, 9], [Tier.DRAFT] * 3 + [Tier.SLIM, Tier.FULL], 3, 0)
    assert end_at_block(cascade, block).tokens == [5, 6, 7]
    corrected = CycleResult([5, 8], [Tier.DRAFT, Tier.FULL], 2, 1)
    assert end_at_block(corrected, block).tokens == [5, 8]
    # a correction at the last position that differs from the draft keeps the cycle as it is
    last = CycleResult([5, 6, 1], [Tier.DRAFT, Tier.DRAFT, Tier.FULL], 3, 1)
    assert end_at_block(last, block).tokens == [5, 6, 1]


def test_stop_rule_respects_budget_and_eos():
    assert StopRule.of(5).split([1, 2, 3]) == ([1, 2, 3], False)
    assert StopRule.of(2).split([1, 2, 3]) == ([1, 2], True)
    assert StopRule.of(5, {2}).split([1, 2, 3]) == ([1, 2], True)
    assert StopRule.of(3).split([1, 2, 3]) == ([1, 2, 3], True)


# ----------------------------------------------------------------------------- greedy lossless


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
@pytest.mark.parametrize("mode", ["none", "lossless"])
def test_greedy_is_token_identical_to_target_greedy(pair, mask, mode, parallel):
    target, drafter = pair
    total = TierMetrics()
    for prompt in PROMPTS:
        expected = greedy_reference(target, prompt, 24)
        out = pearl_generate(
            target, drafter, prompt, 24, settings=TierSettings(mode=mode, gamma=4), mask=mask, parallel=parallel, seed=0
        )
        assert out.tokens == expected, f"prompt {prompt}"
        total = total.merge(out.metrics)
    # both paths of a round ran: some drafts were accepted, some rejected
    assert 0 < total.drafts_rejected < total.drafts_judged
    assert total.draft_tokens > 0


@pytest.mark.parametrize("family", ["gpt2", "qwen2"])
def test_greedy_identical_on_other_families(family):
    target, drafter = make_pair(family, noise=0.3)
    mask = RoutingMask.from_skipped(4, [1])
    for mode in ("none", "lossless"):
        for prompt in PROMPTS[:2]:
            out = pearl_generate(target, drafter, prompt, 16, settings=TierSettings(mode=mode, gamma=3), mask=mask, seed=1)
            assert out.tokens == greedy_reference(target, prompt, 16)


def test_perfect_drafter_gives_adaptive_draft_length(pair):
    """With the target as its own drafter every draft passes: after one pre-verify round every
    round is post-verify and a single run of accepted drafts spans the whole generation."""
    target, _ = pair
    out = pearl_generate(target, target, PROMPTS[0], 21, settings=TierSettings(mode="none", gamma=4), seed=0)
    assert out.tokens == greedy_reference(target, PROMPTS[0], 21)
    assert out.stats.pre_verify_rounds == 1
    assert out.stats.post_verify_rounds == out.stats.rounds - 1
    assert out.stats.accepted_runs == [21]
    # every round after the first verifies gamma tokens with one target pass
    assert out.metrics.full_passes == out.stats.rounds == 1 + 5
    assert out.metrics.drafts_rejected == 0


class ConstantDrafter:
    """Always proposes the same token with certainty: a drafter the target never agrees with."""

    def __init__(self, token: int, vocab_size: int):
        self.token, self.vocab_size, self.passes = token, vocab_size, 0

    def propose(self, sequence, gamma, generator=None):
        self.passes += 1
        probs = torch.zeros(gamma, self.vocab_size)
        probs[:, self.token] = 1.0
        return torch.full((gamma,), self.token, dtype=torch.long), probs


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
def test_every_rejection_rolls_back_to_pre_verify(pair, parallel):
    """A drafter that is always wrong: every round is a pre-verify round that rejects its first
    draft, commits the target's correction, and throws the rest of the block away."""
    target, _ = pair
    expected = greedy_reference(target, PROMPTS[0], 10)
    wrong = next(t for t in range(64) if t not in expected)
    out = pearl_generate(target, ConstantDrafter(wrong, 64), PROMPTS[0], 10,
                         settings=TierSettings(mode="none", gamma=4), parallel=parallel)
    assert out.tokens == expected
    assert out.stats.rounds == out.stats.pre_verify_rounds == out.metrics.full_passes == 10
    assert out.stats.post_verify_rounds == 0 and out.metrics.rejection_rate == 1.0
    assert out.stats.discarded_drafts == sum(min(4, 10 - i) - 1 for i in range(10))
    assert set(out.tiers) == {int(Tier.FULL)}


# ----------------------------------------------------------------------------- parallel == sequential


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_sampling_parallel_and_sequential_agree(pair, mask, mode):
    target, drafter = pair
    for seed in range(3):
        runs = [
            pearl_generate(
                target, drafter, PROMPTS[seed], 20, settings=TierSettings(mode=mode, gamma=4), mask=mask,
                sampling=SAMPLING, parallel=parallel, seed=seed,
            )
            for parallel in (True, False)
        ]
        assert runs[0].tokens == runs[1].tokens
        assert runs[0].tiers == runs[1].tiers
        assert runs[0].metrics.to_dict() == runs[1].metrics.to_dict()


def test_roles_run_on_their_own_threads_and_overlap(pair):
    """The target verifies while the drafter is still drafting (post-verify / pre-verify overlap).

    The drafter blocks in the middle of its block until the target thread has finished a cycle.
    Only a truly concurrent target can do that; a sequential one would leave the drafter waiting.
    """
    target, drafter_model = pair
    cycle_done = threading.Event()
    seen = {"drafter": set(), "target": set(), "overlapped": 0}

    class Observer:
        @hookimpl
        def viasd_cycle_finished(self, cycle, metrics):
            seen["target"].add(threading.current_thread().name.split("_")[0])
            cycle_done.set()

    class WaitingDrafter(ModelDrafter):
        last: list[int] = []
        index_in_block = 0

        def propose(self, sequence, gamma, generator=None):
            seen["drafter"].add(threading.current_thread().name.split("_")[0])
            continues = len(sequence) == len(self.last) + 1 and sequence[:-1] == self.last
            self.index_in_block = self.index_in_block + 1 if continues else 0
            self.last = list(sequence)
            if self.index_in_block == 0:  # the target starts only after this block's d1
                cycle_done.clear()
            if self.index_in_block == 1:  # second token of a block: d1 was already handed over
                if cycle_done.wait(timeout=10):
                    seen["overlapped"] += 1
                cycle_done.clear()
            return super().propose(sequence, gamma, generator)

    out = pearl_generate(
        target, WaitingDrafter(drafter_model, SamplingConfig()), PROMPTS[0], 12,
        settings=TierSettings(mode="none", gamma=4), plugins=[Observer()], seed=0,
    )
    assert out.tokens == greedy_reference(target, PROMPTS[0], 12)
    assert seen["drafter"] == {"pearl-drafter"} and seen["target"] == {"pearl-target"}
    assert seen["overlapped"] >= 2


# ----------------------------------------------------------------------------- budget and EOS


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
def test_max_new_tokens_hit_inside_a_block(pair, parallel):
    target, _ = pair
    before = threading.active_count()
    expected = greedy_reference(target, PROMPTS[1], 7)
    for n in (1, 2, 3, 5, 6, 7):  # with gamma 4 these end inside pre- and post-verify blocks
        out = pearl_generate(target, target, PROMPTS[1], n, settings=TierSettings(mode="none", gamma=4), parallel=parallel)
        assert out.tokens == expected[:n]
        assert out.metrics.committed == len(out.tiers) == n
    assert threading.active_count() == before and not pearl_threads()


class TokenCounter:
    def __init__(self):
        self.events = []

    @hookimpl
    def viasd_token_decided(self, event):
        self.events.append(event)


@pytest.mark.parametrize("mode", ["none", "lossless", "audit"])
def test_observers_and_metrics_see_only_committed_tokens(pair, mask, mode):
    """Budget and EOS cut a cycle before it is counted, so hooks never see a dropped token."""
    target, drafter = pair
    expected = greedy_reference(target, PROMPTS[0], 24)
    for n, eos in ((6, None), (24, expected[5])):
        counter = TokenCounter()
        out = pearl_generate(target, drafter, PROMPTS[0], n, settings=TierSettings(mode=mode, gamma=4), mask=mask,
                             eos_token_id=eos, plugins=[counter], seed=0)
        assert [e.token for e in counter.events] == out.tokens
        assert [e.index for e in counter.events] == list(range(len(out.tokens)))
        if mode == "audit":
            assert out.metrics.audited == len(out.tokens)


def test_eos_stops_generation(pair, mask):
    target, drafter = pair
    expected = greedy_reference(target, PROMPTS[0], 24)
    eos = expected[5]
    stop = expected.index(eos)
    for mode in ("none", "lossless"):
        out = pearl_generate(target, drafter, PROMPTS[0], 24, settings=TierSettings(mode=mode, gamma=4), mask=mask, eos_token_id=eos)
        assert out.tokens == expected[: stop + 1]
        assert out.metrics.committed == stop + 1


# ----------------------------------------------------------------------------- errors mid-way


class RaisingDrafter(ModelDrafter):
    """Fails on its ``fail_at``-th draft step (counting from 1)."""

    def __init__(self, model, fail_at: int):
        super().__init__(model, SamplingConfig())
        self.calls = 0
        self.fail_at = fail_at

    def propose(self, sequence, gamma, generator=None):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("drafter exploded")
        return super().propose(sequence, gamma, generator)


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
@pytest.mark.parametrize("fail_at", [1, 2, 7])  # before d1 of the first block, inside it, later
def test_drafter_error_propagates_without_deadlock_or_leak(pair, parallel, fail_at):
    target, drafter_model = pair
    before_threads, before_intra = threading.active_count(), torch.get_num_threads()
    torch.set_num_threads(1)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="drafter exploded"):
        pearl_generate(
            target, RaisingDrafter(drafter_model, fail_at), PROMPTS[0], 30,
            settings=TierSettings(mode="none", gamma=4), parallel=parallel, intra_op_threads=1,
        )
    assert time.monotonic() - started < 20
    assert threading.active_count() == before_threads and not pearl_threads()
    assert torch.get_num_threads() == before_intra


class ExplodingGate:
    """A gate-1 plugin that fails on its third call: an error on the target thread."""

    def __init__(self):
        self.calls = 0

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        self.calls += 1
        if self.calls == 3:
            raise ValueError("gate exploded")
        return None


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
def test_target_error_propagates_without_deadlock_or_leak(pair, mask, parallel):
    target, drafter = pair
    before = threading.active_count()
    with pytest.raises(ValueError, match="gate exploded"):
        pearl_generate(
            target, drafter, PROMPTS[0], 30, settings=TierSettings(mode="lossy", gamma=4), mask=mask,
            plugins=[ExplodingGate()], parallel=parallel,
        )
    assert threading.active_count() == before and not pearl_threads()


def test_intra_op_threads_is_scoped_and_restored():
    torch.set_num_threads(1)
    with RoleWorkers(parallel=True, device=torch.device("cpu"), intra_op_threads=2) as workers:
        inside = workers.submit("drafter", torch.get_num_threads).result()
        assert inside == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1 and not pearl_threads()


# ----------------------------------------------------------------------------- lossy and audit


def _summed(target, drafter, mask, mode, sampling):
    total = TierMetrics()
    for seed, prompt in enumerate(PROMPTS):
        out = pearl_generate(
            target, drafter, prompt, 24, settings=TierSettings(mode=mode, gamma=4), mask=mask, sampling=sampling, seed=seed
        )
        assert out.metrics.draft_tokens + out.metrics.slim_tokens + out.metrics.full_tokens == len(out.tokens) == 24
        assert out.tiers == out.metrics.token_tiers
        total = total.merge(out.metrics)
    return total


@pytest.mark.parametrize("sampling", [SamplingConfig(), SAMPLING], ids=["greedy", "sampling"])
def test_lossy_cuts_rejections_and_full_passes(pair, mask, sampling):
    """Constructed case (until the demo pair is used in the bench): the slim verifier skips the
    damped layer, so it sits between drafter and target, as on the LayerDrop-trained demo pair."""
    target, drafter = pair
    plain = _summed(target, drafter, mask, "none", sampling)
    lossy = _summed(target, drafter, mask, "lossy", sampling)
    assert lossy.rejection_rate < plain.rejection_rate
    assert lossy.full_passes_per_token < plain.full_passes_per_token
    assert lossy.slim_passes > 0 and plain.slim_passes == 0


@pytest.mark.parametrize("sampling", [SamplingConfig(), SAMPLING], ids=["greedy", "sampling"])
def test_audit_reports_overrule_rate_and_tv(pair, mask, sampling):
    target, drafter = pair
    audit = _summed(target, drafter, mask, "audit", sampling)
    lossy = _summed(target, drafter, mask, "lossy", sampling)
    assert audit.audited == audit.committed
    assert 0.0 <= audit.overrule_rate <= 1.0 and 0.0 <= audit.tv_distance <= 1.0
    assert audit.full_passes == audit.cycles  # q in shadow, once per round
    # the audit watches lossy decisions without changing them
    assert audit.token_tiers == lossy.token_tiers and audit.drafts_rejected == lossy.drafts_rejected
    if sampling.greedy:
        # greedy: the overruled positions are exactly where lossy left the target's greedy path
        assert (audit.overrule_rate > 0) == (audit.overruled_positions != [])


def test_audit_greedy_overrules_match_divergence_from_target(pair, mask):
    target, drafter = pair
    out = pearl_generate(target, drafter, PROMPTS[0], 24, settings=TierSettings(mode="audit", gamma=4), mask=mask)
    reference = greedy_reference(target, PROMPTS[0], 24)
    first_divergence = next((i for i, (a, b) in enumerate(zip(out.tokens, reference)) if a != b), None)
    if first_divergence is None:
        assert out.metrics.overruled_positions == []
    else:
        assert out.metrics.overruled_positions[0] == first_divergence


# ----------------------------------------------------------------------------- bad input


def test_bad_input_gives_clear_errors(pair, mask):
    target, drafter = pair
    with pytest.raises(ConfigError, match="empty"):
        pearl_generate(target, drafter, [], 5)
    with pytest.raises(ConfigError, match="batch size 1"):
        pearl_generate(target, drafter, torch.tensor([[1, 2], [3, 4]]), 5)
    with pytest.raises(ConfigError, match="max_new_tokens"):
        pearl_generate(target, drafter, [1, 2], 0)
    with pytest.raises(ConfigError, match="mask"):
        pearl_generate(target, drafter, [1, 2], 5, settings=TierSettings(mode="lossless"))
    with pytest.raises(ModelMismatchError, match="vocabulary mismatch"):
        pearl_generate(target, tiny_model("llama", 3, num_layers=1, vocab_size=32), [1, 2], 5, settings=NONE)
    with pytest.raises(ModelMismatchError):
        pearl_generate(target, drafter, [1, 2], 5, settings=TierSettings(mode="lossy"), mask=RoutingMask.from_skipped(6, [1]))
    other = tiny_model("llama", 9, num_layers=4, vocab_size=64)
    artifact = MaskArtifact(mask=mask, ratio=0.25, fingerprint=model_fingerprint(other))
    with pytest.raises(ModelMismatchError, match="another model"):
        pearl_generate(target, drafter, [1, 2], 5, settings=TierSettings(mode="lossy"), mask=artifact)
    with pytest.raises(ConfigError, match="intra_op_threads"):
        pearl_generate(target, drafter, [1, 2], 5, intra_op_threads=0, settings=NONE)
    with pytest.raises(ModelMismatchError, match="outside the model's vocabulary"):
        pearl_generate(target, drafter, [1, 10_000], 5, settings=NONE)
    # a (1, n) tensor prompt is fine
    assert len(pearl_generate(target, drafter, torch.tensor([[1, 2, 3]]), 4, settings=NONE).tokens) == 4


def test_decoder_accepts_any_drafter_object(pair):
    """The loop only needs ``propose`` and ``passes``: a framework's own drafter plugs in."""
    target, drafter_model = pair
    out = pearl_generate(target, ModelDrafter(drafter_model, SamplingConfig()), PROMPTS[2], 10, seed=0, settings=NONE)
    assert out.tokens == greedy_reference(target, PROMPTS[2], 10)
    assert out.metrics.draft_passes > 0 and isinstance(PearlDecoder, type)


def test_parallel_auto_uses_threads_except_on_one_shared_gpu(pair):
    cpu, gpu0, gpu1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)
    assert resolve_parallel("auto", cpu, cpu) and resolve_parallel("auto", gpu0, gpu1) and resolve_parallel("auto", cpu, gpu0)
    assert not resolve_parallel("auto", gpu0, gpu0) and not resolve_parallel("auto", torch.device("cuda"), gpu0)
    assert resolve_parallel(True, gpu0, gpu0) and not resolve_parallel(False, cpu, cpu)
    with pytest.raises(ConfigError, match="parallel must be"):
        resolve_parallel("yes", cpu, cpu)
    target, drafter = pair
    out = pearl_generate(target, drafter, PROMPTS[0], 8, settings=NONE, seed=0)  # default "auto": threads on a CPU
    assert out.stats.parallel and out.tokens == greedy_reference(target, PROMPTS[0], 8)


def test_role_workers_put_each_role_on_its_own_device_and_streams_are_optional():
    devices = {"drafter": torch.device("cpu"), "target": torch.device("cpu")}
    with RoleWorkers(True, devices, streams=False) as workers:
        assert workers.devices == devices and workers.submit("drafter", lambda: 3).result() == 3
        assert not workers._streams  # no CUDA here, and none asked for
