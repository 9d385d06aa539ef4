"""Training an EAGLE draft head on a target's features, with our own loop.

EAGLE's drafter is a one-layer decoder (``eagle.model.cnets.Model``) that reads, at each position,
the target's last hidden state (after the final norm) concatenated with the embedding of the *next*
token, and predicts the target's next hidden state; the target's own LM head turns that into a
token distribution. We train exactly the module eagle-llm's ``EaModel`` loads, so the result drops
into any eagle pipeline, but with a small, seeded loop of our own instead of eagle's training
script (which needs DeepSpeed, GPUs and pre-dumped feature files):

* data: the standard-library corpus (:mod:`viasd_adapt.training.corpus`, train split), tokenised by
  the target's tokenizer, cut into rows; features are computed on the fly by the target (frozen);
* loss: EAGLE's, a smooth-L1 regression on the next feature plus ``classification_weight`` times
  the cross-entropy between the head's token distribution and the target's (soft labels);
* the embedding table is copied from the target and frozen, as in EAGLE;
* the output directory is the layout ``EaModel.from_pretrained(ea_model_path=...)`` expects:
  ``config.json`` (an ``EConfig`` plus ``"bias"``) and ``pytorch_model.bin``. The config also
  records a digest of the target's weights so that a head is refused on any other base model.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.io import write_directory
from viasd_adapt.models.eagle_compat import eagle_compat, quiet_eagle_noise
from viasd_adapt.models.eagle_head_files import HEAD_FORMAT, target_weights_digest
from viasd_adapt.training.train import optimizer_step


def head_config(target_config, num_layers: int = 1) -> dict:
    """The EConfig fields of a head for ``target_config`` (a Llama config)."""
    if getattr(target_config, "model_type", None) != "llama":
        raise ConfigError(f"EAGLE heads are trained for Llama targets; got model_type={target_config.model_type!r}")
    return {
        "architectures": ["EagleHead"],
        "model_type": "llama",
        "vocab_size": target_config.vocab_size,
        "hidden_size": target_config.hidden_size,
        "intermediate_size": target_config.intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": getattr(target_config, "num_key_value_heads", None) or target_config.num_attention_heads,
        "hidden_act": target_config.hidden_act,
        "max_position_embeddings": target_config.max_position_embeddings,
        "rms_norm_eps": target_config.rms_norm_eps,
        "pad_token_id": target_config.pad_token_id,
        "bos_token_id": target_config.bos_token_id,
        "eos_token_id": target_config.eos_token_id,
        "bias": True,
    }


def build_head(config_fields: dict) -> nn.Module:
    """eagle's head module (``cnets.Model``) for these config fields, built in the compat scope."""
    from eagle.model.cnets import Model
    from eagle.model.configs import EConfig

    fields = {k: v for k, v in config_fields.items() if k not in ("bias", "architectures", "model_type")}
    with eagle_compat(), quiet_eagle_noise():
        config = EConfig(**fields)
        head = Model(config, bias=bool(config_fields.get("bias", True)))
    head.gradient_checkpointing = False  # eagle's checkpointed path is only for huge heads
    head.diff_device = False
    return head


def trainable_head(target: torch.nn.Module, fields: dict) -> torch.nn.Module:
    """A fresh head in training mode whose token embedding is the target's, frozen: EAGLE reads the
    target's own embedding, so only the head's layer and projection learn."""
    head = build_head(fields)
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
    head.embed_tokens.weight.requires_grad_(False)
    return head.train()


def _training_rows(tokenizer, seq_len: int, max_chars: int, seed: int) -> torch.Tensor:
    from viasd_adapt.training import corpus
    from viasd_adapt.training.train import chunk, token_stream

    train_files, _ = corpus.split_files()
    order = sorted(train_files, key=lambda f: hashlib.sha256(f"{seed}:{f.relative_path}".encode()).hexdigest())
    texts, total = [], 0
    for source in order:
        if total >= max_chars:
            break
        text = source.read()
        texts.append(text)
        total += len(text)
    return chunk(token_stream(texts, tokenizer), seq_len)


def head_loss(
    head: nn.Module, lm_head: nn.Module, features: torch.Tensor, ids: torch.Tensor, classification_weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE's objective on one batch. Returns ``(loss, top-1 agreement with the target)``.

    ``features[:, t]`` is the target's feature of token ``ids[:, t]``. The head sees features up to
    t and the token t+1, and must produce the feature of t+1.
    """
    predicted = head(features[:, :-1], input_ids=ids[:, 1:])
    wanted = features[:, 1:]
    regression = F.smooth_l1_loss(predicted, wanted)
    head_logits = lm_head(predicted)
    with torch.no_grad():
        target_probs = lm_head(wanted).softmax(-1)
    classification = -(target_probs * head_logits.log_softmax(-1)).sum(-1).mean()
    agreement = (head_logits.argmax(-1) == target_probs.argmax(-1)).float().mean()
    return regression + classification_weight * classification, agreement


def _warmup_cosine(optimizer: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A linear warm-up over the first tenth of ``steps``, then a cosine from the full rate down to
    a tenth of it: a small head learns fast and would overshoot at the full rate to the end."""
    warmup = max(1, steps // 10)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (s + 1) / warmup if s < warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup))),
    )


def train_eagle_head(
    target_path: str | Path,
    out_dir: str | Path,
    seed: int = 0,
    steps: int = 200,
    batch_size: int = 8,
    seq_len: int = 128,
    learning_rate: float = 3e-3,
    classification_weight: float = 0.1,
    max_train_chars: int = 300_000,
    progress: bool = False,
    save_dtype: torch.dtype = torch.float16,
) -> Path:
    """Trains a one-layer EAGLE head for the Llama checkpoint at ``target_path``; writes it to
    ``out_dir`` (``config.json`` + ``pytorch_model.bin``) and returns ``out_dir``.

    Weights are saved in ``save_dtype`` (fp16 by default, so the demo head fits the package;
    ``EaModel`` casts them to the base model's dtype on load). Deterministic for a given seed and
    thread count. Training stats (losses, agreement, seconds)
    are recorded under ``"viasd_training"`` in the config.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if steps < 1 or batch_size < 1 or seq_len < 4:
        raise ConfigError(f"need steps >= 1, batch_size >= 1, seq_len >= 4; got {steps}, {batch_size}, {seq_len}")
    target_path, out_dir = Path(target_path), Path(out_dir)
    if not (target_path / "config.json").is_file():
        raise ViasdError(f"{target_path} is not a model directory (no config.json)")
    started = time.perf_counter()
    torch.manual_seed(seed)
    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    for parameter in target.parameters():
        parameter.requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    rows = _training_rows(tokenizer, seq_len, max_train_chars, seed)

    fields = head_config(target.config)
    head = trainable_head(target, fields)
    trainable = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.0)
    schedule = _warmup_cosine(optimizer, steps)
    generator = torch.Generator().manual_seed(seed)
    losses, agreements = [], []
    for step in range(steps):
        batch = rows[torch.randint(0, rows.shape[0], (batch_size,), generator=generator)]
        with torch.no_grad():
            features = target.model(input_ids=batch).last_hidden_state
        loss, agreement = head_loss(head, target.lm_head, features, batch, classification_weight)
        losses.append(optimizer_step(head, optimizer, schedule, loss))
        agreements.append(agreement.item())
        if progress and (step % 25 == 0 or step == steps - 1):
            print(f"eagle head step {step + 1}/{steps}: loss {losses[-1]:.4f}, top-1 agreement {agreements[-1]:.3f}")

    tail = max(1, min(20, steps // 5))
    fields.update(
        viasd_format=HEAD_FORMAT,
        viasd_target_fingerprint=target_weights_digest(target_path),
        viasd_training={
            "seed": seed,
            "steps": steps,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "learning_rate": learning_rate,
            "classification_weight": classification_weight,
            "train_rows": int(rows.shape[0]),
            "final_loss": sum(losses[-tail:]) / tail,
            "final_top1_agreement": sum(agreements[-tail:]) / tail,
            "seconds": round(time.perf_counter() - started, 1),
            "threads": torch.get_num_threads(),
        },
    )
    head.eval()
    state = {k: v.detach().to(save_dtype).clone() for k, v in head.state_dict().items()}

    def write(directory: Path) -> None:  # weights and config appear together or not at all
        torch.save(state, directory / "pytorch_model.bin")
        (directory / "config.json").write_text(json.dumps(fields, indent=2) + "\n", encoding="utf-8")

    write_directory(out_dir, write, "EAGLE head")
    return out_dir


def load_head(head_path: str | Path) -> nn.Module:
    """A head written by :func:`train_eagle_head` (or any eagle-format head), in float32 eval mode."""
    head_path = Path(head_path)
    fields = json.loads((head_path / "config.json").read_text())
    head = build_head(fields)
    state = torch.load(head_path / "pytorch_model.bin", map_location="cpu")
    head.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return head.float().eval()


@torch.no_grad()
def evaluate_head(
    target_path: str | Path,
    head_path: str | Path,
    mask=None,
    rows: int = 16,
    seq_len: int = 128,
) -> dict:
    """Teacher-forced top-1 agreement of the head with the target on held-out text.

    With a routing ``mask`` it also scores the head fed the *slim verifier's* features instead of
    the target's: what the EAGLE adapter feeds the head for tokens the slim tier committed without
    q (lossy/audit). The gap between the two numbers is the acceptance that choice costs, in its
    worst case (every feature slim).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from viasd_adapt.training import corpus
    from viasd_adapt.training.train import chunk, token_stream

    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    data = chunk(token_stream(corpus.heldout_text(), tokenizer), seq_len)
    data = data[torch.linspace(0, data.shape[0] - 1, min(rows, data.shape[0])).round().long()]
    head = load_head(head_path)
    # the head at position t sees features up to t and token t+1; it predicts token t+2, which the
    # target predicts from position t+1
    wanted = target(input_ids=data).logits[:, 1:].argmax(-1)

    def agreement(features: torch.Tensor) -> float:
        predicted = target.lm_head(head(features[:, :-1], input_ids=data[:, 1:])).argmax(-1)
        return float((predicted == wanted).float().mean())

    result = {"rows": int(data.shape[0]), "seq_len": seq_len,
              "top1_agreement_target_features": agreement(target.model(input_ids=data).last_hidden_state)}
    if mask is not None:
        from viasd_adapt.routing.slim import SlimVerifier

        slim = SlimVerifier(target, mask).model
        result["top1_agreement_slim_features"] = agreement(slim.model(input_ids=data).last_hidden_state)
        result["skipped_layers"] = list(mask.skipped)
    return result


__all__ = ["build_head", "evaluate_head", "head_config", "head_loss", "load_head", "train_eagle_head"]
