"""The one statistics module of the test suite: every sampling test uses these.

A lossless claim is tested by comparing sampled tokens with the exact distribution they must
follow, computed from the models' logits under the same warping:

* :func:`chi_square_pvalue`: Pearson chi-square goodness of fit of counts against probabilities,
  with the *support check* (a sample in a cell of probability zero makes the p-value 0: it cannot
  come from that distribution) and cells whose expected count is below 5 pooled into one bin;
* :func:`exact_joint` and :func:`joint_counts`: the exact joint distribution of two consecutive
  generated tokens (optionally after marginalising the first ones) and the sampled counts of the
  same pair, the usual input of the chi-square test;
* :func:`calibration`: for vocabularies too large for cells, randomised PIT values (i.i.d.
  Uniform(0, 1) for an exact sampler whatever the prefix, tested with :func:`ks_uniform_pvalue`)
  and a z-score of the sampled tokens' own probability.

Significance level :data:`ALPHA` = 0.001: a correct sampler fails one such test in a thousand. The
seeds are fixed, so outcomes are reproducible, and every test also shows the statistic rejects a
plausible wrong distribution (a control), so it has the power to fail.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from scipy.stats import chisquare, kstest

ALPHA = 1e-3

#: ``next_probs(prefixes)``: the warped next-token distributions after each prefix of generated
#: tokens (the prompt is the caller's), one row per prefix, shape ``(len(prefixes), V)``.
NextProbs = Callable[[list[list[int]]], torch.Tensor]


def _as_array(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def counts_of(samples: Sequence[int], size: int) -> np.ndarray:
    """How often each of ``size`` values occurs in ``samples``."""
    return np.bincount(np.asarray(samples, dtype=np.int64), minlength=size)[:size] if len(samples) else np.zeros(size)


def outside_support(counts, probs) -> int:
    """The number of samples in cells that ``probs`` gives probability zero."""
    counts, probs = _as_array(counts).reshape(-1), _as_array(probs).reshape(-1)
    return int(counts[probs <= 0].sum())


def chi_square_pvalue(counts, probs, min_expected: float = 5.0) -> float:
    """p-value of Pearson's chi-square test of ``counts`` against ``probs`` (any matching shapes).

    Returns 0.0 when a sample falls where ``probs`` is zero (the support check); cells whose
    expected count is below ``min_expected`` are pooled into one bin; 1.0 when fewer than two bins
    remain (a one-cell distribution is matched by any sample inside its support).
    """
    observed, probs = _as_array(counts).reshape(-1), _as_array(probs).reshape(-1)
    if observed.shape != probs.shape:
        raise ValueError(f"{observed.shape[0]} counts for {probs.shape[0]} probabilities")
    if outside_support(observed, probs):
        return 0.0
    expected = probs / probs.sum() * observed.sum()  # float64: float32 rounding would upset scipy's sum check
    small = expected < min_expected
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    if keep.sum() < 2:
        return 1.0
    return float(chisquare(obs[keep], exp[keep]).pvalue)


def samples_pvalue(samples: Sequence[int], probs) -> float:
    """:func:`chi_square_pvalue` of a list of sampled values against a 1-D distribution."""
    probs = _as_array(probs)
    return chi_square_pvalue(counts_of(samples, probs.shape[0]), probs)


def exact_joint(next_probs: NextProbs, skip: int = 0) -> np.ndarray:
    """``P(x[skip], x[skip + 1])``, shape (V, V): the exact joint of two consecutive generated
    tokens, the ``skip`` tokens before them marginalised out (``skip`` is 0 or 1)."""
    if skip not in (0, 1):
        raise ValueError("skip must be 0 or 1")
    start = next_probs([[]])[0].double()
    heads = [((), 1.0)] if skip == 0 else [((a,), float(start[a])) for a in _support(start)]
    joint = np.zeros((start.shape[-1],) * 2)
    for head, weight in heads:
        row = start if skip == 0 else next_probs([list(head)])[0].double()
        support = _support(row)
        seconds = next_probs([list(head) + [a] for a in support]).double()
        for a, second in zip(support, seconds):
            joint[a] += weight * float(row[a]) * second.numpy()
    return joint


def _support(probs: torch.Tensor) -> list[int]:
    return [int(a) for a in torch.nonzero(probs > 0).flatten()]


def joint_counts(sample: Callable[[int], Sequence[int]], n: int, vocab: int, skip: int = 0) -> np.ndarray:
    """Counts of ``(x[skip], x[skip + 1])`` over ``sample(seed)`` for seeds ``0 .. n - 1``."""
    counts = np.zeros((vocab, vocab), dtype=np.int64)
    for seed in range(n):
        tokens = sample(seed)
        counts[tokens[skip], tokens[skip + 1]] += 1
    return counts


def calibration(conditionals: Sequence[tuple[torch.Tensor, Sequence[int]]], seed: int = 123) -> tuple[np.ndarray, float]:
    """Two checks of sampled sequences against their exact conditionals.

    ``conditionals`` holds, per sampled sequence, the exact warped distribution at every generated
    position given the sequence's own prefix (``(n, V)``) and the ``n`` sampled tokens. Returns:

    * randomised PIT values: for an exact sampler they are i.i.d. Uniform(0, 1) whatever the
      prefix (Rosenblatt), so they test the whole joint law, not one marginal;
    * a z-score of the sampled tokens' own probability q(x) against its exact expectation
      sum_v q(v)^2: sensitive to mass put on the wrong tokens, which the PIT (an ordering of the
      vocabulary) may miss.
    """
    generator = torch.Generator().manual_seed(seed)
    pit, excess, variance = [], 0.0, 0.0
    for rows, tokens in conditionals:
        for row, token in zip(rows.double(), tokens):
            pit.append(float(row[:token].sum()) + float(torch.rand((), generator=generator)) * float(row[token]))
            second, third = float((row**2).sum()), float((row**3).sum())
            excess += float(row[token]) - second
            variance += third - second**2
    return np.asarray(pit), excess / variance**0.5


def ks_uniform_pvalue(values) -> float:
    """p-value of the Kolmogorov-Smirnov test of ``values`` against Uniform(0, 1)."""
    return float(kstest(_as_array(values), "uniform").pvalue)
