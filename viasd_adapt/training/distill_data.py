"""Distillation data: the target's own greedy answers to chat prompts, with its top-k logits.

Why the target's answers and not text: at run time a drafter only ever drafts the *target's*
continuation of a chat prompt, so the contexts worth learning are exactly those, and with greedy
decoding the token to predict is the target's argmax. Each answer token keeps the target's top-k
logits (k = 32 by default; the full 49152-wide rows of SmolLM2 would take gigabytes), which gives
the drafter soft labels (which near-misses the target also liked) at almost no extra cost.

Answers are generated in left-padded batches (one target forward per step for the whole batch):
on a CPU a batch of 16 costs little more than one sequence, because a 1-token forward only
streams the weights. Deterministic: greedy decoding, fixed batch order, fixed thread count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from viasd_adapt.errors import ConfigError


@dataclass
class DistillExample:
    """One prompt and the target's answer: ``ids`` = prompt + answer, the answer starting at
    ``answer_start``; ``topk_ids[j]``/``topk_logits[j]`` are the target's top-k at the position that
    predicts ``ids[answer_start + j]``."""

    ids: torch.Tensor  # (length,) long
    answer_start: int
    topk_ids: torch.Tensor  # (answer length, k) long
    topk_logits: torch.Tensor  # (answer length, k) float16

    @property
    def answer_length(self) -> int:
        return int(self.ids.numel()) - self.answer_start


def _eos_ids(target, tokenizer) -> set[int]:
    eos = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


@torch.no_grad()
def target_answers(
    target: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int,
    batch_size: int = 16,
    top_k: int = 32,
    max_prompt_tokens: int = 384,
    progress: Callable[[str], None] | None = None,
) -> list[DistillExample]:
    """The target's greedy answers (cut after the first end-of-sequence token) to ``prompts``,
    chat-templated when the tokenizer has a template (:func:`viasd_adapt.prompts.chat.encode_prompt`).
    Prompts longer than ``max_prompt_tokens`` keep their last tokens. Batches are formed from
    prompts of similar length, so little compute goes to padding."""
    from viasd_adapt.prompts.chat import encode_prompt

    if max_new_tokens < 1 or batch_size < 1 or top_k < 1:
        raise ConfigError(f"need max_new_tokens, batch_size and top_k >= 1; got {max_new_tokens}, {batch_size}, {top_k}")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ConfigError("the target's tokenizer has neither a pad nor an end-of-sequence token")
    eos = _eos_ids(target, tokenizer)
    encoded = [encode_prompt(tokenizer, text)[-max_prompt_tokens:] for text in prompts]
    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i]), i))
    results: dict[int, DistillExample] = {}
    started = time.perf_counter()
    for first in range(0, len(order), batch_size):
        picks = order[first:first + batch_size]
        width = max(len(encoded[i]) for i in picks)
        input_ids = torch.full((len(picks), width), pad, dtype=torch.long)
        attention = torch.zeros((len(picks), width), dtype=torch.long)
        for row, index in enumerate(picks):
            ids = encoded[index]
            input_ids[row, width - len(ids):] = torch.tensor(ids)
            attention[row, width - len(ids):] = 1
        out = target.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, do_sample=False,
            pad_token_id=pad, return_dict_in_generate=True, output_logits=True,
        )
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1)  # (batch, steps, vocab)
        values, indices = logits.float().topk(top_k, dim=-1)
        for row, index in enumerate(picks):
            answer = new[row].tolist()
            length = len(answer)
            for position, token in enumerate(answer):
                if token in eos:
                    length = position + 1
                    break
            if length == 0:
                continue
            prompt = torch.tensor(encoded[index], dtype=torch.long)
            results[index] = DistillExample(
                ids=torch.cat([prompt, new[row, :length]]), answer_start=prompt.numel(),
                topk_ids=indices[row, :length].clone(), topk_logits=values[row, :length].half().clone(),
            )
        if progress is not None:
            done = min(first + batch_size, len(order))
            tokens = sum(e.answer_length for e in results.values())
            progress(f"target answers {done}/{len(order)}: {tokens} tokens, {time.perf_counter() - started:.0f}s")
    return [results[i] for i in sorted(results)]


def token_frequencies(examples: Sequence[DistillExample], vocab_size: int) -> torch.Tensor:
    """How often each token is the target's answer token (the top-1) over ``examples``."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for example in examples:
        counts += torch.bincount(example.ids[example.answer_start:], minlength=vocab_size)[:vocab_size]
    return counts





# ----------------------------------------------------------------------------- cache

SHARD_PROMPTS = 64  # prompts per cached shard: an interrupted generation loses at most one shard
DATA_FORMAT = 1  # bump when what a shard holds or how it is generated changes (it is part of the shard's key)
#: How a shard file is laid out: 2 stores a content digest beside the examples (1, a bare list, had none).
SHARD_LAYOUT = 2
_TENSORS = ("ids", "topk_ids", "topk_logits")


def _shard_key(target_sketch: dict, prompts: Sequence[str], settings: dict) -> str:
    import hashlib

    from viasd_adapt.io import key_text

    digest = hashlib.sha256()
    digest.update(key_text({"format": DATA_FORMAT, "target": target_sketch, "settings": settings}, sort_keys=True).encode())
    for prompt in prompts:
        digest.update(prompt.encode("utf-8") + b"\0")
    return digest.hexdigest()[:32]


def shard_digest(items: Sequence[dict]) -> str:
    """The digest a shard stores with its examples: every tensor and every answer start."""
    from viasd_adapt.cache_check import tensors_digest

    tensors = {f"{i}.{name}": item[name] for i, item in enumerate(items) for name in _TENSORS}
    tensors.update({f"{i}.answer_start": torch.tensor(int(item["answer_start"])) for i, item in enumerate(items)})
    return tensors_digest(tensors)


def shard_problem(data: Any, prompts: int, top_k: int, vocab: int) -> str | None:
    """Why a shard read back cannot be the target's answers to its ``prompts`` prompts (None: it can).

    Checked before training reads it: the digest stored with it (a shard of the first layout, a
    bare list, has none and is checked on its structure alone), at most one example per prompt,
    int64 ids and top-k ids inside the vocabulary, ``(answer length, top_k)`` top-k tensors with
    finite float16 logits, and an answer that starts inside the sequence."""
    items = data.get("items") if isinstance(data, dict) else data
    if not isinstance(items, list) or len(items) > prompts:
        return "it does not hold one example per prompt"
    for number, item in enumerate(items):
        if not isinstance(item, dict) or any(not isinstance(item.get(name), torch.Tensor) for name in _TENSORS) \
                or not isinstance(item.get("answer_start"), int):
            return f"example {number} is not a distillation example"
        ids, topk_ids, logits, start = item["ids"], item["topk_ids"], item["topk_logits"], item["answer_start"]
        if ids.dtype != torch.long or topk_ids.dtype != torch.long or logits.dtype != torch.float16:
            return f"example {number} has tensors of other dtypes (ids {ids.dtype}, top-k logits {logits.dtype})"
        if ids.dim() != 1 or not 0 < start < ids.numel():
            return f"example {number} has no answer inside its {ids.numel()} tokens"
        if topk_ids.shape != (ids.numel() - start, top_k) or logits.shape != topk_ids.shape:
            return f"example {number} has top-k tensors of shape {tuple(topk_ids.shape)}, not {(ids.numel() - start, top_k)}"
        for name, tensor in (("token", ids), ("top-k", topk_ids)):
            if int(tensor.min()) < 0 or int(tensor.max()) >= vocab:
                return f"example {number} has a {name} id outside the vocabulary of {vocab}"
        if not bool(torch.isfinite(logits).all()):
            return f"example {number} has non-finite top-k logits"
    if isinstance(data, dict) and data.get("digest") != shard_digest(items):
        return "its content does not match the digest stored with it (damaged or edited)"
    return None


def cached_target_answers(
    target: torch.nn.Module,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int,
    batch_size: int = 16,
    top_k: int = 32,
    max_prompt_tokens: int = 256,
    progress: Callable[[str], None] | None = None,
    cache_root=None,
) -> list[DistillExample]:
    """:func:`target_answers`, kept in the cache (``<cache>/distill/``) in shards of
    :data:`SHARD_PROMPTS` prompts, each keyed by the target's weight sketch, the generation
    settings and its prompts. A rebuild, or the EAGLE head built on the same data, reads the shards
    instead of generating again; an interrupted generation keeps every finished shard (each is
    written whole by a rename, :func:`viasd_adapt.io.write_atomic`).

    A shard is checked before it is used (:func:`shard_problem`: its digest, dtypes, shapes and
    ids); one that fails is said to be unusable (:class:`~viasd_adapt.cache_check.CacheEntryWarning`)
    and generated again. A shard of the first layout (no digest) that passes the other checks is
    used and written again with its digest."""
    from pathlib import Path

    from viasd_adapt.cache_check import report_unusable
    from viasd_adapt.io import write_atomic
    from viasd_adapt.models.registry import cache_dir
    from viasd_adapt.routing.mask import model_fingerprint

    root = Path(cache_root) if cache_root is not None else cache_dir() / "distill"
    sketch = model_fingerprint(target)
    vocab = len(tokenizer)
    settings = {"max_new_tokens": max_new_tokens, "batch_size": batch_size, "top_k": top_k,
                "max_prompt_tokens": max_prompt_tokens, "vocab": vocab}
    vocab = max(vocab, int(getattr(getattr(target, "config", None), "vocab_size", 0) or 0))
    examples: list[DistillExample] = []

    def save(path: Path, items: list[dict]) -> None:
        data = {"layout": SHARD_LAYOUT, "digest": shard_digest(items), "items": items}
        write_atomic(path, lambda tmp: torch.save(data, tmp), "distillation data shard")

    for first in range(0, len(prompts), SHARD_PROMPTS):
        chunk = list(prompts[first:first + SHARD_PROMPTS])
        path = root / f"{_shard_key(sketch, chunk, settings)}.pt"
        shard = None
        if path.is_file():
            try:
                data = torch.load(path, map_location="cpu", weights_only=True)
                problem = shard_problem(data, len(chunk), top_k, vocab)
            except Exception:  # noqa: BLE001 - an unreadable shard is regenerated, never trusted
                problem = "it cannot be read as a torch file of tensors"
            if problem is None:
                items = data["items"] if isinstance(data, dict) else data
                shard = [DistillExample(**item) for item in items]
                if not isinstance(data, dict):  # the first layout: add the digest
                    save(path, items)
            else:
                report_unusable(f"the distillation data shard {path}", problem, stacklevel=3)
        if shard is None:
            shard = target_answers(target, tokenizer, chunk, max_new_tokens, batch_size, top_k, max_prompt_tokens)
            save(path, [dict(example.__dict__) for example in shard])
        examples.extend(shard)
        if progress is not None:
            tokens = sum(e.answer_length for e in examples)
            progress(f"target answers: {min(first + SHARD_PROMPTS, len(prompts))}/{len(prompts)} prompts, {tokens} tokens")
    return examples

__all__ = ["DATA_FORMAT", "SHARD_LAYOUT", "SHARD_PROMPTS", "DistillExample", "cached_target_answers", "shard_digest", "shard_problem",
           "target_answers", "token_frequencies"]
