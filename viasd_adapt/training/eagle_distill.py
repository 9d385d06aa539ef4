"""An EAGLE head for a real target, trained on the target's own answers, shipped without the embedding.

:func:`train_head_on_examples` trains eagle-llm's own head module (:func:`~viasd_adapt.training.eagle_head.build_head`)
on the distillation examples of :mod:`~viasd_adapt.training.distill_data`: the target's features
(last hidden state after the final norm) are computed once for the examples, and the loss is
EAGLE's (smooth-L1 on the next feature plus ``classification_weight`` x cross-entropy against the
target's top-k distribution) on answer positions only. The classification term scores the
drafter's drafting vocabulary instead of all 49152 tokens: on a CPU the full head would cost
more than everything else in a step, and the top-k labels live there anyway.

An EAGLE head file holds a copy of the target's token embedding (frozen, 57 MB for SmolLM2 in
fp16). The written ``pytorch_model.bin`` leaves it out and the config says so
(``"viasd_embedding": "target"``); at run time
:func:`viasd_adapt.models.eagle_head_files.complete_head` puts the base model's embedding back. The
head also records the target's weight digest, so the EAGLE adapter's existing check refuses it on
any other base model.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch.nn import functional as F

from viasd_adapt.errors import ConfigError
from viasd_adapt.models.eagle_head_files import EMBEDDING_KEY, HEAD_FORMAT, SHARED_EMBEDDING, target_weights_digest
from viasd_adapt.training.distill_data import DistillExample
from viasd_adapt.training.train import optimizer_step

CLASSIFICATION_WEIGHT = 0.1


@torch.no_grad()
def _features(target, examples: Sequence[DistillExample], pad: int, batch_size: int = 4) -> list[torch.Tensor]:
    from viasd_adapt.training.drafter_distill import _batch

    found = []
    for first in range(0, len(examples), batch_size):
        chunk = examples[first:first + batch_size]
        ids, attention = _batch(chunk, pad)
        hidden = target.model(input_ids=ids, attention_mask=attention).last_hidden_state
        found.extend(hidden[row, : e.ids.numel()].clone() for row, e in enumerate(chunk))
    return found


def _head_batch(head, rows: torch.Tensor, to_draft: torch.Tensor, examples, features, pad: int):
    """Loss terms and agreement of the head on a batch (answer positions only)."""
    from viasd_adapt.training.drafter_distill import _batch

    ids, _ = _batch(examples, pad)
    width = ids.shape[1]
    feats = torch.zeros(len(examples), width, features[0].shape[-1])
    for row, f in enumerate(features):
        feats[row, : f.shape[0]] = f
    predicted = head(feats[:, :-1], input_ids=ids[:, 1:])  # predicted[:, t] is the feature of position t + 1
    pick_rows, pick_t, top_rows = [], [], []
    for row, example in enumerate(examples):
        span = torch.arange(max(example.answer_start - 1, 1), example.ids.numel() - 1)  # positions p = t + 1
        pick_rows.append(torch.full_like(span, row))
        pick_t.append(span - 1)
        top_rows.append(span - (example.answer_start - 1))
    rows_i, t = torch.cat(pick_rows), torch.cat(pick_t)
    guess, wanted = predicted[rows_i, t], feats[rows_i, t + 1]
    regression = F.smooth_l1_loss(guess, wanted)
    top_ids = torch.cat([e.topk_ids[j] for e, j in zip(examples, top_rows)])
    top_logits = torch.cat([e.topk_logits[j] for e, j in zip(examples, top_rows)]).float()
    mapped = to_draft[top_ids]
    soft = top_logits.masked_fill(mapped < 0, float("-inf")).softmax(-1).nan_to_num(0.0)
    log_probs = (guess @ rows.T).log_softmax(-1).gather(-1, mapped.clamp(min=0))
    classification = -(soft * log_probs).sum(-1).mean()
    greedy = torch.cat([e.ids[e.answer_start - 1 + j + 1] for e, j in zip(examples, top_rows)])
    agreement = (to_draft[greedy] == (guess @ rows.T).argmax(-1)).float().mean()
    return regression, classification, agreement


def train_head_on_examples(
    target,
    target_path: str | Path,
    examples: Sequence[DistillExample],
    preset,
    seed: int,
    out_dir: Path,
    pad: int,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Trains a 1-layer EAGLE head on the first ``preset.eagle_head_examples`` training examples and
    writes it to ``out_dir`` (atomically); returns its report."""
    from viasd_adapt.io import write_directory
    from viasd_adapt.training.drafter_distill import choose_draft_vocab, split_examples
    from viasd_adapt.training.eagle_head import head_config, trainable_head
    from viasd_adapt.models.gguf import gguf_model_folder, is_gguf_path

    started = time.perf_counter()
    train, heldout = split_examples(examples, preset.heldout_every)
    train = list(train[: preset.eagle_head_examples])
    heldout = list(heldout[: max(4, preset.eagle_head_examples // 8)])
    if not train:
        raise ConfigError("no training examples for the EAGLE head")
    vocab = int(target.config.vocab_size)
    token_ids = choose_draft_vocab(train, preset.draft_vocab_size, vocab, [])
    to_draft = torch.full((vocab,), -1, dtype=torch.long)
    to_draft[token_ids] = torch.arange(token_ids.numel())
    rows = target.get_input_embeddings().weight.detach()[token_ids].clone()
    if progress is not None:
        progress(f"eagle head: target features for {len(train) + len(heldout)} examples")
    features = _features(target, train, pad)
    heldout_features = _features(target, heldout, pad)
    feature_seconds = time.perf_counter() - started

    torch.manual_seed(seed)
    fields = head_config(target.config)
    head = trainable_head(target, fields)
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=preset.eagle_head_learning_rate, weight_decay=0.0)
    batch_size = max(1, preset.batch_size // 2)
    steps = max(1, math.ceil(preset.eagle_head_epochs * len(train) / batch_size))
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else 0.05 + 0.475 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))))
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    agreements = []
    for step in range(steps):
        if len(order) < batch_size:
            order += torch.randperm(len(train), generator=generator).tolist()
        picks, order = order[:batch_size], order[batch_size:]
        regression, classification, agreement = _head_batch(
            head, rows, to_draft, [train[i] for i in picks], [features[i] for i in picks], pad)
        loss = regression + CLASSIFICATION_WEIGHT * classification
        optimizer_step(head, optimizer, schedule, loss)  # frozen embedding: no gradient, not clipped
        agreements.append(agreement.item())
        if progress is not None and (step % 10 == 0 or step == steps - 1):
            window = agreements[-10:]
            progress(f"eagle head step {step + 1}/{steps}: loss {loss.item():.3f}, top-1 agreement {sum(window) / len(window):.3f}")
    head.eval()
    state = {k: v.detach().half().clone() for k, v in head.state_dict().items() if k != EMBEDDING_KEY}
    with torch.no_grad():
        head.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
        _, _, heldout_agreement = _head_batch(head, rows, to_draft, heldout, heldout_features, pad)
    base = gguf_model_folder(target_path) if is_gguf_path(target_path) else Path(target_path)
    report = {"train_examples": len(train), "steps": steps, "feature_seconds": round(feature_seconds, 1),
              "final_train_top1_agreement": sum(agreements[-10:]) / len(agreements[-10:]),
              "heldout_top1_agreement_draft_vocab": float(heldout_agreement),
              "seconds": round(time.perf_counter() - started, 1)}
    fields.update(viasd_format=HEAD_FORMAT, viasd_embedding=SHARED_EMBEDDING,
                  viasd_target_fingerprint=target_weights_digest(base),
                  viasd_training={"seed": seed, "preset": preset.name, **report, "threads": torch.get_num_threads()})

    def write(directory: Path) -> None:
        torch.save(state, directory / "pytorch_model.bin")
        (directory / "config.json").write_text(json.dumps(fields, indent=2) + "\n", encoding="utf-8")

    write_directory(out_dir, write, "EAGLE head")
    return report


__all__ = ["train_head_on_examples"]
