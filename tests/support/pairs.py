"""Tiny decoder-only target/drafter pairs shared by the test modules (the one place they are built).

A random drafter disagrees with a random target almost everywhere, which would leave the
"draft accepted" branches untested, and a random init gives nearly flat next-token distributions.
So every pair here sharpens the target's LM head and derives the drafter from the target:

* :func:`truncated_pair`: the drafter is the target's first layers (embeddings, the first
  ``draft_layers`` decoder layers, final norm and head copied into a separate, smaller model of the
  same family); the mask skips about half the layers, never layer 0. Works for every tiny family.
* :func:`noisy_pair`: the drafter is a noisy copy of the target (it agrees often, not always), and
  one target layer is damped so that the slim verifier that skips it sits between drafter and
  target, as the demo pair's LayerDrop training makes it: the pair lossy mode is built for.
* :func:`save_char_pair`: the bench's pair on disk (character tokenizer, ``target/``, ``draft/``,
  optionally ``mask.json``); :func:`save_pair_dir` writes any pair with any tokenizer.
* :func:`load_shipped_demo_pair`: the demo pair shipped in the package.

Encoder-decoder pairs live in :mod:`tests.support.seq2seq`, the tiny EAGLE set-up in
:mod:`tests.support.eagle`.
"""

from __future__ import annotations

import copy
import string
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import AutoModelForCausalLM

from viasd_adapt.models.tiny import tiny_config, tiny_model
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.mask import model_fingerprint


class TinyPair(NamedTuple):
    """A target, its drafter, and the routing mask of the slim verifier the tests use."""

    target: torch.nn.Module
    drafter: torch.nn.Module
    mask: RoutingMask


# ----------------------------------------------------------------------------- model surgery


def sharpen(model: torch.nn.Module, factor: float) -> torch.nn.Module:
    """Scales the LM head so that random models have peaked, not flat, next-token distributions."""
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(factor)
    return model


def sharpened_model(family: str = "llama", factor: float = 30.0, seed: int = 0, num_layers: int = 6, **config) -> torch.nn.Module:
    """A tiny model of ``family`` with a scaled-up LM head (peaked like a trained model's)."""
    return sharpen(tiny_model(family, seed=seed, num_layers=num_layers, **config), factor)


def truncated_drafter(target: torch.nn.Module, family: str, vocab_size: int, draft_layers: int = 1, **config) -> torch.nn.Module:
    """A ``draft_layers``-layer model holding the target's first layers, embeddings and head."""
    draft_config = tiny_config(family, vocab_size=vocab_size, num_layers=draft_layers, **config)
    drafter = AutoModelForCausalLM.from_config(draft_config, attn_implementation="eager")
    state = {k: v for k, v in target.state_dict().items() if k in drafter.state_dict()}
    drafter.load_state_dict(state, strict=False)
    return drafter.eval()


def noisy_copy(model: torch.nn.Module, scale: float, seed: int) -> torch.nn.Module:
    """A copy of ``model`` with Gaussian noise (``scale`` times each tensor's std) on every weight."""
    clone = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in clone.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp_min(1e-3))
    return clone


def damp_layer(model: torch.nn.Module, layer: int, factor: float) -> torch.nn.Module:
    """Shrinks one Llama-style layer's residual updates, so that skipping it changes little."""
    block = model.model.layers[layer]
    with torch.no_grad():
        block.self_attn.o_proj.weight.mul_(factor)
        block.mlp.down_proj.weight.mul_(factor)
    return model


def half_mask(layers: int) -> RoutingMask:
    """Skips about 45% of ``layers`` (every other layer from the top), never layer 0."""
    skipped = list(range(layers - 1, 0, -2))[: max(1, round(0.45 * layers))]
    return RoutingMask.from_skipped(layers, skipped)


# ----------------------------------------------------------------------------- pairs


def truncated_pair(family: str = "llama", vocab_size: int = 96, layers: int = 4, draft_layers: int = 1, seed: int = 0,
                   sharpness: float = 1.0, **config) -> TinyPair:
    """(target, drafter = the target's first layers, :func:`half_mask`)."""
    target = tiny_model(family, seed, num_layers=layers, vocab_size=vocab_size, **config)
    if sharpness != 1.0:
        sharpen(target, sharpness)
    drafter = truncated_drafter(target, family, vocab_size, draft_layers, **config)
    return TinyPair(target, drafter, half_mask(layers))


def noisy_pair(family: str = "llama", vocab_size: int = 64, noise: float = 0.25, seed: int = 0) -> TinyPair:
    """(4-layer target with its head scaled 20x, a noisy copy as drafter, a mask).

    For Llama, layer 3 is damped and the mask skips it: the slim verifier sits between drafter and
    target, the regime lossy mode is for. Other families get no damping and a mask skipping layer 1.
    """
    target = sharpen(tiny_model(family, seed, num_layers=4, vocab_size=vocab_size), 20.0)
    if family == "llama":
        damp_layer(target, 3, 0.05)
    mask = RoutingMask.from_skipped(4, [3] if family == "llama" else [1])
    return TinyPair(target, noisy_copy(target, noise, seed + 1), mask)


def greedy_reference(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    """Plain greedy decoding: a full forward per token, no cache, argmax (the reference of every
    "token-identical to the target's greedy output" check)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


# ----------------------------------------------------------------------------- pairs on disk


CHAR_VOCAB = 112
CHAR_LAYERS = 6
#: two code prompts in the char tokenizer's alphabet (the bench's prompts file in its tests)
CHAR_PROMPTS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n"]


def char_tokenizer():
    """A character-level tokenizer over printable ASCII (ids < :data:`CHAR_VOCAB`), with
    ``<unk>``/``<eos>``/``<pad>``/``<bos>`` at ids 0-3."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Split
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in "\x0b\x0c"]
    vocab = {"<unk>": 0, "<eos>": 1, "<pad>": 2, "<bos>": 3}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    assert len(vocab) <= CHAR_VOCAB
    tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = Split("", behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>", bos_token="<bos>")


def char_mask() -> RoutingMask:
    """The mask of the char pair: skips layers 2 and 4 of 6 (s1 = 2: q can resume on u's prefix)."""
    return RoutingMask.from_skipped(CHAR_LAYERS, [2, 4])


def char_pair_models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The bench's models: a 6-layer Llama (head scaled 40x) and a 1-layer drafter holding its first
    layer and head."""
    target = sharpen(tiny_model("llama", seed, num_layers=CHAR_LAYERS, vocab_size=CHAR_VOCAB), 40.0)
    return target.eval(), truncated_drafter(target, "llama", CHAR_VOCAB, 1)


def save_pair_dir(root: Path, target: torch.nn.Module, drafter: torch.nn.Module, tokenizer,
                  mask: RoutingMask | None = None, eos_token_id: int | None = None) -> Path:
    """Writes ``root/{target,draft}`` (each with the tokenizer) and, given a mask, a fingerprinted
    ``mask.json``, laid out like a built pair; returns ``root``."""
    for name, model in (("target", target), ("draft", drafter)):
        if eos_token_id is not None:
            model.generation_config.eos_token_id = eos_token_id
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    if mask is not None:
        MaskArtifact(mask, ratio=mask.ratio, fingerprint=model_fingerprint(target)).save(root / "mask.json")
    return root


def save_char_pair(root: Path, with_mask: bool = False) -> Path:
    """The bench's char pair on disk: ``root/{target,draft}`` and, if asked, ``mask.json``."""
    target, drafter = char_pair_models()
    save_pair_dir(root, target, drafter, char_tokenizer())
    if with_mask:
        MaskArtifact(char_mask(), 0.33, fingerprint=model_fingerprint(target)).save(root / "mask.json")
    return root


def load_shipped_demo_pair():
    """``(pair, tokenizer, target, drafter)`` of the demo pair shipped in the package, fp32, eval.

    The pair and its DIMR mask are part of the package, so a missing one is a failure, not a skip.
    """
    from transformers import AutoTokenizer

    from viasd_adapt.models.registry import demo_pair_paths

    pair = demo_pair_paths()
    assert pair.mask is not None, "the shipped demo pair has no mask.json"
    tokenizer = AutoTokenizer.from_pretrained(str(pair.target))
    target = AutoModelForCausalLM.from_pretrained(str(pair.target), dtype=torch.float32).eval()
    drafter = AutoModelForCausalLM.from_pretrained(str(pair.draft), dtype=torch.float32).eval()
    return pair, tokenizer, target, drafter
