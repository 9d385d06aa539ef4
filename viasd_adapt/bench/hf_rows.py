"""Rows for the Hugging Face adapter: ``target.generate(assistant_model=draft)``, unpatched or
patched by :mod:`viasd_adapt.adapters.hf`.

* ``plain``: stock transformers assisted generation, viasd-adapt not involved at all.
* ``none``: the same call inside ``hf.tiered(mode="none")`` (installed, tier off): this is the
  untiered reference of the hf rows, and ``none`` vs. ``plain`` is the tier-off overhead.
* ``lossless`` / ``lossy`` / ``audit``: the same call inside ``hf.tiered(mask, mode)``.

The session is opened per call, as a user would, so patch set-up is part of the measured time.
The drafter runs classic SD with a fixed block: ``num_assistant_tokens = gamma`` with the
``constant`` schedule and no confidence-based early stop, so every row drafts ``gamma`` tokens per
cycle like the tier loop does.
"""

from __future__ import annotations

import torch

from viasd_adapt.bench.context import BenchContext
from viasd_adapt.bench.rows import RowRunner, RowSample, _generation_config
from viasd_adapt.settings import Mode


def fix_draft_length(draft, gamma: int) -> None:
    """Classic SD on the assistant: a constant block of ``gamma`` drafts, no early stop."""
    config = draft.generation_config
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def make_runner(ctx: BenchContext, mode: str) -> RowRunner:
    from viasd_adapt.adapters import hf

    fix_draft_length(ctx.draft, ctx.settings.gamma)
    settings = ctx.settings.with_(mode=Mode.NONE if mode == "plain" else Mode.parse(mode))
    mask = ctx.mask.mask if (ctx.mask is not None and settings.mode is not Mode.NONE) else None

    def generate(prompt_ids: list[int], max_new_tokens: int, seed: int):
        torch.manual_seed(seed)
        ids = torch.tensor([prompt_ids], dtype=torch.long, device=ctx.device)
        with torch.no_grad():
            out = ctx.target.generate(
                ids, generation_config=_generation_config(ctx, max_new_tokens), assistant_model=ctx.draft
            )
        return out[0, len(prompt_ids):].tolist()

    if mode == "plain":
        def run_plain(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
            return RowSample(generate(prompt_ids, max_new_tokens, seed))

        return run_plain

    def run(prompt_ids: list[int], max_new_tokens: int, seed: int) -> RowSample:
        with hf.tiered(ctx.target, mask=mask, settings=settings) as session:
            tokens = generate(prompt_ids, max_new_tokens, seed)
        if session.fallbacks:
            from viasd_adapt.errors import ViasdError

            raise ViasdError(f"the hf adapter fell back to the stock path: {session.fallbacks[-1]}")
        return RowSample(tokens, session.last_metrics)

    return run
