"""A byte-level BPE tokenizer trained on the corpus, wrapped for ``transformers``.

Byte-level so that any text (including characters never seen in training) round-trips exactly;
wrapped as a ``PreTrainedTokenizerFast`` so that the rest of the project loads it with
``AutoTokenizer.from_pretrained`` like any Hub checkpoint's tokenizer. Like Llama's tokenizer it
prepends a BOS token to every encoded text.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from viasd_adapt.errors import ConfigError

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = [BOS_TOKEN, EOS_TOKEN, PAD_TOKEN]

# 256 byte symbols plus the special tokens must fit, with some room left for merges.
MIN_VOCAB_SIZE = 300


def train_tokenizer(texts: Iterable[str], vocab_size: int, max_length: int = 4096) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer on ``texts``.

    The result depends only on the texts and ``vocab_size`` (the ``tokenizers`` trainer breaks
    ties deterministically), which keeps model builds reproducible.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(f"vocab_size must be >= {MIN_VOCAB_SIZE}, got {vocab_size}")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    bos_id = core.token_to_id(BOS_TOKEN)
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B",
        special_tokens=[(BOS_TOKEN, bos_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
