"""Tiny target/drafter pairs for the HF adapter tests (helpers, plus checks that they are useful).

A random drafter disagrees with a random target almost everywhere, which would leave the
"draft accepted" branches untested. So the drafter here is the target's first layers (embeddings,
the first ``draft_layers`` decoder layers, final norm and head copied from the target): a separate,
smaller model of the same family and vocabulary that agrees with the target part of the time.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from viasd_adapt.models.tiny import FAMILIES, tiny_config, tiny_model
from viasd_adapt.routing.mask import RoutingMask

torch.set_num_threads(1)


def truncated_drafter(target: torch.nn.Module, family: str, vocab_size: int, draft_layers: int = 1, **config) -> torch.nn.Module:
    """A ``draft_layers``-layer model holding the target's first layers, embeddings and head."""
    draft_config = tiny_config(family, vocab_size=vocab_size, num_layers=draft_layers, **config)
    drafter = AutoModelForCausalLM.from_config(draft_config, attn_implementation="eager")
    state = {k: v for k, v in target.state_dict().items() if k in drafter.state_dict()}
    drafter.load_state_dict(state, strict=False)
    return drafter.eval()


def sharpen(model: torch.nn.Module, factor: float) -> None:
    """Scales the LM head so that random models have peaked, not flat, next-token distributions."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)


def make_pair(family: str, vocab_size: int = 96, layers: int = 4, draft_layers: int = 1, seed: int = 0, sharpness: float = 1.0, **config):
    """(target, drafter, mask skipping about half the layers, never layer 0)."""
    target = tiny_model(family, seed, num_layers=layers, vocab_size=vocab_size, **config)
    if sharpness != 1.0:
        sharpen(target, sharpness)
    drafter = truncated_drafter(target, family, vocab_size, draft_layers, **config)
    skipped = list(range(layers - 1, 0, -2))[: max(1, round(0.45 * layers))]
    return target, drafter, RoutingMask.from_skipped(layers, skipped)


def test_truncated_drafter_is_a_separate_smaller_model_that_sometimes_agrees():
    target, drafter, mask = make_pair("llama")
    assert drafter is not target and drafter.config.num_hidden_layers == 1
    assert sum(p.numel() for p in drafter.parameters()) < sum(p.numel() for p in target.parameters())
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        agree = (target(ids).logits.argmax(-1) == drafter(ids).logits.argmax(-1)).float().mean()
    assert 0.0 < float(agree) < 1.0
    assert mask.num_skipped == 2 and mask.keep[0]


def test_make_pair_works_for_every_family():
    for family in FAMILIES:
        target, drafter, mask = make_pair(family)
        mask.validate_for(target)
