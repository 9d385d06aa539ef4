"""The vLLM plugin's audit file: what the served lenient rule committed, in the tuner's terms.

The plugin rewrites it after every engine step (:mod:`viasd_adapt.serving.vllm_plugin`), and the
vLLM benchmark reads it back beside its own figures (``benchmarks/vllm/run_vllm.py``), so it is a
typed, versioned artifact like every other file the project writes.
"""

from __future__ import annotations

from typing import ClassVar

from viasd_adapt.config.schema import Artifact


class ServingAudit(Artifact):
    """Counters of one engine's served rule: steps, drafts judged and accepted, tokens committed,
    how many committed drafts the target's argmax would have overruled and their regret (nats),
    the rates they make, and the sampled rows the rule left to vLLM's lossless rule."""

    FORMAT: ClassVar[str] = "viasd-adapt/serving-audit"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "vLLM plugin audit file"

    lenience: float
    tuned: str
    steps: int
    draft_tokens: int
    accepted_drafts: int
    committed_tokens: int
    overruled: int
    overrule_rate: float
    regret_per_token: float
    regret_sum: float
    acceptance_rate: float
    sampled_rows_untouched: int


__all__ = ["ServingAudit"]
