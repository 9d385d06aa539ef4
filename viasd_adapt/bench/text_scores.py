"""Task scores of generated text against references (optional dependency: ``rouge-score``).

ROUGE-L F1 comes from Google Research's ``rouge-score`` package (``pip install viasd-adapt[rouge]``)
rather than our own longest-common-subsequence code: it is the implementation papers report, so our
figures are comparable with theirs.
"""

from __future__ import annotations

from typing import Sequence

from viasd_adapt.errors import ConfigError, ViasdError


def rouge_l_f1(references: Sequence[str], predictions: Sequence[str]) -> float:
    """Mean ROUGE-L F1 (0..1) of ``predictions`` against ``references``, pair by pair."""
    if len(references) != len(predictions):
        raise ConfigError(f"{len(predictions)} predictions for {len(references)} references")
    if not references:
        raise ConfigError("no references to score against")
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise ViasdError("ROUGE-L needs the rouge-score package: pip install 'viasd-adapt[rouge]'") from None
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    return sum(scorer.score(ref, pred)["rougeL"].fmeasure for ref, pred in zip(references, predictions)) / len(references)


__all__ = ["rouge_l_f1"]
