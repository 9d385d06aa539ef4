"""Lossy and audit modes through ``generate(assistant_model=...)``: cost, metrics and the generate contract."""

from __future__ import annotations

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from tests.test_hf_pairs import make_pair
from viasd_adapt.adapters import hf
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

GAMMA = 5
PROMPTS = [[4, 9, 2, 33], [17, 5], [60, 61, 62, 63, 1, 8], [12]]


def pair():
    target, drafter, mask = make_pair("llama", layers=6, sharpness=3.0)
    config = drafter.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = GAMMA, "constant"
    config.assistant_confidence_threshold = 0.0  # stock drafts exactly GAMMA tokens, like the lossy loop
    return target, drafter, mask


def count_full_passes(target, mask, run):
    """Full-verifier passes counted from the outside: calls of the decoder layer at the mask's first
    skipped layer s1. Every q pass runs it (a plain forward, or one resumed at s1) and no slim pass
    does, whichever weight-sharing view the pass goes through."""
    layer = target.model.layers[mask.first_skipped]
    calls = []
    hook = layer.register_forward_pre_hook(lambda module, args: calls.append(1))
    try:
        run()
    finally:
        hook.remove()
    return len(calls)


def test_lossy_cuts_full_passes_and_rejections_versus_stock_assisted_generation():
    target, drafter, mask = pair()
    n_new = 24
    stock_tokens = lossy_tokens = 0

    def stock_run():
        nonlocal stock_tokens
        for prompt in PROMPTS:
            out = target.generate(torch.tensor([prompt]), assistant_model=drafter, max_new_tokens=n_new, do_sample=False)
            stock_tokens += out.shape[1] - len(prompt)

    with hf.tiered(target, settings=TierSettings(mode="none", gamma=GAMMA)) as baseline:
        stock_passes = count_full_passes(target, mask, stock_run)

    def lossy_run():
        nonlocal lossy_tokens
        for prompt in PROMPTS:
            out = target.generate(torch.tensor([prompt]), assistant_model=drafter, max_new_tokens=n_new, do_sample=False)
            lossy_tokens += out.shape[1] - len(prompt)

    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA)) as lossy:
        lossy_passes = count_full_passes(target, mask, lossy_run)

    m, b = lossy.metrics, baseline.metrics
    assert m.committed == lossy_tokens and b.committed == stock_tokens
    assert m.full_passes == lossy_passes and b.full_passes == stock_passes  # metrics match a hook count
    assert m.draft_tokens + m.slim_tokens + m.full_tokens == m.committed
    assert lossy_passes / lossy_tokens < stock_passes / stock_tokens
    assert m.rejection_rate < b.rejection_rate
    assert m.slim_passes > 0


def test_audit_runs_q_every_cycle_and_reports_the_quality_audit():
    target, drafter, mask = pair()
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="audit", gamma=GAMMA)) as session:
        lossy_like = target.generate(torch.tensor([PROMPTS[0]]), assistant_model=drafter, max_new_tokens=20,
                                     do_sample=False, return_dict_in_generate=True)
    m = lossy_like.viasd_metrics
    assert m.full_passes == m.cycles  # one shadow q pass per cycle
    # Every committed token is audited (a cycle trimmed at the token budget is audited whole, as
    # TierMetrics.trim_to keeps audit sums).
    assert m.committed <= m.audited <= m.committed + GAMMA
    assert m.overrule_rate is not None and 0.0 <= m.overrule_rate <= 1.0
    assert m.tv_distance is not None
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA)):
        lossy = target.generate(torch.tensor([PROMPTS[0]]), assistant_model=drafter, max_new_tokens=20, do_sample=False)
    assert lossy.tolist() == lossy_like.sequences.tolist()  # audit only observes; decisions are lossy's


def test_lossy_honours_eos_max_new_tokens_stopping_criteria_and_streamers():
    target, drafter, mask = pair()
    prompt = torch.tensor([PROMPTS[2]])
    settings = TierSettings(mode="lossy", gamma=GAMMA)

    class Collect(BaseStreamer):
        def __init__(self):
            self.chunks, self.ended = [], False

        def put(self, value):
            self.chunks.append(value.reshape(-1).tolist())

        def end(self):
            self.ended = True

    class StopAtLength(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), input_ids.shape[1] >= prompt.shape[1] + 7, dtype=torch.bool)

    streamer = Collect()
    with hf.tiered(target, mask=mask, settings=settings):
        free = target.generate(prompt, assistant_model=drafter, max_new_tokens=30, do_sample=False, streamer=streamer)
        new = free[0, prompt.shape[1]:].tolist()
        assert len(new) == 30
        assert streamer.ended and sum(streamer.chunks, []) == free[0].tolist()  # prompt, then every token once

        eos = new[9]
        stopped = target.generate(prompt, assistant_model=drafter, max_new_tokens=30, do_sample=False, eos_token_id=eos)
        stopped_new = stopped[0, prompt.shape[1]:].tolist()
        assert stopped_new == new[: new.index(eos) + 1]

        short = target.generate(prompt, assistant_model=drafter, max_new_tokens=3, do_sample=False)
        assert short[0, prompt.shape[1]:].tolist() == new[:3]

        criteria = StoppingCriteriaList([StopAtLength()])
        halted = target.generate(prompt, assistant_model=drafter, max_new_tokens=30, do_sample=False,
                                 stopping_criteria=criteria)
        n_halted = halted.shape[1] - prompt.shape[1]
        assert 7 <= n_halted <= 7 + GAMMA and halted[0, prompt.shape[1]:].tolist() == new[:n_halted]


def test_lossy_sampling_is_seeded_and_respects_top_k():
    target, drafter, mask = pair()
    prompt = torch.tensor([PROMPTS[0]])

    def sample(seed, **sampling):
        torch.manual_seed(seed)
        return target.generate(prompt, assistant_model=drafter, max_new_tokens=16, do_sample=True, **sampling).tolist()

    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA)) as session:
        assert sample(7, temperature=1.0, top_k=0) == sample(7, temperature=1.0, top_k=0)  # seeded
        assert len({str(sample(seed, temperature=1.0, top_k=0)) for seed in range(4)}) > 1  # really samples
        # top_k=1 leaves one token per position for every tier: no seed can change the output.
        assert len({str(sample(seed, temperature=0.8, top_k=1)) for seed in range(3)}) == 1
    assert len(session.history) == 9  # some samples may stop early at EOS
    assert session.metrics.committed == sum(m.committed for m in session.history) <= 16 * 9


def test_plugins_observe_every_token_and_can_replace_a_rule():
    from viasd_adapt.hooks import hookimpl
    target, drafter, mask = pair()

    class Recorder:
        def __init__(self):
            self.events = []

        @hookimpl
        def viasd_token_decided(self, event):
            self.events.append(event)

    class RejectEveryDraft:
        @hookimpl
        def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
            return torch.zeros(tokens.shape[0])

    for mode in ("lossless", "lossy"):
        recorder = Recorder()
        with hf.tiered(target, mask=mask, settings=TierSettings(mode=mode, gamma=GAMMA), plugins=[recorder]) as session:
            out = target.generate(torch.tensor([PROMPTS[0]]), assistant_model=drafter, max_new_tokens=15, do_sample=False)
        new = out[0, len(PROMPTS[0]):].tolist()
        assert [e.token for e in recorder.events] == new, mode
        assert [e.tier for e in recorder.events] == session.metrics.token_tiers
        assert {e.framework for e in recorder.events} == {"hf"} and {e.mode for e in recorder.events} == {mode}

    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA), plugins=[RejectEveryDraft()]) as session:
        target.generate(torch.tensor([PROMPTS[0]]), assistant_model=drafter, max_new_tokens=15, do_sample=False)
    assert session.metrics.draft_tokens == 0  # gate 1 never passes: nothing is committed as tier 1
    assert session.metrics.slim_tokens + session.metrics.full_tokens == 15
    assert session.metrics.committed == 15


def test_lossy_decodes_a_left_padded_batch_row_by_row():
    target, drafter, mask = pair()
    pad = 0
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA)) as session:
        singles = [target.generate(torch.tensor([p]), assistant_model=drafter, max_new_tokens=12, do_sample=False,
                                   eos_token_id=None)[0, len(p):].tolist() for p in prompts]
        batch = target.generate(ids, attention_mask=attention, assistant_model=drafter, max_new_tokens=12,
                                do_sample=False, eos_token_id=None, pad_token_id=pad, return_dict_in_generate=True)
    assert batch.sequences.shape == (3, width + 12)
    assert batch.sequences[:, :width].tolist() == ids.tolist()
    assert batch.sequences[:, width:].tolist() == singles
    assert len(batch.viasd_row_metrics) == 3
    assert batch.viasd_metrics.committed == 36 == sum(m.committed for m in batch.viasd_row_metrics)
    assert session.history[-1] is batch.viasd_metrics
