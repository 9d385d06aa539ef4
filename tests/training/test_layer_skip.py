"""Identity pass-through of decoder layers, random masks and the acceptance replay."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from viasd_adapt.errors import ConfigError
from viasd_adapt.training.evaluate import speculative_acceptance
from viasd_adapt.training.layer_skip import PassThroughLayer, random_mask, skipped_layers


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=2, num_key_value_heads=2)
    return LlamaForCausalLM(config).eval()


def test_skipping_all_layers_leaves_the_residual_stream_unchanged(model):
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad(), skipped_layers(model, range(4)):
        logits = model(input_ids=ids, use_cache=False).logits
        expected = model.lm_head(model.model.norm(model.model.embed_tokens(ids)))
    torch.testing.assert_close(logits, expected)


def test_layers_are_restored_after_the_block(model):
    originals = list(model.model.layers)
    with pytest.raises(RuntimeError), skipped_layers(model, [1, 2]):
        assert isinstance(model.model.layers[1], PassThroughLayer)
        raise RuntimeError("boom")
    assert list(model.model.layers) == originals


def test_out_of_range_skip_is_rejected(model):
    with pytest.raises(ConfigError), skipped_layers(model, [4]):
        pass


def test_random_mask_size_and_layer_zero():
    rng = random.Random(0)
    for _ in range(20):
        mask = random_mask(16, 0.45, rng)
        assert len(mask) == 7 and 0 not in mask and mask == sorted(set(mask))
    assert random_mask(16, 0.45, random.Random(5)) == random_mask(16, 0.45, random.Random(5))


def test_speculative_acceptance_replays_greedy_rounds():
    # Rounds of 4: [T T F .] accepts 2, then target token; [T T T T] accepts 4, bonus; [T] 1.
    matches = [True, True, False, True, True, True, True, False, True]
    assert speculative_acceptance(matches, 4) == (7, 4 + 4 + 1)
    assert speculative_acceptance([], 4) == (0, 0)
