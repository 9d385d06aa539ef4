"""The ``hf`` entry of :mod:`viasd_adapt.frameworks`: ``target.generate(assistant_model=draft)``,
stock (``plain``) or inside :func:`~viasd_adapt.adapters.hf.tiered` with the request's run context."""

from __future__ import annotations

import copy

import torch
from torch import nn

from viasd_adapt.adapters.hf.patch import tiered
from viasd_adapt.errors import ViasdError


def fix_draft_length(draft: nn.Module, gamma: int) -> None:
    """Classic SD on the assistant: a constant block of ``gamma`` drafts, no early stop, so stock
    assisted generation drafts exactly like the tier's loop (like-for-like rows). Changes ``draft``'s
    generation config; :func:`drafting_blocks_of` leaves the drafter as it is."""
    _constant_blocks(draft.generation_config, gamma)


def _constant_blocks(config, gamma: int) -> None:
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def drafting_blocks_of(draft: nn.Module, gamma: int) -> nn.Module:
    """``draft`` as an assistant that drafts constant blocks of ``gamma`` (:func:`fix_draft_length`),
    without changing it: a shallow copy that shares its weights and has its own generation config
    (stock assisted generation reads the block length from the assistant's config), so that runs
    with other block lengths on the same pair, in other threads too, do not see each other's."""
    view = copy.copy(draft)
    config = copy.deepcopy(draft.generation_config)
    _constant_blocks(config, gamma)
    view.generation_config = config
    return view


def run(pair, request):
    """The ``hf`` entry of :mod:`viasd_adapt.frameworks`: ``target.generate(assistant_model=draft)``,
    with no viasd-adapt at all (``plain``) or inside :func:`tiered` in the requested mode (the
    session is opened per call, as a user would, so its set-up is part of the measured time)."""
    from viasd_adapt.frameworks.registry import PLAIN
    from viasd_adapt.frameworks.baselines import assistant_config_notice_dropped, generation_config_for
    from viasd_adapt.frameworks.requests import RunOutput

    ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=pair.device)
    if pair.lookup is None:
        drafter = dict(assistant_model=drafting_blocks_of(pair.draft, request.settings.gamma))
    else:  # stock prompt lookup (plain), or the tier's loop with the lookup drafter
        drafter = dict(prompt_lookup_num_tokens=request.settings.gamma, max_matching_ngram_size=pair.lookup.max_ngram)
    config = generation_config_for(pair, request, **{k: v for k, v in drafter.items() if k != "assistant_model"})

    def generate():
        torch.manual_seed(request.seed)
        with torch.no_grad(), assistant_config_notice_dropped():
            return pair.target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                        assistant_model=drafter.get("assistant_model"))

    if request.mode == PLAIN:
        return RunOutput(generate()[0, ids.shape[1]:].tolist())
    with tiered(pair.target, context=request.context_on(pair)) as session:
        out = generate()
    if session.fallbacks:
        raise ViasdError(f"the hf adapter fell back to the stock path: {session.fallbacks[-1]}")
    return RunOutput(out[0, ids.shape[1]:].tolist(), session.last_metrics)



__all__ = ["drafting_blocks_of", "fix_draft_length", "run"]
