"""Lossless mode, sampling: the first two generated tokens follow the target's exact distribution.

Test: Pearson chi-square goodness of fit of the empirical joint distribution of (token 1, token 2)
over N_SAMPLES seeds against the exact joint distribution computed from the target's logits (with
the same temperature and top-k warping), cells with expected count < 5 pooled. Significance level
ALPHA = 0.001: a correct sampler fails this test one time in a thousand. The control shows the
test has power: the same samples are rejected against the target at a 40% lower temperature (same support),
the slim verifier's distribution u and the
drafter's distribution p, which a broken cascade would have leaked into the output.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from tests.test_hf_pairs import make_pair
from viasd_adapt.adapters import hf
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.sampling import SamplingConfig, probs_from_logits
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

VOCAB = 12
N_SAMPLES = 1500
ALPHA = 1e-3
TEMPERATURE, TOP_K = 0.9, 6
PROMPT = [3, 7, 1]


@torch.no_grad()
def exact_joint(model: torch.nn.Module, temperature: float = TEMPERATURE) -> np.ndarray:
    """P(x1, x2 | prompt) of ``model`` under the test's warping, shape (V, V)."""
    config = SamplingConfig(do_sample=True, temperature=temperature, top_k=TOP_K)
    first = probs_from_logits(model(torch.tensor([PROMPT])).logits[0, -1], config)
    joint = np.zeros((VOCAB, VOCAB))
    for a in range(VOCAB):
        if first[a] > 0:
            second = probs_from_logits(model(torch.tensor([PROMPT + [a]])).logits[0, -1], config)
            joint[a] = (first[a] * second).numpy()
    return joint


def chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of the chi-square fit, pooling cells whose expected count is below 5."""
    probs = probs.astype(np.float64) / probs.sum()  # float32 softmax rounding would upset scipy's sum check
    expected = probs.reshape(-1) * counts.sum()
    observed = counts.reshape(-1).astype(float)
    if observed[expected == 0].sum() > 0:
        return 0.0  # a sample the reference gives probability zero: certainly not from it
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(chisquare(obs[keep], exp[keep]).pvalue)


@pytest.fixture(scope="module")
def setup():
    target, drafter, mask = make_pair("llama", vocab_size=VOCAB, layers=4, sharpness=4.0)
    drafter.generation_config.num_assistant_tokens = 3
    for model in (target, drafter):  # no EOS: every sample has exactly two new tokens
        model.generation_config.eos_token_id = None
    counts = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
        for seed in range(N_SAMPLES):
            torch.manual_seed(seed)
            out = target.generate(torch.tensor([PROMPT]), assistant_model=drafter, max_new_tokens=2,
                                  do_sample=True, temperature=TEMPERATURE, top_k=TOP_K)
            a, b = out[0, len(PROMPT):].tolist()
            counts[a, b] += 1
    return target, drafter, mask, counts, session


def test_lossless_sampling_matches_the_target_distribution(setup):
    target, _, _, counts, session = setup
    assert counts.sum() == N_SAMPLES
    p_value = chi_square_p(counts, exact_joint(target))
    assert p_value > ALPHA, f"empirical joint distribution differs from the target's (p = {p_value:.2e})"
    # The slim tier was really in the loop: it both kept drafts and replaced some.
    assert session.metrics.draft_tokens > 0 and session.metrics.slim_tokens > 0


def test_control_the_test_rejects_wrong_distributions(setup):
    target, drafter, mask, counts, _ = setup
    # Same support as the target (top-k is temperature-invariant), only the shape differs:
    # rejected by the chi-square statistic itself, not by a sample of probability zero.
    colder = exact_joint(target, temperature=TEMPERATURE * 0.6)
    assert counts[colder == 0].sum() == 0
    assert chi_square_p(counts, colder) < ALPHA
    slim_joint = exact_joint(SlimVerifier(target, mask).model)
    draft_joint = exact_joint(drafter)
    assert chi_square_p(counts, slim_joint) < ALPHA
    assert chi_square_p(counts, draft_joint) < ALPHA
