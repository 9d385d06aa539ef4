"""Lossless mode on an encoder-decoder target, sampling: the first two generated tokens follow the
target's exact distribution given the source.

Same test as ``test_hf_sampling`` (whose chi-square helper it reuses): Pearson chi-square of the
empirical joint distribution of (token 1, token 2) over N_SAMPLES seeds against the exact joint
computed from the target's logits under the same warping, ALPHA = 0.001. The control shows the test
has power: the same samples are rejected against the target at a lower temperature (same support),
against the slim verifier u and against the drafter p.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_hf_sampling import chi_square_p
from tests.test_seq2seq_pairs import make_seq2seq_pair
from viasd_adapt.adapters import hf
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.sampling import SamplingConfig, probs_from_logits
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

VOCAB = 12
N_SAMPLES = 500  # the controls reject at p < 1e-25 already at 400 samples
ALPHA = 1e-3
TEMPERATURE, TOP_K = 0.9, 6
SOURCE = torch.tensor([[3, 7, 1, 5, 2]])


@torch.no_grad()
def exact_joint(model: torch.nn.Module, start: int, temperature: float = TEMPERATURE) -> np.ndarray:
    """P(x1, x2 | source) of ``model`` under the test's warping, shape (V, V)."""
    config = SamplingConfig(do_sample=True, temperature=temperature, top_k=TOP_K)

    def next_probs(decoder: list[int]) -> torch.Tensor:
        logits = model(input_ids=SOURCE, decoder_input_ids=torch.tensor([decoder])).logits[0, -1]
        return probs_from_logits(logits, config)

    first = next_probs([start])
    joint = np.zeros((VOCAB, VOCAB))
    for a in range(VOCAB):
        if first[a] > 0:
            joint[a] = (first[a] * next_probs([start, a])).numpy()
    return joint


@pytest.fixture(scope="module")
def setup():
    target, drafter, mask = make_seq2seq_pair("mbart", vocab_size=VOCAB, sharpness=40.0)
    drafter.generation_config.num_assistant_tokens = 3
    for model in (target, drafter):  # no EOS: every sample has exactly two new tokens
        model.generation_config.eos_token_id = None
    start = target.generation_config.decoder_start_token_id
    counts = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
        for seed in range(N_SAMPLES):
            torch.manual_seed(seed)
            out = target.generate(input_ids=SOURCE, assistant_model=drafter, max_new_tokens=2, do_sample=True,
                                  temperature=TEMPERATURE, top_k=TOP_K)
            a, b = out[0, 1:].tolist()
            counts[a, b] += 1
    return target, drafter, mask, start, counts, session


def test_lossless_sampling_matches_the_target_distribution(setup):
    target, _, _, start, counts, session = setup
    assert counts.sum() == N_SAMPLES
    p_value = chi_square_p(counts, exact_joint(target, start))
    assert p_value > ALPHA, f"empirical joint distribution differs from the target's (p = {p_value:.2e})"
    assert session.metrics.draft_tokens > 0 and session.metrics.slim_tokens > 0  # the cascade was in the loop


def test_control_the_test_rejects_wrong_distributions(setup):
    target, drafter, mask, start, counts, _ = setup
    colder = exact_joint(target, start, temperature=TEMPERATURE * 0.6)
    assert counts[colder == 0].sum() == 0  # same support: rejected by the statistic, not by an impossible sample
    assert chi_square_p(counts, colder) < ALPHA
    assert chi_square_p(counts, exact_joint(SlimVerifier(target, mask).model, start)) < ALPHA
    assert chi_square_p(counts, exact_joint(drafter, start)) < ALPHA
