"""Distilling a small drafter from a real target on a CPU (``viasd models build --recipe smollm2``).

Design (why each choice):

* **Data:** the target's own greedy answers to generated chat prompts
  (:mod:`~viasd_adapt.prompts.distill`, never Spec-Bench) with its top-k logits
  (:mod:`~viasd_adapt.training.distill_data`): exactly the contexts a drafter drafts in.
* **Model:** ``num_layers`` Llama decoder layers of the target's width that share the target's
  token embedding and tied LM head (:mod:`~viasd_adapt.models.shared_drafter`), so the shipped
  file holds only the layers and a norm. The layers start from copies of target layers
  (``init_layers``) and the norm from its final norm: they already speak the target's residual
  stream, which a random layer has to learn first.
* **Drafting vocabulary:** the head scores only the ``draft_vocab_size`` tokens the target
  emitted most often in the training answers (plus its end-of-sequence tokens): the full head is
  most of a 1-layer drafter's CPU forward.
* **Logit bias:** a trained per-token bias over the drafting vocabulary, started at the log
  frequency of each token in the answers: a unigram prior from step 0 (the tied head alone scores
  the *current* token's own row highest, a poor start for a shallow model).
* **Loss:** cross-entropy against the target's top-k distribution renormalised over the drafting
  vocabulary, on answer tokens only (prompt tokens are context).
* **Held out:** every 20th example; the report gives the drafter's teacher-forced top-1 agreement
  with the target there, and how many of the target's tokens the drafting vocabulary covers.

Seeded initialisation and data order on a fixed thread count give identical weights.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch
from torch import nn

from viasd_adapt.errors import ConfigError
from viasd_adapt.training.distill_data import DistillExample


@dataclass(frozen=True)
class DistillPreset:
    """Everything a drafter (and EAGLE head) distillation needs besides the seed and the target."""

    name: str
    num_prompts: int
    max_new_tokens: int
    num_layers: int
    draft_vocab_size: int
    epochs: float
    batch_size: int
    learning_rate: float
    init_layers: tuple[int, ...]  # target layers copied into the drafter's layers (negative: from the end)
    generation_batch_size: int = 32
    top_k: int = 32
    max_prompt_tokens: int = 256
    heldout_every: int = 20
    eagle_head_examples: int = 0  # 0: no EAGLE head
    eagle_head_epochs: float = 1.0
    eagle_head_learning_rate: float = 3e-3
    notes: str = ""

    def __post_init__(self) -> None:
        if self.num_layers < 1 or len(self.init_layers) not in (0, self.num_layers):
            raise ConfigError(f"preset {self.name!r}: init_layers must name one target layer per drafter layer")
        if self.draft_vocab_size < 2 or self.num_prompts < self.heldout_every:
            raise ConfigError(f"preset {self.name!r}: needs draft_vocab_size >= 2 and num_prompts >= heldout_every")

    def to_dict(self) -> dict:
        return asdict(self)


def split_examples(examples: Sequence[DistillExample], every: int) -> tuple[list[DistillExample], list[DistillExample]]:
    """``(train, held out)``: every ``every``-th example is held out."""
    train = [e for i, e in enumerate(examples) if i % every != every - 1]
    heldout = [e for i, e in enumerate(examples) if i % every == every - 1]
    return train, heldout


def choose_draft_vocab(examples: Sequence[DistillExample], size: int, vocab_size: int, always: Sequence[int]) -> torch.Tensor:
    """The ``size`` most frequent answer tokens (ties by id), plus ``always``, sorted by id."""
    from viasd_adapt.training.distill_data import token_frequencies

    counts = token_frequencies(examples, vocab_size).double()
    counts[list(always)] = float("inf")
    size = min(size, vocab_size)
    # stable tie-break: a tiny, id-dependent decrement
    keys = counts - torch.arange(vocab_size, dtype=torch.float64) / (4 * vocab_size)
    return keys.topk(size).indices.sort().values


def _init_from_target(drafter: nn.Module, target: nn.Module, init_layers: Sequence[int]) -> None:
    with torch.no_grad():
        for mine, index in zip(drafter.model.layers, init_layers):
            mine.load_state_dict(target.model.layers[index].state_dict())
        drafter.model.norm.load_state_dict(target.model.norm.state_dict())


def _batch(examples: Sequence[DistillExample], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(e.ids.numel() for e in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    for row, example in enumerate(examples):
        ids[row, : example.ids.numel()] = example.ids
        attention[row, : example.ids.numel()] = 1
    return ids, attention


def _answer_positions(examples: Sequence[DistillExample]) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, position) of every hidden state that predicts an answer token."""
    rows, positions = [], []
    for row, example in enumerate(examples):
        span = torch.arange(example.answer_start - 1, example.ids.numel() - 1)
        rows.append(torch.full_like(span, row))
        positions.append(span)
    return torch.cat(rows), torch.cat(positions)


def distill_loss(
    drafter: nn.Module, rows: torch.Tensor, bias: torch.Tensor, examples: Sequence[DistillExample],
    to_draft: torch.Tensor, pad: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, top-1 agreement)`` on one batch: soft cross-entropy against the target's top-k,
    renormalised over the drafting vocabulary (``to_draft`` maps a token id to its drafting index,
    -1 outside)."""
    ids, attention = _batch(examples, pad)
    hidden = drafter.model(input_ids=ids, attention_mask=attention).last_hidden_state
    row, position = _answer_positions(examples)
    logits = hidden[row, position] @ rows.T + bias  # (answer tokens, draft vocab)
    top_ids = torch.cat([e.topk_ids for e in examples])
    top_logits = torch.cat([e.topk_logits for e in examples]).float()
    mapped = to_draft[top_ids]
    top_logits = top_logits.masked_fill(mapped < 0, float("-inf"))
    wanted = top_logits.softmax(-1).nan_to_num(0.0)  # a row with no top-k token in the vocabulary adds nothing
    log_probs = logits.log_softmax(-1).gather(-1, mapped.clamp(min=0))
    loss = -(wanted * log_probs).sum(-1).mean()
    greedy = torch.cat([e.ids[e.answer_start:] for e in examples])
    agreement = (to_draft[greedy] == logits.argmax(-1)).float().mean()
    return loss, agreement


@torch.no_grad()
def heldout_report(drafter: nn.Module, rows: torch.Tensor, bias: torch.Tensor, examples: Sequence[DistillExample],
                   to_draft: torch.Tensor, pad: int, batch_size: int = 8) -> dict:
    """Teacher-forced top-1 agreement with the target's greedy tokens, and the drafting
    vocabulary's coverage of them, on held-out examples."""
    agree = total = covered = 0
    drafter.eval()
    for first in range(0, len(examples), batch_size):
        chunk = examples[first:first + batch_size]
        ids, attention = _batch(chunk, pad)
        hidden = drafter.model(input_ids=ids, attention_mask=attention).last_hidden_state
        row, position = _answer_positions(chunk)
        predicted = (hidden[row, position] @ rows.T + bias).argmax(-1)
        greedy = torch.cat([e.ids[e.answer_start:] for e in chunk])
        agree += int((to_draft[greedy] == predicted).sum())
        covered += int((to_draft[greedy] >= 0).sum())
        total += int(greedy.numel())
    return {"examples": len(examples), "tokens": total, "top1_agreement": agree / max(1, total),
            "draft_vocab_coverage": covered / max(1, total)}


def train_drafter(
    target: nn.Module,
    examples: Sequence[DistillExample],
    preset: DistillPreset,
    seed: int,
    eos_ids: Sequence[int],
    pad: int,
    progress: Callable[[str], None] | None = None,
) -> tuple[nn.Module, torch.Tensor, torch.Tensor, dict]:
    """Trains a drafter on ``examples``; returns ``(drafter, drafting vocabulary, its logit bias, report)``.

    The drafter's ``embed_tokens`` is the target's module (frozen, shared), its ``lm_head`` unused:
    logits come from the target's embedding rows of the drafting vocabulary.
    """
    from viasd_adapt.models.shared_drafter import new_drafter

    train, heldout = split_examples(examples, preset.heldout_every)
    if not train or not heldout:
        raise ConfigError(f"need training and held-out examples; got {len(train)} and {len(heldout)}")
    vocab_size = int(target.config.vocab_size)
    token_ids = choose_draft_vocab(train, preset.draft_vocab_size, vocab_size, eos_ids)
    to_draft = torch.full((vocab_size,), -1, dtype=torch.long)
    to_draft[token_ids] = torch.arange(token_ids.numel())
    embedding = target.get_input_embeddings()
    rows = embedding.weight.detach()[token_ids].clone()
    from viasd_adapt.training.distill_data import token_frequencies

    counts = token_frequencies(train, vocab_size)[token_ids].double()
    bias = nn.Parameter(((counts + 1) / (counts + 1).sum()).log().float())  # a unigram prior to start from

    torch.manual_seed(seed)
    drafter = new_drafter(target.config, preset.num_layers)
    drafter.model.embed_tokens = embedding
    embedding.weight.requires_grad_(False)
    if preset.init_layers:
        _init_from_target(drafter, target, preset.init_layers)
    trainable = [p for n, p in drafter.named_parameters() if p.requires_grad and not n.startswith(("lm_head", "model.embed_tokens"))]
    trainable.append(bias)
    optimizer = torch.optim.AdamW(trainable, lr=preset.learning_rate, weight_decay=0.0)
    steps = max(1, math.ceil(preset.epochs * len(train) / preset.batch_size))
    warmup = max(1, steps // 20)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else 0.05 + 0.475 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))))
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses, agreements = [], []
    started = time.perf_counter()
    drafter.train()
    for step in range(steps):
        if len(order) < preset.batch_size:
            order += torch.randperm(len(train), generator=generator).tolist()
        picks, order = order[: preset.batch_size], order[preset.batch_size:]
        loss, agreement = distill_loss(drafter, rows, bias, [train[i] for i in picks], to_draft, pad)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)  # the layer and the vocabulary bias, which is not a drafter parameter
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        agreements.append(agreement.item())
        if progress is not None and (step % 10 == 0 or step == steps - 1):
            window = agreements[-10:]
            progress(f"drafter step {step + 1}/{steps}: loss {losses[-1]:.3f}, top-1 agreement {sum(window) / len(window):.3f}, "
                     f"{time.perf_counter() - started:.0f}s")
    drafter.model.embed_tokens = nn.Embedding(1, 1)  # keep the target's table out of the fp16 round trip
    drafter.half().float()  # evaluate the weights the fp16 file will hold
    drafter.model.embed_tokens = embedding
    bias = bias.detach().half().float()
    tail = max(1, min(20, steps // 5))
    report = {
        "train_examples": len(train),
        "train_answer_tokens": sum(e.answer_length for e in train),
        "steps": steps,
        "final_train_loss": sum(losses[-tail:]) / tail,
        "final_train_top1_agreement": sum(agreements[-tail:]) / tail,
        "train_seconds": round(time.perf_counter() - started, 1),
        "heldout": heldout_report(drafter, rows, bias, heldout, to_draft, pad),
    }
    return drafter.eval(), token_ids, bias, report


__all__ = ["DistillPreset", "choose_draft_vocab", "distill_loss", "heldout_report", "split_examples", "train_drafter"]
