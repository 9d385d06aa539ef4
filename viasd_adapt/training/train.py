"""A small, deterministic training loop for Llama causal LMs, with optional LayerDrop.

We write the loop ourselves rather than use ``transformers.Trainer`` because LayerDrop needs to
swap decoder layers for pass-throughs per step, and because the whole run must be reproducible
bit for bit from a seed (fixed data order, seeded initialisation and mask draws).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from viasd_adapt.errors import ConfigError
from viasd_adapt.training.layer_skip import skipped_layers
from viasd_adapt.training.presets import ModelShape, TrainingBudget


def token_stream(texts: Sequence[str], tokenizer: PreTrainedTokenizerFast) -> torch.Tensor:
    """All texts as one 1-D tensor of ids, each text framed by BOS ... EOS."""
    encodings = tokenizer.backend_tokenizer.encode_batch(list(texts), add_special_tokens=False)
    ids: list[int] = []
    for encoding in encodings:
        ids.append(tokenizer.bos_token_id)
        ids.extend(encoding.ids)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def chunk(stream: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Non-overlapping rows of ``seq_len`` tokens (the ragged tail is dropped)."""
    rows = stream.numel() // seq_len
    if rows == 0:
        raise ConfigError(f"only {stream.numel()} tokens, fewer than one sequence of {seq_len}")
    return stream[: rows * seq_len].view(rows, seq_len)


def llama_config(shape: ModelShape, tokenizer: PreTrainedTokenizerFast, seq_len: int) -> LlamaConfig:
    """A Llama config for ``shape`` that matches the tokenizer's vocabulary and special tokens."""
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        max_position_embeddings=max(1024, 4 * seq_len),
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def new_model(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """A freshly initialised model; the same seed gives the same weights."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.config.use_cache = True
    return model


def _next_token_loss(logits: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))


class _EntryRecorder(torch.nn.Module):
    """Wraps one decoder-layer slot for a training step: keeps the residual stream entering it."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.entering: torch.Tensor | None = None

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        self.entering = hidden_states
        return self.inner(hidden_states, *args, **kwargs)


def causal_lm_loss(model: LlamaForCausalLM, batch: torch.Tensor, early_exit_layers: Sequence[int] = (),
                   early_exit_weight: float = 0.0) -> torch.Tensor:
    """Mean next-token cross-entropy over a batch of full rows, plus the weighted early-exit loss:
    the mean cross-entropy of the final norm + LM head applied to the residual stream entering each
    of ``early_exit_layers`` (whatever module sits in that slot, a LayerDrop stub included)."""
    if not early_exit_layers or early_exit_weight <= 0:
        return _next_token_loss(model(input_ids=batch, use_cache=False).logits, batch)
    layers = model.model.layers
    originals = {i: layers[i] for i in early_exit_layers}
    recorders = {i: _EntryRecorder(layer) for i, layer in originals.items()}
    try:
        for i, recorder in recorders.items():
            layers[i] = recorder
        loss = _next_token_loss(model(input_ids=batch, use_cache=False).logits, batch)
        head, norm = model.get_output_embeddings(), model.model.norm
        exits = [_next_token_loss(head(norm(r.entering)), batch) for r in recorders.values()]
    finally:
        for i, layer in originals.items():
            layers[i] = layer
    return loss + early_exit_weight * torch.stack(exits).mean()


def _lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak learning rate."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def _layerdrop_skip(num_layers: int, budget: TrainingBudget, rng: random.Random) -> list[int]:
    """The layers to skip on one step: none, or 1..max random layers other than layer 0."""
    if budget.layerdrop_step_fraction <= 0 or rng.random() >= budget.layerdrop_step_fraction:
        return []
    most = min(num_layers - 1, max(1, round(budget.layerdrop_max_ratio * num_layers)))
    count = rng.randint(1, most)
    return rng.sample(range(1, num_layers), count)


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, loss: torch.Tensor) -> float:
    """One clipped AdamW step and a scheduler tick; returns the loss as a float. Shared by every
    training loop of the project so that the recipes differ only in what they compute a loss on."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss.item()


def train_model(
    model: LlamaForCausalLM,
    rows: torch.Tensor,
    budget: TrainingBudget,
    seed: int,
    label: str = "train",
    progress: bool = True,
) -> list[float]:
    """Train ``model`` in place on ``rows`` (N x seq_len ids); returns the loss of every step.

    Data order: the rows are shuffled once per pass by a generator seeded from ``seed``; batches
    are consecutive slices of that order. LayerDrop masks come from a separate seeded RNG.
    """
    if budget.steps <= 0 or budget.batch_size <= 0:
        raise ConfigError(f"steps and batch size must be positive, got {budget}")
    model.train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=budget.learning_rate, betas=(0.9, 0.95), weight_decay=budget.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, budget.warmup_steps, budget.steps)
    )
    order_generator = torch.Generator().manual_seed(seed)
    mask_rng = random.Random(seed)
    num_layers = model.config.num_hidden_layers
    order = torch.randperm(rows.size(0), generator=order_generator)
    cursor = 0
    losses: list[float] = []
    bar = tqdm(range(budget.steps), desc=label, disable=not progress, dynamic_ncols=True, mininterval=1.0)
    for _ in bar:
        if cursor + budget.batch_size > order.numel():
            order = torch.randperm(rows.size(0), generator=order_generator)
            cursor = 0
        batch = rows[order[cursor : cursor + budget.batch_size]]
        cursor += budget.batch_size
        skip = _layerdrop_skip(num_layers, budget, mask_rng)
        with skipped_layers(model, skip):
            loss = causal_lm_loss(model, batch, budget.early_exit_layers, budget.early_exit_weight)
        losses.append(optimizer_step(model, optimizer, scheduler, loss))
        shown = {"loss": f"{sum(losses[-20:]) / len(losses[-20:]):.3f}"}
        if budget.layerdrop_step_fraction > 0:
            shown["skipped"] = len(skip)
        bar.set_postfix(shown)
    model.eval()
    return losses
