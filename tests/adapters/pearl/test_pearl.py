"""PEARL adapter: what is particular to it: the round structure (pre-/post-verify, adaptive draft
length, roll-back), parallel and sequential decoding giving the same output, the two role threads,
budgets inside a block, errors on either thread without deadlock or leak, intra-op threads, and
PEARL's own arguments.

The pair is :func:`tests.support.pairs.noisy_pair`: a sharpened Llama target, a noisy copy as the
drafter (both the accept and the reject paths of every round type run) and a damped layer the mask
skips. Greedy identity, sampling, the mode invariants, errors and scopes shared by every framework
are tested on PEARL in tests/conformance/.
"""

from __future__ import annotations

import threading

import pytest
import torch

import viasd_adapt
from tests.support.expected_warnings import junk_drafter_warning
from tests.support.pairs import greedy_reference, noisy_pair
from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.engine.pearl import PearlDecoder, RoleWorkers, resolve_parallel
from viasd_adapt.engine.drafters import ModelDrafter
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.hooks import hookimpl
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier


PROMPTS = ([1, 2, 3, 4, 5], [7, 8, 9], [10, 20, 30, 40, 50, 60])
#: How long a test waits for a call that may deadlock before calling it one (seconds).
DEADLOCK_GUARD_S = 600
SAMPLING = SamplingConfig(do_sample=True)
NONE = TierSettings(mode="none")


def pearl_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("pearl-")]


@pytest.fixture(scope="module")
def built():
    return noisy_pair()


@pytest.fixture(scope="module")
def pair(built):
    return built.target, built.drafter


@pytest.fixture(scope="module")
def mask(built):
    return built.mask


# ----------------------------------------------------------------------------- the round structure


def test_perfect_drafter_gives_adaptive_draft_length(pair):
    """With the target as its own drafter every draft passes: after one pre-verify round every
    round is post-verify and a single run of accepted drafts spans the whole generation."""
    target, _ = pair
    out = pearl_generate(target, target, PROMPTS[0], 21,
                         context=viasd_adapt.context(target, settings=TierSettings(mode="none", gamma=4)), seed=0)
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
                         context=viasd_adapt.context(target, settings=TierSettings(mode="none", gamma=4)),
                         parallel=parallel)
    assert out.tokens == expected
    assert out.stats.rounds == out.stats.pre_verify_rounds == out.metrics.full_passes == 10
    assert out.stats.post_verify_rounds == 0 and out.metrics.rejection_rate == 1.0
    assert out.stats.discarded_drafts == sum(min(4, 10 - i) - 1 for i in range(10))
    assert set(out.tiers) == {int(Tier.FULL)}


# ----------------------------------------------------------------------------- parallel == sequential


@pytest.mark.parametrize("sampling", [SamplingConfig(), SAMPLING], ids=["greedy", "sampling"])
@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
def test_parallel_and_sequential_agree(pair, mask, mode, sampling):
    """The conformance suite runs PEARL parallel (the default on a CPU); sequential must decide the
    same tokens, tiers and metrics."""
    target, drafter = pair
    with junk_drafter_warning("pearl", expected=mode == "lossy" and sampling.greedy):  # the noisy pair's u is nearly flat
        for seed in range(3):
            runs = [
                pearl_generate(
                    target, drafter, PROMPTS[seed], 20,
                    context=viasd_adapt.context(target, settings=TierSettings(mode=mode, gamma=4, adaptive=False), mask=mask),
                    sampling=sampling, parallel=parallel, seed=seed,
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
        context=viasd_adapt.context(target, settings=TierSettings(mode="none", gamma=4), plugins=[Observer()]), seed=0,
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
        out = pearl_generate(target, target, PROMPTS[1], n,
                             context=viasd_adapt.context(target,
                                                         settings=TierSettings(mode="none", gamma=4)), parallel=parallel)
        assert out.tokens == expected[:n]
        assert out.metrics.committed == len(out.tiers) == n
    assert threading.active_count() == before and not pearl_threads()


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
    raised: list[BaseException] = []

    def call() -> None:
        try:
            pearl_generate(target, RaisingDrafter(drafter_model, fail_at), PROMPTS[0], 30,
                           context=viasd_adapt.context(target, settings=TierSettings(mode="none", gamma=4)),
                           parallel=parallel, intra_op_threads=1)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            raised.append(err)

    # A deadlock would hang the call: it runs on a thread the test gives up on after a generous
    # while (a hang guard, not a measure of speed: no test compares timings).
    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(timeout=DEADLOCK_GUARD_S)
    assert not caller.is_alive(), "pearl_generate did not return after the drafter's error: a deadlock"
    assert len(raised) == 1 and isinstance(raised[0], RuntimeError) and "drafter exploded" in str(raised[0])
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
            target, drafter, PROMPTS[0], 30,
            context=viasd_adapt.context(target, settings=TierSettings(mode="lossy", gamma=4, adaptive=False), mask=mask,
                                        plugins=[ExplodingGate()]),
            parallel=parallel,
        )
    assert threading.active_count() == before and not pearl_threads()


def test_intra_op_threads_is_scoped_and_restored():
    torch.set_num_threads(1)
    with RoleWorkers(parallel=True, device=torch.device("cpu"), intra_op_threads=2) as workers:
        inside = workers.submit("drafter", torch.get_num_threads).result()
        assert inside == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1 and not pearl_threads()


# ----------------------------------------------------------------------------- bad input


def test_pearls_own_arguments(pair):
    """Bad input every framework refuses is tested on PEARL in tests/conformance/test_errors.py."""
    target, drafter = pair
    with pytest.raises(ConfigError, match="batch size 1"):
        pearl_generate(target, drafter, torch.tensor([[1, 2], [3, 4]]), 5)
    with pytest.raises(ConfigError, match="intra_op_threads"):
        pearl_generate(target, drafter, [1, 2], 5, intra_op_threads=0,
                       context=viasd_adapt.context(target, settings=NONE))
    # a (1, n) tensor prompt is fine
    assert len(pearl_generate(target, drafter, torch.tensor([[1, 2, 3]]), 4,
                              context=viasd_adapt.context(target, settings=NONE)).tokens) == 4


def test_decoder_accepts_any_drafter_object(pair):
    """The loop only needs ``propose`` and ``passes``: a framework's own drafter plugs in."""
    target, drafter_model = pair
    out = pearl_generate(target, ModelDrafter(drafter_model, SamplingConfig()), PROMPTS[2], 10, seed=0,
                         context=viasd_adapt.context(target, settings=NONE))
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
    out = pearl_generate(target, drafter, PROMPTS[0], 8,
                         context=viasd_adapt.context(target, settings=NONE), seed=0)  # default "auto": threads on a CPU
    assert out.stats.parallel and out.tokens == greedy_reference(target, PROMPTS[0], 8)


def test_role_workers_put_each_role_on_its_own_device_and_streams_are_optional():
    devices = {"drafter": torch.device("cpu"), "target": torch.device("cpu")}
    with RoleWorkers(True, devices, streams=False) as workers:
        assert workers.devices == devices and workers.submit("drafter", lambda: 3).result() == 3
        assert not workers._streams  # no CUDA here, and none asked for
