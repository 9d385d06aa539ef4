"""Greedy identity, on every framework: the exact modes (none, lenient with lenience 0, lossless)
give the target's own greedy output token for token, and so does stock assisted generation where
a framework wraps one (HF). Also through the framework registry (what ``viasd generate`` and the
bench run), plain rows included.

Each framework runs on every model family it supports here, over three prompts whose lengths and
block lengths vary (1 new token: the budget ends before any block; 9 with gamma 1; 26, past
Gemma2's 16-token sliding window, with gamma 6). Encoder-decoder targets run on three sources, two
of them with a decoder prefix after the start token, with transformers' small init and with unit-gain weights
(a target that listens to its source, see :func:`tests.support.seq2seq.unit_gain_init`).
"""

from __future__ import annotations

import pytest
import torch

from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.models.tiny import FAMILIES
from viasd_adapt.models.tiny_seq2seq import SEQ2SEQ_FAMILIES
from viasd_adapt.core.settings import TierSettings


LENGTHS = (1, 9, 26)
GAMMAS = (4, 1, 6)
#: lossless twice: the cascade on every cycle, and with the adaptive tier (the default), which starts
#: untiered and runs the cascade when it pays (both arms within one sequence: test_adaptive.py)
EXACT = {"none": TierSettings(mode="none"), "lenient": TierSettings(mode="lenient", lenience=0.0),
         "lossless-fixed": TierSettings(mode="lossless", adaptive=False), "lossless": TierSettings(mode="lossless")}
#: EAGLE has two lossless strategies (route: the cascade on eagle's chosen path; cascade: over the tree)
VARIANTS = {"eagle": ("route", "cascade")}

CASES = ([("engine", family) for family in ("llama", "gemma2", "gpt2", "gpt_neox")]
         + [("hf", family) for family in FAMILIES]
         + [("pearl", family) for family in ("llama", "gpt2", "qwen2")]
         + [("eagle", "llama")]
         + [("seq2seq", family + init) for family in SEQ2SEQ_FAMILIES for init in ("", "+unit-gain")])


@pytest.mark.parametrize("framework, family", CASES)
def test_exact_modes_are_token_identical_to_the_targets_greedy_output(drivers, request, framework, family):
    driver = drivers.greedy(request, framework, family)
    totals = {mode: TierMetrics() for mode in EXACT}
    for prompt, n, gamma in zip(driver.prompts, LENGTHS, GAMMAS):
        expected = driver.reference(prompt, n)
        assert len(expected) == n
        stock = driver.stock(prompt, n, gamma)  # HF: transformers' own assisted generation
        assert (stock is None) == (framework not in ("hf", "seq2seq")), framework
        assert stock in (None, expected), "stock assisted generation differs from the target's greedy output"
        for mode, settings in EXACT.items():
            for variant in VARIANTS.get(framework, (None,)) if mode.startswith("lossless") else (None,):
                out = driver.generate(prompt, n, settings.with_(gamma=gamma), variant=variant)
                assert out.tokens == expected, (mode, variant, prompt)
                m = out.metrics
                assert m.committed == len(out.tiers) == n and out.tiers == m.token_tiers
                assert m.draft_tokens + m.slim_tokens + m.full_tokens == n
                assert m.full_passes == m.cycles and m.slim_passes <= m.cycles  # q once per cycle, u at most once
                if mode == "lenient":  # lenient audits itself against q for free
                    assert m.audited >= n - driver.first_drafted
                totals[mode] = totals[mode].merge(m)
    # only lossless asked the slim verifier (that both the accept and the reject paths of a cycle
    # run is checked on the pair built for it, in test_modes.py); the adaptive tier only on its tier's cycles
    assert totals["none"].slim_passes == totals["lenient"].slim_passes == 0 < totals["lossless-fixed"].slim_passes
    assert totals["lossless-fixed"].tier_cycles == totals["lossless-fixed"].slim_passes  # every drafting cycle, one slim pass each
    adaptive = totals["lossless"]
    assert adaptive.slim_passes <= adaptive.tier_cycles <= adaptive.cycles
    assert totals["lenient"].overrule_rate == 0.0  # lenience 0 accepts only what q would have picked
    driver.assert_pristine()


# ============================================================================== through the registry

#: the rows of each framework whose output must be the target's greedy output ("plain": no viasd at all)
EXACT_ROWS = {"ar": ("none",), "engine": ("none", "lenient", "lossless"), "hf": ("plain", "none", "lenient", "lossless"),
              "pearl": ("none", "lenient", "lossless"), "eagle": ("plain", "none", "lenient", "lossless")}


def _loaded_pair(driver, framework: str):
    from viasd_adapt.models.pair import LoadedPair, MaskInfo

    mask = MaskInfo(driver.mask, "test mask", False)
    if framework == "eagle":  # the EaModel is already loaded: the registry entry takes it from ``loaded``
        with pytest.warns(DeprecationWarning, match=r"LoadedPair\(loaded=\.\.\.\) is deprecated"):  # kept until 0.4.0
            return LoadedPair(driver.target, None, driver.ea_model.tokenizer, mask, torch.device("cpu"),
                              target_path=driver.stock_target.name_or_path, eagle_head="(loaded)",
                              loaded={"eagle": driver.ea_model})
    return LoadedPair(driver.target, driver.pair.drafter, None, mask, torch.device("cpu"))


@pytest.mark.parametrize("framework", list(EXACT_ROWS))
def test_registry_rows_in_exact_modes_equal_the_targets_greedy_output(drivers, request, framework):
    """``frameworks.run`` as ``viasd generate`` and the bench call it. The prompt starts with token
    id 0 (the BOS id of the project's own tokenizer), and the model's generation config has no pad
    id: a runner that hands transformers a pad id of 0 and no attention mask has the prompt's first
    token masked out, and silently decodes something else."""
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest

    driver = drivers.greedy(request, "engine" if framework != "eagle" else "eagle", "llama")
    prompt = driver.prompts[1] if framework == "eagle" else [0, 5, 17, 2, 40, 9]
    if framework != "eagle":
        assert prompt[0] == 0 and driver.target.generation_config.pad_token_id is None
    expected = driver.reference(prompt, 12)
    for mode in EXACT_ROWS[framework]:
        settings = TierSettings(mode="none" if mode == "plain" else mode, lenience=0.0, gamma=3)
        out = frameworks.run(framework, _loaded_pair(driver, framework), RunRequest(mode, prompt, 12, settings,
                                                                                   stop_at_eos=False))
        assert out.tokens == expected, (framework, mode)
        assert (out.metrics is None) == (mode == "plain")
    if framework == "eagle":
        return
    # stop_at_eos=False must write past EOS even when the model's generation config names one (an
    # unset eos_token_id is filled in from it by transformers, which then stops early)
    config = driver.target.generation_config
    saved = config.eos_token_id
    config.eos_token_id = expected[2]
    try:
        for mode in EXACT_ROWS[framework]:
            settings = TierSettings(mode="none" if mode == "plain" else mode, lenience=0.0, gamma=3)
            out = frameworks.run(framework, _loaded_pair(driver, framework),
                                 RunRequest(mode, prompt, 12, settings, stop_at_eos=False))
            assert out.tokens == expected, ("past EOS", framework, mode)
    finally:
        config.eos_token_id = saved


@pytest.mark.parametrize("family", ["t5", "whisper"])
def test_registry_rows_for_an_encoder_decoder_pair(drivers, request, family):
    """The runners the registry calls for an encoder-decoder pair: the exact rows of ar, engine and
    hf agree with the target's greedy output, and the tiered rows report their passes."""
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.models.pair import LoadedPair, MaskInfo
    from viasd_adapt.frameworks.requests import RunRequest

    driver = drivers.greedy(request, "seq2seq", family)
    source = driver.prompts[0]
    pair = LoadedPair(driver.target, driver.pair.drafter, None, MaskInfo(driver.mask, "test", False), torch.device("cpu"))
    request_kwargs = (dict(prompt_ids=source["input_ids"][0].tolist()) if family != "whisper"
                      else dict(prompt_ids=[], input_features=source["input_features"]))
    expected = driver.reference(source, 10)
    rows = [("ar", "none"), ("engine", "none"), ("engine", "lossless"), ("hf", "plain"), ("hf", "lossless"), ("hf", "lossy")]
    outputs = {}
    for framework, mode in rows:  # the tiered rows with the tier on every cycle, as the bench's lossless and lossy rows
        settings = TierSettings(mode="none" if mode == "plain" else mode, adaptive=False)
        outputs[framework, mode] = out = frameworks.run(framework, pair, RunRequest(
            mode=mode, max_new_tokens=10, settings=settings, stop_at_eos=False, **request_kwargs))
        assert len(out.tokens) == 10
        if mode != "lossy":
            assert out.tokens == expected, (framework, mode)
    assert outputs["hf", "lossless"].metrics.slim_passes > 0 and outputs["hf", "lossy"].metrics.slim_passes > 0
    assert outputs["ar", "none"].metrics.full_passes == 10
