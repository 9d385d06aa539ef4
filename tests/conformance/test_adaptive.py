"""The adaptive tier on every framework: a controller switches, cycle by cycle, between the tiered
mode and untiered verification, and no guarantee of the mode changes.

The controller is made to switch (:class:`tests.support.adaptive.Alternating`: the tier on every
other cycle, chosen from the cycles before it), so that both arms run within one sequence, which
each test asserts:

* greedy identity: adaptive lossless is the target's own greedy output, token for token;
* the mode invariants of test_modes.py hold with the arms mixed (metrics add up and agree with an
  independent count of q passes, observers see every committed token; the slim verifier runs on
  the tier's cycles only) and every token an untiered cycle commits in lossy mode is q's argmax
  given its prefix: the caches lagging behind (u after an untiered cycle, q after a lossy one) catch
  up correctly;
* lossy's fidelity can only gain: an adaptive lossy run overrules the target no more than fixed lossy;
* sampling: the chi-square test of test_sampling.py (switching rows there) and its CONTROL here: a
  step that picks the arm after seeing the cycle's outcome (:class:`~tests.support.adaptive.AnticipatingStep`)
  fails the very same test.
"""

from __future__ import annotations

import pytest
import torch

from tests.support.adaptive import AnticipatingStep, both_arms_ran, real_switching, switching
from tests.support.expected_warnings import junk_drafter_warning
from tests.support.frameworks import Recorder
from tests.support.stats import ALPHA, chi_square_pvalue, exact_joint, joint_counts, outside_support
from viasd_adapt.core.adaptive import Arm, TierController
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings


FRAMEWORKS = ["engine", "hf", "pearl", "eagle", "seq2seq"]
N, GAMMA = 24, 4


def _generate(driver, prompt, n, settings, controllers=switching, **kwargs):
    """One generation with a switching controller; returns it and the controller that decided it
    (a step makes one when it is built, and one per generation; EAGLE may continue past EOS with
    another ``eagenerate`` call: its arms, in order, are the generation's). ``controllers``: the
    forced alternating ones, or :func:`~tests.support.adaptive.real_switching`'s real ones."""
    with controllers() as controllers:
        out = driver.generate(prompt, n, settings, **kwargs)
    used = [c for c in controllers if c.history]
    assert used
    for other in used[1:]:
        used[0].history += other.history
    return out, used[0]


@pytest.mark.parametrize("framework, family", [("engine", "llama"), ("hf", "llama"), ("pearl", "llama"), ("eagle", "llama"),
                                               ("seq2seq", "bart")])
def test_adaptive_lossless_is_the_targets_greedy_output_while_switching(drivers, request, framework, family):
    driver = drivers.greedy(request, framework, family)
    for variant in ("route", "cascade") if framework == "eagle" else (None,):
        for prompt, n, gamma in zip(driver.prompts[1:], (9, 26), (1, 6)):
            out, controller = _generate(driver, prompt, n, TierSettings(mode="lossless", gamma=gamma), variant=variant)
            assert out.tokens == driver.reference(prompt, n), (variant, prompt)
            assert both_arms_ran(controller), controller.history
            m = out.metrics
            assert m.tier_cycles == controller.history.count(Arm.TIER) and m.slim_passes <= m.tier_cycles
            assert m.full_passes == m.cycles  # q on every cycle, on either arm
    driver.assert_pristine()


@pytest.mark.parametrize("framework, family", [("engine", "llama"), ("hf", "llama"), ("pearl", "llama"), ("eagle", "llama"),
                                               ("seq2seq", "bart")])
def test_the_real_controller_keeps_adaptive_lossless_the_targets_greedy_output(drivers, request, framework, family):
    """The same identity with the real controller and the plan each framework's run builds (its
    prices and priors), its knobs set to probe an idle arm after one cycle so that both arms run (the forced
    alternating test above holds the control: a lossy run overrules the target)."""
    driver = drivers.greedy(request, framework, family)
    switched = 0
    for variant in ("route", "cascade") if framework == "eagle" else (None,):
        for prompt, n, gamma in zip(driver.prompts[1:], (9, 26), (1, 6)):
            out, controller = _generate(driver, prompt, n, TierSettings(mode="lossless", gamma=gamma),
                                        controllers=real_switching, variant=variant)
            assert type(controller) is TierController
            assert out.tokens == driver.reference(prompt, n), (variant, prompt)
            switched += both_arms_ran(controller)
            assert out.metrics.tier_cycles == controller.history.count(Arm.TIER)
    assert switched >= 1
    driver.assert_pristine()


@torch.no_grad()
def _argmax_after(driver, prompt, prefixes: list[list[int]]) -> list[int]:
    """The target's argmax after the prompt and each prefix of generated tokens (EAGLE: the same
    weights loaded by transformers; an encoder-decoder prompt: its source and decoder prompt)."""
    model = getattr(driver, "stock_target", None) or driver.target
    if not isinstance(prompt, dict):
        return [int(model(torch.tensor([list(prompt) + prefix])).logits[0, -1].argmax()) for prefix in prefixes]
    source = {k: v for k, v in prompt.items() if k != "decoder_input_ids"}
    start = prompt["decoder_input_ids"][0].tolist() if "decoder_input_ids" in prompt \
        else [model.generation_config.decoder_start_token_id]
    return [int(model(**source, decoder_input_ids=torch.tensor([start + prefix])).logits[0, -1].argmax()) for prefix in prefixes]


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_mode_invariants_hold_with_the_arms_mixed(drivers, request, framework, mode):
    driver = drivers.modes(request, framework)
    # EAGLE's head on this pair is junk to the monitor even on half the cycles (it warns on fixed lossy everywhere)
    with junk_drafter_warning(framework, expected=mode == "lossy" and framework == "eagle"):
        for seed, prompt in enumerate(driver.prompts[:2]):
            recorder = Recorder()
            with driver.count_full_passes() as calls:
                out, controller = _generate(driver, prompt, N, TierSettings(mode=mode, gamma=GAMMA), plugins=[recorder],
                                            seed=seed)
            m = out.metrics
            assert both_arms_ran(controller)
            assert len(out.tokens) == m.committed == N and out.tiers == m.token_tiers
            assert m.draft_tokens + m.slim_tokens + m.full_tokens == N and sum(m.accepted_lengths) == N
            assert m.full_passes == len(calls)  # the metrics agree with an independent count
            assert [e.token for e in recorder.events] == out.tokens
            assert len(recorder.cycles) == m.cycles
            # the slim verifier ran on the tier's cycles only; untiered cycles ran q once
            arms = controller.history[: m.cycles - driver.first_drafted]
            assert m.tier_cycles == arms.count(Arm.TIER) > 0 and 0 < m.slim_passes <= m.tier_cycles
            plain = arms.count(Arm.PLAIN)
            assert plain > 0
            if mode == "lossless":
                assert m.full_passes == m.cycles
            else:
                assert plain <= m.full_passes <= m.cycles
            # every token an untiered cycle committed is q's argmax after its prefix (caches caught up)
            decided = recorder.cycles[driver.first_drafted:]
            start, prefixes, expected = len(out.tokens) - sum(len(t) for t, _ in decided), [], []
            for arm, (tokens, _) in zip(arms, decided):
                if arm is Arm.PLAIN:
                    prefixes += [out.tokens[: start + i] for i in range(len(tokens))]
                    expected += tokens
                start += len(tokens)
            assert expected and _argmax_after(driver, prompt, prefixes) == expected
    driver.assert_pristine()


def _overruled(driver, prompt, tokens: list[int]) -> int:
    """Tokens that are not the target's argmax after their prefix (greedy overrules)."""
    argmax = _argmax_after(driver, prompt, [tokens[:i] for i in range(len(tokens))])
    return sum(a != t for a, t in zip(argmax, tokens))


@pytest.mark.parametrize("framework", ["engine", "hf", "pearl", "eagle"])
def test_adaptive_lossy_overrules_the_target_no_more_than_fixed_lossy(drivers, request, framework):
    """On the pair lossy mode is built for (its gate 1 commits the noisy drafter's tokens often), the
    untiered cycles of an adaptive run are exact, so its overrules, summed over the prompts, are no
    more than fixed lossy's (and some: the tier did run)."""
    driver = drivers.modes(request, framework)
    fixed = adaptive = 0
    with junk_drafter_warning(framework, expected=True):  # fixed lossy on this drafter: the monitor warns
        for seed, prompt in enumerate(driver.prompts[:3]):
            lossy = driver.generate(prompt, N, TierSettings(mode="lossy", gamma=GAMMA, adaptive=False), seed=seed)
            fixed += _overruled(driver, prompt, lossy.tokens)
    with junk_drafter_warning(framework, expected=framework == "eagle"):  # as in the invariants test
        for seed, prompt in enumerate(driver.prompts[:3]):
            out, controller = _generate(driver, prompt, N, TierSettings(mode="lossy", gamma=GAMMA), seed=seed)
            assert both_arms_ran(controller)
            adaptive += _overruled(driver, prompt, out.tokens)
    assert 0 < adaptive <= fixed, (adaptive, fixed)


# ============================================================================== the control


SAMPLING = SamplingConfig(do_sample=True, temperature=0.8, top_k=6, top_p=0.95)
N_SAMPLES = 300


def test_the_control_an_anticipating_controller_fails_the_chi_square_test(drivers, request):
    """The chi-square test of test_sampling.py, with one change: each cycle is decided both ways and
    the decision that commits more tokens is kept. Each decision alone is exact; choosing between
    them on their outcome favours accepted drafts, and the test sees it (the controller that reads
    only past cycles passes the same test: test_sampling.py's lossless-switching rows)."""
    from viasd_adapt.engine.drafters import ModelDrafter
    from viasd_adapt.engine.loop import speculative_generate
    from viasd_adapt.engine.verifier import TieredVerifier
    from viasd_adapt.routing.slim import SlimVerifier

    driver = drivers.sampling(request, "engine")
    prompt, skip = driver.prompts[0], driver.first_drafted
    settings = TierSettings(mode="lossless", gamma=2)
    total = TierMetrics()

    def sample(seed: int) -> list[int]:
        nonlocal total
        step = AnticipatingStep(settings, "engine", greedy=False)
        verifier = TieredVerifier(driver.target, settings, SAMPLING, slim=SlimVerifier(driver.target, driver.mask), step=step)
        out = speculative_generate(ModelDrafter(driver.pair.drafter, SAMPLING), verifier, prompt, skip + 2,
                                   generator=torch.Generator().manual_seed(seed))
        total = total.merge(out.metrics)
        return out.tokens

    counts = joint_counts(sample, N_SAMPLES, driver.vocab_size, skip)
    q = exact_joint(driver.next_probs(driver.target, prompt, SAMPLING), skip)
    assert counts.sum() == N_SAMPLES and outside_support(counts, q) == 0  # in q's support: the statistic decides
    assert 0 < total.tier_cycles < total.cycles - N_SAMPLES  # both arms were kept, on their outcomes
    assert chi_square_pvalue(counts, q) < ALPHA
