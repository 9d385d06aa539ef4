"""Turning logits into the distributions the gates compare.

Every tier must compare the *same kind* of distribution: if the drafter samples at temperature 0.7
with top-p 0.9, then p, u and q must all be warped the same way, or acceptance ratios are biased.
These helpers are pure and shared by every adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from viasd_adapt.core.settings import check_real
from viasd_adapt.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig:
    """How tokens are chosen. ``temperature == 0`` (or ``do_sample=False``) means greedy."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.do_sample, str) or self.do_sample not in (True, False):  # "no" would read as sampling
            raise ConfigError(f"do_sample must be True or False, got {self.do_sample!r}")
        object.__setattr__(self, "do_sample", bool(self.do_sample))  # numpy/torch booleans too
        check_real("temperature", self.temperature, low=0.0)
        if self.do_sample and self.temperature == 0:
            object.__setattr__(self, "do_sample", False)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ConfigError(f"top_k must be an integer >= 0, got {self.top_k!r}")
        check_real("top_p", self.top_p, low=0.0, high=1.0, low_open=True)

    @property
    def greedy(self) -> bool:
        return not self.do_sample

    @classmethod
    def from_temperature(cls, temperature: float, top_p: float = 1.0, top_k: int = 0) -> "SamplingConfig":
        """The command-line convention: temperature 0 means greedy. NaN and negatives are refused."""
        check_real("temperature", temperature, low=0.0)
        return cls(do_sample=temperature > 0, temperature=temperature if temperature > 0 else 1.0, top_k=top_k, top_p=top_p)


def warp_logits(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Applies temperature, top-k and top-p to logits of shape ``(..., V)``; masked entries -> -inf.

    In greedy mode only the float conversion happens: the gates then compare the models' plain
    softmax distributions, and tokens are argmaxes.
    """
    logits = logits.float()
    if config.greedy:
        return logits
    if config.temperature != 1.0:
        logits = logits / config.temperature
    if config.top_k and config.top_k < logits.shape[-1]:
        kth = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the mass *before* it already reaches top_p; the top token always stays.
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= config.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def probs_from_logits(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Softmax of the warped logits, in float32."""
    return warp_logits(logits, config).softmax(dim=-1)


def sample_or_argmax(probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> int:
    """One token from a single distribution row."""
    if greedy:
        return int(probs.argmax())
    return int(torch.multinomial(probs, 1, generator=generator))


def normalise_residual(residual: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """``norm(max(0, residual))``, or ``fallback`` when the residual has no mass.

    The residual is empty exactly when the verifier already agrees everywhere the proposer put mass;
    then any resample from the verifier itself is correct.
    """
    residual = residual.clamp_min(0.0)
    total = residual.sum(dim=-1, keepdim=True)
    return torch.where(total > 1e-12, residual / total.clamp_min(1e-30), fallback)


class Warper(Protocol):
    """How a framework turns a model's logits into the distributions the tiers compare.

    ``probs(sequence, logits)``: ``logits`` has one row per position predicting the token after
    each of the last ``n`` tokens of ``sequence`` (row ``i`` sees ``sequence[: len - n + 1 + i]``).
    Every model (p, u, q) goes through the same warper, so acceptance ratios compare like with like.
    """

    greedy: bool

    def probs(self, sequence: list[int], logits: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class ConfigWarper:
    """Temperature, top-k and top-p from a :class:`SamplingConfig` (no dependence on the prefix)."""

    config: SamplingConfig

    @property
    def greedy(self) -> bool:
        return self.config.greedy

    def probs(self, sequence: list[int], logits: torch.Tensor) -> torch.Tensor:
        return probs_from_logits(logits, self.config)


class ProcessorWarper:
    """A prepared ``transformers`` ``LogitsProcessorList`` applied row by row with each row's prefix.

    This is how the stock generate loop processes the target's logits, so processors that depend
    on the prefix (repetition penalty, no-repeat n-grams, minimum length, bad words, ...) act
    exactly as they would there. Processors that keep state across calls cannot be reproduced.
    """

    def __init__(self, processors, greedy: bool):
        self.processors = processors
        self.greedy = greedy

    def probs(self, sequence: list[int], logits: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if self.processors:
            n = logits.shape[0]
            ids = torch.tensor([sequence], dtype=torch.long, device=logits.device)
            logits = torch.cat(
                [self.processors(ids[:, : len(sequence) - n + 1 + i], logits[i : i + 1].clone()) for i in range(n)]
            )
        return logits.softmax(dim=-1)


def as_warper(sampling: "SamplingConfig | Warper") -> Warper:
    """A :class:`Warper` from a :class:`SamplingConfig` (or a warper, as is)."""
    if isinstance(sampling, SamplingConfig):
        return ConfigWarper(sampling)
    if not callable(getattr(sampling, "probs", None)) or not isinstance(getattr(sampling, "greedy", None), bool):
        raise ConfigError(f"sampling must be a SamplingConfig (or a Warper), got {type(sampling).__name__}")
    return sampling


__all__ = ["SamplingConfig"]
