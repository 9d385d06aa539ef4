"""Input checks that any loop or adapter calls (``viasd_adapt.checks``), on their own, without a
generation: each refuses its bad input with the sentence that names it, and lets good input by.
The HF adapter's tests (tests/adapters/hf/test_hf_errors.py) check the same sentences through
``generate``."""

from __future__ import annotations

import pytest
import torch

from tests.support.pairs import truncated_pair
from viasd_adapt.checks import check_drafter_pair, check_prompt_batch
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.models.tiny import tiny_model

IDS = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])


def test_a_left_padded_batch_passes():
    check_prompt_batch(IDS, torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]]))
    check_prompt_batch(IDS[:1], None, streaming=True)


@pytest.mark.parametrize(("ids", "mask", "streaming", "message"), [
    ([[5, 6]], None, False, r"input_ids must be a 2-D tensor \(batch, length\), got <class 'list'>"),
    (torch.tensor([5, 6]), None, False, r"input_ids must be a 2-D tensor \(batch, length\), got torch.Size\(\[2\]\)"),
    (torch.zeros((1, 0), dtype=torch.long), None, False, "the prompt is empty: at least one token"),
    (IDS, torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]]), False, "a row of the batch is all padding"),
    (IDS, torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), False, "only left padding is supported"),
    (IDS, torch.tensor([[1, 1, 1], [0, 1, 1]]), False, "only left padding is supported"),  # a mask of another shape
    (IDS, None, True, "streamers support a single sequence"),
])
def test_a_bad_batch_is_refused_by_name(ids, mask, streaming, message):
    with pytest.raises(ConfigError, match=message):
        check_prompt_batch(ids, mask, streaming=streaming)


class _Vocab:
    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return self.vocab


def test_a_drafter_pair_needs_one_vocabulary_and_one_tokenizer():
    pair = truncated_pair("llama", vocab_size=64)
    check_drafter_pair(pair.target, pair.drafter, _Vocab({"a": 0}), _Vocab({"a": 0}))
    other = tiny_model("llama", vocab_size=80)
    with pytest.raises(ModelMismatchError, match="the target has 64 tokens, the assistant 80"):
        check_drafter_pair(pair.target, other, role="assistant")
    with pytest.raises(ModelMismatchError, match="target and drafter tokenizers have different vocabularies"):
        check_drafter_pair(pair.target, pair.drafter, _Vocab({"a": 0, "b": 1}), _Vocab({"a": 1, "b": 0}))
