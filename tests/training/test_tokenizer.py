"""The byte-level BPE tokenizer round-trips text and reloads through AutoTokenizer."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from viasd_adapt.errors import ConfigError
from viasd_adapt.training.tokenizer import train_tokenizer

TRAINING_TEXTS = ["def add(a, b):\n    return a + b\n", "class Point:\n    x: int = 0\n"] * 20
SAMPLES = [
    "def f(x):\n    return x * 2  # doubled\n",
    "\ttabs\tand   spaces   \n\n\n",
    "unicode: é ü 漢字 🐍",
    "",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TRAINING_TEXTS, vocab_size=320)


@pytest.mark.parametrize("text", SAMPLES)
def test_round_trip(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_special_tokens_are_distinct(tokenizer):
    special = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    assert len(special) == 3 and None not in special


def test_training_is_deterministic(tokenizer):
    assert train_tokenizer(TRAINING_TEXTS, vocab_size=320).get_vocab() == tokenizer.get_vocab()


def test_save_and_reload(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in SAMPLES:
        assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert reloaded.pad_token == tokenizer.pad_token


def test_too_small_vocabulary_is_rejected():
    with pytest.raises(ConfigError):
        train_tokenizer(TRAINING_TEXTS, vocab_size=100)
