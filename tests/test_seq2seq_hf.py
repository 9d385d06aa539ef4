"""Encoder-decoder targets through ``generate(assistant_model=...)``: lossless identity on every
family, mode none is stock, lossy cuts full passes, audit, batches, and the framework runners."""

from __future__ import annotations

import pytest
import torch

from tests.test_seq2seq_pairs import VOCAB, make_seq2seq_pair, source_for, unit_gain_init
from viasd_adapt.adapters import hf, hf_seq2seq
from viasd_adapt.models.tiny_seq2seq import SEQ2SEQ_FAMILIES
from viasd_adapt.pair import LoadedPair, MaskInfo, RunRequest
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.seq2seq import run_ar, run_engine
from viasd_adapt.settings import TierSettings
from viasd_adapt.tiers import Tier

torch.set_num_threads(1)

CASES = [(0, 0, 1), (1, 2, 9), (2, 4, 22)]  # (source seed, decoder prefix length, new tokens)


def call_kwargs(family: str, target, seed: int, prefix: int) -> dict:
    """A source, and for text models a decoder prefix after the start token (varied decoder states)."""
    kwargs = source_for(family, seed)
    if prefix and family != "whisper":  # Whisper's generate builds its own decoder prompt
        start = target.generation_config.decoder_start_token_id
        body = torch.randint(3, VOCAB - 3, (1, prefix), generator=torch.Generator().manual_seed(seed + 100))
        kwargs["decoder_input_ids"] = torch.cat([torch.tensor([[start]]), body], dim=1)
    return kwargs


def constant_drafts(drafter, gamma: int = 5) -> None:
    config = drafter.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = gamma, "constant"
    config.assistant_confidence_threshold = 0.0


@pytest.mark.parametrize("unit_gain", [False, True], ids=["hf-init", "unit-gain"])
@pytest.mark.parametrize("family", SEQ2SEQ_FAMILIES)
def test_lossless_greedy_is_token_identical_to_stock_assisted_and_plain_greedy(family, unit_gain):
    target, drafter, mask = make_seq2seq_pair(family, unit_gain=unit_gain)
    constant_drafts(drafter)
    for seed, prefix, n_new in CASES:
        kwargs = call_kwargs(family, target, seed, prefix)
        plain = target.generate(**kwargs, max_new_tokens=n_new, do_sample=False)
        stock = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=n_new, do_sample=False)
        with hf.tiered(target, settings=TierSettings(mode="none")) as observed:
            none = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=n_new, do_sample=False)
        with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
            out = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=n_new, do_sample=False)
        assert out.tolist() == stock.tolist() == plain.tolist() == none.tolist(), (family, seed)
        metrics = session.last_metrics
        decoder_prompt = kwargs["decoder_input_ids"].shape[1] if "decoder_input_ids" in kwargs else 1
        new = out.shape[1] - (0 if family == "whisper" else decoder_prompt)  # Whisper strips its decoder prompt
        stripped_eos = (0, 1) if family == "whisper" else (0,)  # ... and a final EOS (== its pad id)
        assert metrics.committed - new in stripped_eos and observed.last_metrics.committed - new in stripped_eos
        assert metrics.draft_tokens + metrics.slim_tokens + metrics.full_tokens == metrics.committed
        assert metrics.full_passes == metrics.cycles and metrics.slim_passes <= metrics.cycles
    assert "generate" not in target.__dict__


def test_lossless_with_a_decoder_only_whisper_drafter_reading_the_target_encoder():
    """distil-Whisper's set-up: a WhisperForCausalLM assistant reads the target's encoder output."""
    target, drafter, mask = make_seq2seq_pair("whisper", decoder_only_drafter=True)
    assert not drafter.config.is_encoder_decoder
    constant_drafts(drafter)
    for seed in range(3):
        kwargs = source_for("whisper", seed)
        stock = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=16, do_sample=False)
        with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
            out = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=16, do_sample=False)
        assert out.tolist() == stock.tolist()
        assert session.last_metrics.draft_tokens > 0  # the drafter really drafted from the source


def test_lossless_uses_the_slim_tier_and_keeps_drafts():
    totals = {tier: 0 for tier in Tier}
    for family in ("bart", "whisper"):
        target, drafter, mask = make_seq2seq_pair(family)
        with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
            for seed in range(4):
                target.generate(**call_kwargs(family, target, seed, 3), assistant_model=drafter, max_new_tokens=20,
                                do_sample=False)
        for tier in session.metrics.token_tiers:
            totals[Tier(tier)] += 1
    assert totals[Tier.DRAFT] > 0 and totals[Tier.SLIM] > 0 and totals[Tier.FULL] > 0


def test_a_padded_batch_decodes_each_row_like_plain_batched_generate():
    target, drafter, mask = make_seq2seq_pair("bart")
    unit_gain_init(target, seed=0)  # the output must depend on which source positions are masked
    ids = torch.randint(3, VOCAB - 3, (2, 7), generator=torch.Generator().manual_seed(5))
    attention = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    plain = target.generate(input_ids=ids, attention_mask=attention, max_new_tokens=12, do_sample=False)
    unmasked = target.generate(input_ids=ids, max_new_tokens=12, do_sample=False)
    assert plain[1].tolist() != unmasked[1].tolist()  # the mask matters for this model and source
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")):
        out = target.generate(input_ids=ids, attention_mask=attention, assistant_model=drafter, max_new_tokens=12,
                              do_sample=False, return_dict_in_generate=True)
    assert out.sequences.tolist() == plain.tolist()
    assert len(out.viasd_row_metrics) == 2


def damped_pair():
    """A Whisper pair whose skipped decoder layers barely write to the residual stream, so the slim
    verifier agrees with q where the drafter does not: the regime the tier is for."""
    target, drafter, mask = make_seq2seq_pair("whisper", layers=6)
    constant_drafts(drafter)
    with torch.no_grad():
        for index in mask.skipped:
            layer = find_decoder_stack(target).layers[index]
            for module in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                module.weight.mul_(0.05)
    return target, drafter, mask


def count_full_passes(target, mask, run) -> int:
    """q passes counted from the outside: calls of decoder layer s1, which every q pass runs and no
    slim pass does (the assistant is another model)."""
    calls = []
    hook = find_decoder_stack(target).layers[mask.first_skipped].register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        run()
    finally:
        hook.remove()
    return len(calls)


def test_lossy_cuts_full_passes_and_rejections_versus_stock_assisted_generation():
    target, drafter, mask = damped_pair()
    sources = [source_for("whisper", seed) for seed in range(4)]

    def run_all():
        for kwargs in sources:
            target.generate(**kwargs, assistant_model=drafter, max_new_tokens=24, do_sample=False)

    with hf.tiered(target, settings=TierSettings(mode="none")) as stock:
        stock_passes = count_full_passes(target, mask, run_all)
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy")) as lossy:
        lossy_passes = count_full_passes(target, mask, run_all)
    m, b = lossy.metrics, stock.metrics
    assert m.full_passes == lossy_passes and b.full_passes == stock_passes  # metrics match a hook count
    assert lossy_passes / m.committed < stock_passes / b.committed
    assert m.rejection_rate < b.rejection_rate
    assert m.slim_passes > 0 and m.slim_tokens + m.draft_tokens > 0


def test_audit_runs_q_every_cycle_and_decides_like_lossy():
    target, drafter, mask = damped_pair()
    kwargs = source_for("whisper", 7)
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="audit")) as audit:
        audited = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=20, do_sample=False)
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy")):
        lossy = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=20, do_sample=False)
    m = audit.last_metrics
    assert audited.tolist() == lossy.tolist()
    assert m.full_passes == m.cycles and m.audited >= m.committed
    assert m.overrule_rate is not None and m.tv_distance is not None


@pytest.mark.parametrize("family", ["t5", "whisper"])
def test_framework_runners_for_a_seq2seq_pair(family):
    """The runners the registry calls for an encoder-decoder pair: ar, engine and hf rows agree in
    the exact modes, and the tiered rows report their passes."""
    target, drafter, mask = make_seq2seq_pair(family)
    pair = LoadedPair(target, drafter, None, MaskInfo(mask, "test", False), torch.device("cpu"))
    source = source_for(family, 4)
    request = dict(prompt_ids=source["input_ids"][0].tolist()) if family != "whisper" else dict(
        prompt_ids=[], input_features=source["input_features"])
    outputs = {}
    for name, runner, mode in [("ar", run_ar, "plain"), ("engine", run_engine, "none"), ("engine", run_engine, "lossless"),
                               ("hf", hf_seq2seq.run, "plain"), ("hf", hf_seq2seq.run, "lossless"),
                               ("hf", hf_seq2seq.run, "lossy")]:
        settings = TierSettings(mode="none" if mode == "plain" else mode)
        out = runner(pair, RunRequest(mode=mode, max_new_tokens=10, settings=settings, stop_at_eos=False, **request))
        outputs[name, mode] = out
        assert len(out.tokens) == 10
    exact = {key: out.tokens for key, out in outputs.items() if key[1] != "lossy"}
    assert len({tuple(tokens) for tokens in exact.values()}) == 1, exact
    assert outputs["hf", "lossless"].metrics.slim_passes > 0
    assert outputs["ar", "plain"].metrics.full_passes == 10
