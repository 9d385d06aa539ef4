"""The mode invariants, on every framework, on the pair lossy mode is built for (a drafter that
agrees often but not always, and a slim verifier between drafter and target):

* the metrics add up (draft + slim + full tokens = committed = the output) and agree with an
  independent count of full-verifier passes; observers see exactly the committed tokens;
* each mode runs the verifiers it should (none/lenient: no slim verifier; lossless/audit: q on
  every cycle; lossy: q only when u escalates);
* a budget or an EOS ends the output exactly where one-token-at-a-time decoding would, and cuts the
  metrics and the observers with it;
* lossless keeps drafts and uses all three tiers, and both paths of a cycle (accept, reject) run;
* lossy makes fewer full passes per token and rejects fewer drafts than none;
* audit makes lossy's decisions and reports how often q would have overruled them;
* a rules plugin replaces the built-in gate; lenient with a large lenience accepts more and
  reports what q would have overruled.

Every tiered mode runs its tier on every cycle here (``adaptive=False``): these are each mode's own
invariants. The adaptive tier, which switches between a mode and untiered verification cycle by
cycle, is held to the same invariants in tests/conformance/test_adaptive.py.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.expected_warnings import junk_drafter_warning
from tests.support.frameworks import GREEDY, Recorder
from viasd_adapt.core.hooks import hookimpl
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier


FRAMEWORKS = ["engine", "hf", "pearl", "eagle", "seq2seq"]
MODES = ["none", "lenient", "lossless", "lossy", "audit"]
N, GAMMA = 24, 4
SAMPLED = SamplingConfig(do_sample=True, temperature=0.8)
SAMPLINGS = pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampling"])
#: the framework name observers see (the HF adapter serves encoder-decoder targets too)
LABEL = {"seq2seq": "hf"}


def lossy_warning(framework: str, mode: str, sampling=GREEDY):
    """What a greedy lossy test on these pairs provokes: the drafter-quality monitor's warning, on
    every framework alike (their slim verifiers are nearly flat, so the drafts gate 1 commits are
    their argmax about half the time), except on the encoder-decoder pair."""
    expected = mode == "lossy" and sampling.greedy and framework != "seq2seq"
    return junk_drafter_warning(LABEL.get(framework, framework), expected=expected)


def _summed(driver, mode: str, sampling=GREEDY, variant=None) -> tuple[TierMetrics, int]:
    """Metrics summed over the driver's prompts (one seed each), and the full passes counted by a hook."""
    total, counted = TierMetrics(), 0
    for seed, prompt in enumerate(driver.prompts[:3]):
        with driver.count_full_passes() as calls:
            out = driver.generate(prompt, N, TierSettings(mode=mode, gamma=GAMMA, adaptive=False), sampling=sampling, seed=seed,
                                  variant=variant)
        assert out.metrics.draft_tokens + out.metrics.slim_tokens + out.metrics.full_tokens == len(out.tokens) == N
        total, counted = total.merge(out.metrics), counted + len(calls)
    return total, counted


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_metrics_add_up_and_observers_see_every_committed_token(drivers, request, framework, mode):
    driver = drivers.modes(request, framework)
    with lossy_warning(framework, mode):
        for seed, prompt in enumerate(driver.prompts[:2]):
            recorder = Recorder()
            with driver.count_full_passes() as calls:
                out = driver.generate(prompt, N, TierSettings(mode=mode, gamma=GAMMA, adaptive=False), plugins=[recorder], seed=seed)
            m = out.metrics
            assert len(out.tokens) == len(out.tiers) == m.committed == N and out.tiers == m.token_tiers
            assert m.draft_tokens + m.slim_tokens + m.full_tokens == N
            assert len(m.accepted_lengths) == m.cycles and sum(m.accepted_lengths) == N
            assert m.mean_accepted_length == pytest.approx(N / m.cycles)
            assert 0 <= m.drafts_rejected <= m.drafts_judged <= m.drafted and 0.0 <= m.rejection_rate <= 1.0
            assert m.full_passes == len(calls)  # the metrics agree with an independent count
            assert m.full_passes_per_token == pytest.approx(m.full_passes / N)
            # observers: every committed token once, in order, with its tier; every cycle once
            assert [e.token for e in recorder.events] == out.tokens
            assert [e.tier for e in recorder.events] == out.tiers
            assert [e.index for e in recorder.events] == list(range(N))
            assert {e.mode for e in recorder.events} == {mode}
            assert {e.framework for e in recorder.events} == {LABEL.get(framework, framework)}
            assert len(recorder.cycles) == m.cycles
            assert sum(len(tokens) for tokens, _ in recorder.cycles) == N
            assert recorder.cycles[-1][1] == N  # the metrics observers get are the running ones
            # which verifiers ran
            if mode in ("none", "lenient"):
                assert m.slim_passes == m.slim_tokens == 0
            else:
                assert m.slim_passes > 0
            if mode != "lossy":
                assert m.full_passes == m.cycles  # q once per cycle (in audit: in shadow)
            else:
                assert m.full_passes <= m.cycles and m.tv_distance is None
            if mode in ("audit", "lenient"):  # audit pays for q's opinion; lenient has it for free
                assert m.audited == N - driver.first_drafted  # every token a tier decided (not q's prefill token)
                assert 0.0 <= m.overrule_rate <= 1.0 and 0.0 <= m.tv_distance <= 1.0
                assert all(0 <= position < N for position in m.overruled_positions)


@pytest.mark.parametrize("mode", ["none", "lossless", "lossy", "audit"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_budget_and_eos_end_the_output_exactly(drivers, request, framework, mode):
    driver = drivers.modes(request, framework)
    with lossy_warning(framework, mode):
        settings, prompt = TierSettings(mode=mode, gamma=GAMMA, adaptive=False), driver.prompts[0]
        long = driver.generate(prompt, N, settings).tokens
        for n in (1, 2, 3, 5, 6, 7):  # budgets ending inside the first blocks, and the prefill alone
            recorder = Recorder()
            out = driver.generate(prompt, n, settings, plugins=[recorder])
            assert out.tokens == long[:n], n
            _assert_cut_exactly(driver, out, recorder, mode, n)
        eos = long[5]
        stop = long.index(eos)
        recorder = Recorder()
        out = driver.generate(prompt, N, settings, eos=eos, plugins=[recorder])
        assert out.tokens == long[: stop + 1] and out.tokens[-1] == eos
        _assert_cut_exactly(driver, out, recorder, mode, stop + 1)
    driver.assert_pristine()  # PEARL: no thread left behind


def _assert_cut_exactly(driver, out, recorder, mode: str, n: int) -> None:
    """A cut cycle is cut before it is counted or shown to observers."""
    assert out.metrics.committed == len(out.tiers) == len(out.tokens) == n
    assert sum(out.metrics.accepted_lengths) == n
    assert [e.token for e in recorder.events] == out.tokens
    assert [e.index for e in recorder.events] == list(range(n))
    if mode == "audit":  # a cut cycle is audited only as far as it is kept
        assert out.metrics.audited == n - driver.first_drafted


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lossless_keeps_drafts_uses_every_tier_and_both_paths_of_a_cycle(drivers, request, framework):
    """Guards against a wrapper that silently does nothing: u must correct some drafts and keep
    others, q must decide some tokens, and drafts are both accepted and rejected. (EAGLE: its
    cascade strategy; the route strategy lets u only choose the path, and q decides.)"""
    driver = drivers.modes(request, framework)
    for mode in ("none", "lossless"):
        total, _ = _summed(driver, mode, variant="cascade" if framework == "eagle" and mode == "lossless" else None)
        assert 0 < total.drafts_rejected < total.drafts_judged and total.draft_tokens > 0, mode
    tiers = total.token_tiers
    assert tiers.count(Tier.DRAFT) > 0 and tiers.count(Tier.SLIM) > 0 and tiers.count(Tier.FULL) > 0


@SAMPLINGS
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lossy_cuts_full_passes_and_rejections(drivers, request, framework, sampling):
    driver = drivers.modes(request, framework)
    plain, plain_passes = _summed(driver, "none", sampling)
    with lossy_warning(framework, "lossy", sampling):
        lossy, lossy_passes = _summed(driver, "lossy", sampling)
    assert (plain.full_passes, lossy.full_passes) == (plain_passes, lossy_passes)  # metrics match a hook count
    assert lossy.full_passes_per_token < plain.full_passes_per_token
    assert lossy.rejection_rate < plain.rejection_rate
    assert lossy.slim_passes > 0 and plain.slim_passes == 0
    assert lossy.slim_tokens + lossy.draft_tokens > 0


@SAMPLINGS
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_audit_makes_lossys_decisions_and_reports_the_overrules(drivers, request, framework, sampling):
    driver = drivers.modes(request, framework)
    with lossy_warning(framework, "lossy", sampling):
        for seed, prompt in enumerate(driver.prompts[:2]):
            settings = TierSettings(mode="lossy", gamma=GAMMA, adaptive=False)
            lossy = driver.generate(prompt, N, settings, sampling=sampling, seed=seed)
            audit = driver.generate(prompt, N, settings.with_(mode="audit"), sampling=sampling, seed=seed)
            assert audit.tokens == lossy.tokens and audit.tiers == lossy.tiers  # audit only observes
            m = audit.metrics
            assert m.drafts_rejected == lossy.metrics.drafts_rejected
            assert m.full_passes == m.cycles >= lossy.metrics.full_passes  # q in shadow, every cycle
            assert m.audited > 0 and 0.0 <= m.overrule_rate <= 1.0 and 0.0 <= m.tv_distance <= 1.0
            if sampling.greedy:  # a token is overruled exactly where lossy leaves the target's greedy path
                reference = driver.reference(prompt, N)
                first = next((i for i, (a, b) in enumerate(zip(audit.tokens, reference)) if a != b), None)
                if first is None:
                    assert m.overruled_positions == [] and m.overrule_rate == 0.0
                else:
                    assert m.overruled_positions[0] == first and m.overrule_rate > 0.0


class RejectEveryDraft:
    """A rules plugin replacing gate 1: no draft ever passes."""

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        return torch.zeros(tokens.shape[0])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_rules_plugin_replaces_the_builtin_gate(drivers, request, framework):
    driver = drivers.modes(request, framework)
    settings = TierSettings(mode="lossy", gamma=GAMMA, adaptive=False)
    with lossy_warning(framework, "lossy"):
        baseline = driver.generate(driver.prompts[0], N, settings)
    assert baseline.metrics.draft_tokens > 0
    out = driver.generate(driver.prompts[0], N, settings, plugins=[RejectEveryDraft()])
    assert out.metrics.draft_tokens == 0  # gate 1 never passes: nothing is committed as tier 1 ...
    assert out.metrics.slim_tokens + out.metrics.full_tokens == out.metrics.committed == N  # ... u or q decides


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lenient_accepts_more_and_reports_what_it_overruled(drivers, request, framework):
    driver = drivers.modes(request, framework)
    strict_rejections = loose_rejections = 0
    for prompt in driver.prompts[:3]:
        strict = driver.generate(prompt, N, TierSettings(mode="lenient", lenience=0.0, gamma=GAMMA))
        loose = driver.generate(prompt, N, TierSettings(mode="lenient", lenience=0.9, gamma=GAMMA))
        strict_rejections += strict.metrics.drafts_rejected
        loose_rejections += loose.metrics.drafts_rejected
        first = next((i for i, (a, b) in enumerate(zip(loose.tokens, strict.tokens)) if a != b), None)
        if first is None:
            assert loose.metrics.overrule_rate == 0.0
        else:  # greedy: a token is overruled exactly when it is not q's argmax
            assert min(loose.metrics.overruled_positions) == first
    assert loose_rejections < strict_rejections
