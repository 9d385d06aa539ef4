"""Bad input particular to the HF adapter gets a clear viasd error, never a deep stack trace:
tokenizers that differ, batches with right padding or all-padding rows, streamers with batches.

Bad input every framework refuses (empty prompt, budget 0, masks for another model, vocabulary
mismatch, a mode that needs a mask, settings that are not TierSettings) is tested on the HF adapter
in tests/conformance/test_errors.py.
"""

from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

import viasd_adapt
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import hf
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.core.settings import TierSettings


PROMPT = torch.tensor([[5, 17, 2, 40]])


@pytest.fixture(scope="module")
def models():
    return truncated_pair("llama", layers=4)


def word_tokenizer(words):
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token=words[0])


def generate_in(target, drafter, mask, mode="lossy", **kwargs):
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode=mode))):
        return target.generate(assistant_model=drafter, do_sample=False, **kwargs)


def test_tokenizer_vocabulary_mismatch(models):
    target, drafter, mask = models
    a = word_tokenizer(["<unk>", "a", "b", "c"])
    b = word_tokenizer(["<unk>", "a", "c", "b"])
    with pytest.raises(ModelMismatchError, match="vocabularies"):
        hf.patch(target, context=viasd_adapt.context(target, mask=mask), tokenizer=a, assistant_tokenizer=b)
    with pytest.raises(ModelMismatchError, match="vocabularies"):
        generate_in(target, drafter, mask, input_ids=PROMPT, max_new_tokens=4, tokenizer=a, assistant_tokenizer=b)
    same = generate_in(target, drafter, mask, input_ids=PROMPT, max_new_tokens=4, tokenizer=a, assistant_tokenizer=a)
    assert same.shape[1] == PROMPT.shape[1] + 4
    assert not hf.is_patched(target)


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_batches_take_left_padding_only_and_no_streamer(models, mode):
    """Every tiered mode decodes a batch row by row and takes left padding only."""
    target, drafter, mask = models
    with pytest.raises(ConfigError, match="left padding"):
        generate_in(target, drafter, mask, mode, input_ids=PROMPT.repeat(2, 1),
                    attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), max_new_tokens=4)
    with pytest.raises(ConfigError, match="all padding"):
        generate_in(target, drafter, mask, mode, input_ids=PROMPT.repeat(2, 1),
                    attention_mask=torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]), max_new_tokens=4)
    with pytest.raises(ConfigError, match="streamers"):
        generate_in(target, drafter, mask, mode, input_ids=PROMPT.repeat(2, 1), max_new_tokens=4, streamer=object())
    assert not hf.is_patched(target)
