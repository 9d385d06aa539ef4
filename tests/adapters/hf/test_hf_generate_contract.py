"""The ``generate`` contract in the tiered modes: streamers, stopping criteria, left-padded batches,
and a session's bookkeeping over many calls.

Cost (lossy against stock assisted generation, counted by a hook), audit, observers, rules plugins,
budgets, EOS and seeded sampling are tested on the HF adapter in tests/conformance/.
"""

from __future__ import annotations

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

import viasd_adapt
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import hf
from viasd_adapt.core.settings import TierSettings


GAMMA = 5
PROMPTS = [[4, 9, 2, 33], [17, 5], [60, 61, 62, 63, 1, 8], [12]]


def pair():
    target, drafter, mask = truncated_pair("llama", layers=6, sharpness=3.0)
    config = drafter.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = GAMMA, "constant"
    config.assistant_confidence_threshold = 0.0  # stock drafts exactly GAMMA tokens, like the lossy loop
    return target, drafter, mask


def test_lossy_honours_stopping_criteria_and_streamers():
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
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=settings)):
        free = target.generate(prompt, assistant_model=drafter, max_new_tokens=30, do_sample=False, streamer=streamer)
        new = free[0, prompt.shape[1]:].tolist()
        assert len(new) == 30
        assert streamer.ended and sum(streamer.chunks, []) == free[0].tolist()  # prompt, then every token once

        criteria = StoppingCriteriaList([StopAtLength()])
        halted = target.generate(prompt, assistant_model=drafter, max_new_tokens=30, do_sample=False,
                                 stopping_criteria=criteria)
        n_halted = halted.shape[1] - prompt.shape[1]
        assert 7 <= n_halted <= 7 + GAMMA and halted[0, prompt.shape[1]:].tolist() == new[:n_halted]


def test_a_session_keeps_every_calls_metrics_and_their_sum():
    target, drafter, mask = pair()
    prompt = torch.tensor([PROMPTS[0]])
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA))) as session:
        for seed in range(4):
            torch.manual_seed(seed)
            out = target.generate(prompt, assistant_model=drafter, max_new_tokens=16, do_sample=True,
                                  return_dict_in_generate=True)
            assert out.viasd_metrics is session.last_metrics
    assert len(session.history) == 4  # some samples may stop early at EOS
    assert session.metrics.committed == sum(m.committed for m in session.history) <= 16 * 4
    assert session.metrics.full_passes == sum(m.full_passes for m in session.history)


def test_lossy_decodes_a_left_padded_batch_row_by_row():
    target, drafter, mask = pair()
    pad = 0
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with hf.tiered(target,
                   context=viasd_adapt.context(target,
                                               mask=mask, settings=TierSettings(mode="lossy", gamma=GAMMA))) as session:
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
