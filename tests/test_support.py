"""The pairs in tests/support/ are useful: each drafter is a separate, smaller or perturbed model
that agrees with its target part of the time (so both the accept and the reject paths of a cycle
run), every family builds, and the pair built for lossy mode has its slim verifier between the
drafter and the target."""

from __future__ import annotations

import torch

from tests.support.pairs import noisy_pair, truncated_pair
from tests.support.seq2seq import VOCAB, seq2seq_pair, source_for
from viasd_adapt.models.tiny import FAMILIES
from viasd_adapt.models.tiny_seq2seq import SEQ2SEQ_FAMILIES
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.routing.mask import check_mask_layers


def _argmax_agreement(a, b, ids) -> float:
    with torch.no_grad():
        return float((a(ids).logits.argmax(-1) == b(ids).logits.argmax(-1)).float().mean())


def test_truncated_drafter_is_a_separate_smaller_model_that_sometimes_agrees():
    target, drafter, mask = truncated_pair("llama")
    assert drafter is not target and drafter.config.num_hidden_layers == 1
    assert sum(p.numel() for p in drafter.parameters()) < sum(p.numel() for p in target.parameters())
    ids = torch.randint(0, 96, (1, 40), generator=torch.Generator().manual_seed(0))
    assert 0.0 < _argmax_agreement(target, drafter, ids) < 1.0
    assert mask.num_skipped == 2 and mask.keep[0]


def test_truncated_pair_works_for_every_family():
    for family in FAMILIES:
        target, drafter, mask = truncated_pair(family)
        check_mask_layers(mask, target)


def test_noisy_pair_puts_the_slim_verifier_between_drafter_and_target():
    target, drafter, mask = noisy_pair()
    ids = torch.randint(0, 64, (1, 60), generator=torch.Generator().manual_seed(0))
    slim = SlimVerifier(target, mask).model
    drafter_agrees = _argmax_agreement(target, drafter, ids)
    assert 0.0 < drafter_agrees < 1.0
    assert _argmax_agreement(target, slim, ids) > drafter_agrees  # u is closer to q than p is


def test_truncated_seq2seq_drafter_is_smaller_and_sometimes_agrees():
    for family in SEQ2SEQ_FAMILIES:
        target, drafter, mask = seq2seq_pair(family)
        assert sum(p.numel() for p in drafter.parameters()) < sum(p.numel() for p in target.parameters())
        check_mask_layers(mask, target)
        source = source_for(family, length=12)
        decoder = torch.randint(3, VOCAB - 3, (1, 30), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            agree = (target(**source, decoder_input_ids=decoder).logits.argmax(-1)
                     == drafter(**source, decoder_input_ids=decoder).logits.argmax(-1)).float().mean()
        assert 0.0 < float(agree) < 1.0, family
