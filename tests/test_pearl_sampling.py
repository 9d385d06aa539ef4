"""PEARL sampling is lossless: a chi-square test against the target's exact distribution.

On a 6-token vocabulary, the pair (first, second) generated token has 36 cells whose exact
probabilities under the target are q(t1 | prompt) * q(t2 | prompt, t1), computed with the same
warping as the decoder. PEARL runs once per seed (sequential mode: the parallel mode draws the same
numbers, which test_pearl.py checks token for token). With gamma 2 and 3 new tokens, the first
token comes from a pre-verify round and the second from a post-verify round whose block is the
pending draft plus a fresh one, or from the pre-verify round after a rejection.

Significance level: ALPHA = 0.001. Cells with an expected count below 5 are pooled into one bin.
The seeds are fixed, so the outcome is deterministic, not flaky. Controls: the same counts tested
against the drafter's distribution, and against the target at another temperature, must be
rejected, which shows the test has the power to see a wrong distribution.
"""

from __future__ import annotations

import collections

import pytest
import torch
from scipy.stats import chisquare

from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.hooks import make_plugin_manager
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.mask import RoutingMask
from viasd_adapt.sampling import SamplingConfig, probs_from_logits
from viasd_adapt.settings import TierSettings

torch.set_num_threads(1)

ALPHA = 0.001
VOCAB = 6
RUNS = 400
PROMPT = [1, 2, 3]


def _sharpened(model, factor):
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


@pytest.fixture(scope="module")
def models():
    target = _sharpened(tiny_model("llama", 0, num_layers=2, vocab_size=VOCAB), 10.0)
    drafter = _sharpened(tiny_model("llama", 5, num_layers=1, vocab_size=VOCAB), 10.0)
    return target, drafter


def exact_two_token_distribution(model, sampling: SamplingConfig) -> torch.Tensor:
    """``P(t1, t2)`` flattened to ``VOCAB * VOCAB`` cells, by full forwards (no cache)."""
    with torch.no_grad():
        first = probs_from_logits(model(torch.tensor([PROMPT])).logits[0, -1], sampling)
        rows = [
            probs_from_logits(model(torch.tensor([PROMPT + [a]])).logits[0, -1], sampling) for a in range(VOCAB)
        ]
    return torch.stack([first[a] * rows[a] for a in range(VOCAB)]).reshape(-1).double()


def chi_square_pvalue(observed: torch.Tensor, expected_probs: torch.Tensor) -> float:
    expected = expected_probs / expected_probs.sum() * observed.sum()
    big = expected >= 5
    obs = torch.cat([observed[big], observed[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    if exp[-1] == 0:  # nothing pooled
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs.numpy(), exp.numpy()).pvalue)


def sample_counts(target, drafter, mode: str, sampling: SamplingConfig) -> tuple[torch.Tensor, float]:
    manager = make_plugin_manager()
    mask = RoutingMask.from_skipped(2, [1])
    counts: collections.Counter = collections.Counter()
    rejected = judged = 0
    for seed in range(RUNS):
        out = pearl_generate(
            target, drafter, PROMPT, 3, settings=TierSettings(mode=mode, gamma=2), mask=mask, sampling=sampling,
            parallel=False, seed=seed, plugin_manager=manager,
        )
        counts[out.tokens[0] * VOCAB + out.tokens[1]] += 1
        rejected += out.metrics.drafts_rejected
        judged += out.metrics.drafts_judged
    observed = torch.tensor([counts[i] for i in range(VOCAB * VOCAB)], dtype=torch.float64)
    return observed, rejected / judged


@pytest.mark.parametrize(
    "mode, sampling",
    [
        ("none", SamplingConfig(do_sample=True)),
        ("lossless", SamplingConfig(do_sample=True, temperature=0.8, top_p=0.95)),
    ],
    ids=["none-T1", "lossless-T0.8-top_p0.95"],
)
def test_first_two_tokens_follow_the_target_distribution(models, mode, sampling):
    target, drafter = models
    observed, rejection_rate = sample_counts(target, drafter, mode, sampling)
    # the drafter disagrees often, so the residual resampling path is exercised
    assert 0.2 < rejection_rate < 0.8
    q = exact_two_token_distribution(target, sampling)
    assert chi_square_pvalue(observed, q) > ALPHA
    # controls: the same counts are clearly not the drafter's distribution nor a hotter target's
    p = exact_two_token_distribution(drafter, sampling)
    assert chi_square_pvalue(observed, p) < ALPHA
    hotter = SamplingConfig(do_sample=True, temperature=sampling.temperature * 1.5, top_p=sampling.top_p)
    assert chi_square_pvalue(observed, exact_two_token_distribution(target, hotter)) < ALPHA
