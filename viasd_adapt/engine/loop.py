"""The draft -> verify loop shared by the HF adapter's tiered modes, the engine framework and the CLI.

Adapters supply drafts (HF assistant model, prompt lookup, ...) through a
:class:`~viasd_adapt.engine.drafters.Drafter`; a
:class:`~viasd_adapt.engine.verifier.TieredVerifier` decides each cycle through the run's verify
step; this loop only asks for blocks until the budget, an EOS token or a stopping test ends it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from viasd_adapt.checks import (
    check_fits_context,
    check_max_new_tokens,
    check_prompt_ids,
    check_same_vocabulary,
    check_token_ids_in_vocabulary,
    eos_ids,
)
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.engine.drafters import Drafter, draft_with_ids
from viasd_adapt.engine.verifier import TieredVerifier


@dataclass
class GenerationOutput:
    """Generated ids (prompt excluded), their tiers, and the metrics."""

    tokens: list[int]
    tiers: list[int]
    metrics: TierMetrics


def speculative_generate(
    drafter: Drafter,
    verifier: TieredVerifier,
    prompt_ids: list[int],
    max_new_tokens: int,
    eos_token_ids: Iterable[int] = (),
    generator: torch.Generator | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
    should_stop: Callable[[list[int]], bool] | None = None,
    q_prefill: bool = True,
) -> GenerationOutput:
    """The draft -> verify loop shared by the HF adapter's tiered modes, the bench and the CLI.

    Starts with one q prefill for the first token (``q_prefill=False`` drafts straight after the
    prompt, as transformers' assisted decoding does; q then first sees the prompt when it is
    first needed), then runs cycles until ``max_new_tokens``, an EOS token, or
    ``should_stop(all_ids)`` (checked after every token, so generation ends where one-token-at-a-time
    decoding would). The last block is shortened so no more than ``max_new_tokens`` are drafted
    for, and ``verify`` cuts a cycle that overshoots before its tokens are counted.
    """
    check_max_new_tokens(max_new_tokens)
    check_prompt_ids(prompt_ids)
    check_token_ids_in_vocabulary(prompt_ids, verifier.target)
    # Every forward (draft, verify, bonus) stays within prompt + budget positions: blocks are
    # shortened to what the budget has left, so no speculative extra is needed.
    check_fits_context(verifier.target, len(prompt_ids), max_new_tokens, role="target")
    if isinstance(getattr(drafter, "model", None), nn.Module):
        check_same_vocabulary(verifier.target, drafter.model)
        check_fits_context(drafter.model, len(prompt_ids), max_new_tokens, role="drafter")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    eos = frozenset(eos_ids(eos_token_ids))
    metrics = verifier.new_generation()
    draft_passes_before = drafter.passes
    generated: list[int] = []
    if q_prefill:
        generated = [verifier.first_token(prompt_ids, generator)]
        if on_tokens:
            on_tokens(generated[:])
    while len(generated) < max_new_tokens and not (generated and generated[-1] in eos):
        # Asked only once something was generated: like one-token-at-a-time decoding, the prompt
        # itself never stops generation (a prompt ending in EOS, or BART's decoder start id, which
        # is its EOS id, would otherwise yield no token at all).
        if should_stop and generated and should_stop(prompt_ids + generated):
            break
        gamma = min(verifier.settings.gamma, max_new_tokens - len(generated))
        drafts, p, ids = draft_with_ids(drafter, prompt_ids + generated, gamma, generator)
        result = verifier.verify(prompt_ids + generated, drafts, p, generator, max_new_tokens - len(generated), eos,
                                 should_stop, draft_ids=ids)
        generated += result.tokens  # already cut to the budget, the first EOS and should_stop by verify()
        if on_tokens:
            on_tokens(result.tokens)
    verifier.ledger.count_draft_passes(drafter.passes - draft_passes_before)
    return GenerationOutput(generated, metrics.token_tiers[:], metrics)


__all__ = ["GenerationOutput", "speculative_generate"]
