"""The tiny EAGLE setup shared by the EAGLE test modules: a 6-layer Llama target (saved with
``save_pretrained``), a second target with other weights, a briefly trained head for the first,
the routing mask the tests use, and held-out prompts. Built in seconds from configs (no download)."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from viasd_adapt.training import corpus
from viasd_adapt.config.mask import RoutingMask

NUM_LAYERS = 6
MASK = RoutingMask.from_skipped(NUM_LAYERS, [2, 4])  # s1 = 2: the prefix (layers 0-1) can be shared
EARLY_MASK = RoutingMask.from_skipped(NUM_LAYERS, [0, 3])  # s1 = 0: nothing to share, layer 0 skipped


def _save_target(path: Path, tokenizer, seed: int) -> None:
    from viasd_adapt.models.tiny import tiny_model

    model = tiny_model("llama", seed=seed, vocab_size=len(tokenizer), num_layers=NUM_LAYERS)
    with torch.no_grad():  # sharper distributions than a plain random init: greedy paths get long
        model.lm_head.weight.mul_(6.0)
    model.config.bos_token_id = tokenizer.bos_token_id
    model.config.eos_token_id = tokenizer.eos_token_id
    model.config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def build_tiny_eagle(root: Path) -> Path:
    """``root/target``, ``root/other`` (another target) and ``root/head`` (a head for ``target``)."""
    from viasd_adapt.training.eagle_head import train_eagle_head
    from viasd_adapt.training.tokenizer import train_tokenizer

    texts = [source.read() for source in corpus.split_files()[0][:15]]
    tokenizer = train_tokenizer(texts, 320)
    _save_target(root / "target", tokenizer, seed=0)
    _save_target(root / "other", tokenizer, seed=1)
    train_eagle_head(root / "target", root / "head", seed=0, steps=40, batch_size=4, seq_len=32, max_train_chars=40_000)
    return root


@functools.lru_cache(maxsize=None)
def _heldout_texts(n: int) -> tuple[str, ...]:
    return tuple(corpus.heldout_prompts(n, seed=3))  # about a second per call: read once


def prompts(ea_model, n: int = 3) -> list[torch.Tensor]:
    """``n`` held-out code prompts of at most 24 tokens, as (1, len) id tensors."""
    tokenizer = ea_model.get_tokenizer()
    return [tokenizer(text, return_tensors="pt").input_ids[:, :24] for text in _heldout_texts(n)]
