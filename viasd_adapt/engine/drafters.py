"""Drafters: anything that proposes a block of tokens with its distributions ``p``.

:class:`ModelDrafter` is an independent small LM drafting ``gamma`` tokens autoregressively (HF
assisted generation, classic SD, PEARL); prompt lookup (:mod:`viasd_adapt.engine.prompt_lookup`)
and the encoder-decoder drafter (:mod:`viasd_adapt.engine.seq2seq`) speak the same
:class:`Drafter` protocol. The verify step never sees a drafter: it sees ``(drafts, p)``.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from viasd_adapt.routing.runner import CachedRunner
from viasd_adapt.core.sampling import SamplingConfig, Warper, as_warper, sample_or_argmax


class Drafter(Protocol):
    """Anything that proposes a block: returns ``(tokens (g,), p (g, V))`` given the committed ids."""

    passes: int

    def propose(self, sequence: list[int], gamma: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]: ...


class ModelDrafter:
    """An independent small LM drafting ``gamma`` tokens autoregressively (HF assisted generation,
    classic SD, PEARL)."""

    def __init__(self, model: nn.Module, sampling: SamplingConfig | Warper):
        self.model = model
        self.runner = CachedRunner(model)
        self.warper = as_warper(sampling)

    @property
    def passes(self) -> int:
        return self.runner.passes

    def draft(self, sequence: list[int], gamma: int, generator: torch.Generator | None = None) -> tuple[list[int], torch.Tensor]:
        """``gamma`` drafted ids (host ints, as each next forward needs them) and their rows of p."""
        drafted: list[int] = []
        rows = []
        for _ in range(gamma):
            context = sequence + drafted
            probs = self.warper.probs(context, self.runner.logits_for(context, 1))[0]
            drafted.append(sample_or_argmax(probs, self.warper.greedy, generator))
            rows.append(probs)
        return drafted, torch.stack(rows)

    def propose(self, sequence, gamma, generator=None):
        drafted, p = self.draft(sequence, gamma, generator)
        return torch.tensor(drafted, dtype=torch.long, device=p.device), p  # same device: gathers index p with them


def _drafts_on_host(drafter: Drafter) -> bool:
    """Whether ``drafter`` is a plain :class:`ModelDrafter` (a subclass that overrides ``propose``
    must be asked through it)."""
    return isinstance(drafter, ModelDrafter) and type(drafter).propose is ModelDrafter.propose


def host_draft(drafter: Drafter, sequence: list[int], gamma: int,
               generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
    """``(ids, p)``: a drafter's block with its ids as host ints.

    A :class:`ModelDrafter` picks its ids on the host anyway (each next forward needs them), so
    :meth:`ModelDrafter.draft` hands them over as they are: no copy to the device and back. Any
    other drafter is asked through ``propose`` and its tokens are read back once.
    """
    if _drafts_on_host(drafter):
        return drafter.draft(sequence, gamma, generator)
    tokens, p = drafter.propose(sequence, gamma, generator)
    return tokens.tolist(), p


def draft_with_ids(drafter: Drafter, sequence: list[int], gamma: int,
                   generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """``(tokens, p, ids)``: the block on p's device for the verify step, and its host ids."""
    if _drafts_on_host(drafter):
        ids, p = drafter.draft(sequence, gamma, generator)
        return torch.tensor(ids, dtype=torch.long, device=p.device), p, ids
    tokens, p = drafter.propose(sequence, gamma, generator)
    return tokens, p, tokens.tolist()



__all__ = ["ModelDrafter"]
