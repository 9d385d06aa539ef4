"""A drafter folder that holds only the drafter's own weights, assembled with its target at load time.

Why: a drafter for SmolLM2-135M shares the target's width, so it can reuse the target's token
embedding (tied with its LM head: 49152 x 576, 28M parameters, 57 MB in fp16) instead of
carrying a copy. The folder keeps the decoder layers and the final norm (one layer: 3.5M
parameters, 7 MB in fp16) and a marker file, :data:`MARKER`, that says how to complete it:

* ``model.embed_tokens`` is the target's own embedding module (shared, not copied);
* the LM head scores a *drafting vocabulary*, the ``draft_vocab_size`` tokens the target most
  often emits (EAGLE-3 / FR-Spec): on these CPUs the full 49152-row head costs about 5x a decoder
  layer of SmolLM2 (measured: one layer 2.8 ms, full head 15 ms, an 8192-token head 4 ms). Its
  logits are scattered into a full-width row, every other token at the dtype's lowest finite
  value (probability exactly 0 after softmax, never NaN in a log), so the result is an ordinary
  ``LlamaForCausalLM`` that HF assisted generation takes as ``assistant_model`` and every
  framework here takes as a drafter.

The marker records the target it was distilled from (its vocabulary size and weight sketch,
:func:`viasd_adapt.routing.mask.model_fingerprint`); :func:`assemble_drafter` refuses any other
target by name, before anything is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from viasd_adapt.config.cache_records import SharedDrafterMarker
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError

MARKER = "viasd_drafter.json"
FORMAT = SharedDrafterMarker.FORMAT
WEIGHTS = "model.safetensors"
BIAS_KEY = "viasd.draft_vocab_bias"  # in WEIGHTS: the drafting vocabulary's logit bias




def is_shared_drafter(path: str | Path) -> bool:
    """Whether ``path`` is a drafter folder that needs its target to load (it holds :data:`MARKER`)."""
    return (Path(path) / MARKER).is_file()


class DraftVocabHead(nn.Module):
    """An LM head that scores only ``token_ids`` and returns full-vocabulary logits.

    ``weight`` is the full (tied) output matrix; the rows of the drafting vocabulary are copied
    once into a contiguous buffer so each step multiplies by that small matrix only.
    """

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.vocab_size = int(weight.shape[0])
        self.register_buffer("token_ids", token_ids.to(torch.long).clone(), persistent=False)
        self.register_buffer("rows", weight.detach()[self.token_ids].clone(), persistent=False)
        # the drafter's own per-token prior (trained; starts at the log frequency of each token)
        bias = torch.zeros(self.token_ids.numel()) if bias is None else bias.detach().clone()
        self.register_buffer("bias", bias.to(weight.dtype), persistent=False)

    def draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the drafting vocabulary only, ``(..., draft_vocab_size)``."""
        return hidden @ self.rows.to(hidden.dtype).T + self.bias.to(hidden.dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        small = self.draft_logits(hidden)
        full = small.new_full((*small.shape[:-1], self.vocab_size), torch.finfo(small.dtype).min)
        return full.index_copy_(-1, self.token_ids, small)


def drafter_config(target_config: Any, num_layers: int) -> Any:
    """The drafter's Llama config: the target's shapes with ``num_layers`` decoder layers."""
    from transformers import LlamaConfig

    if getattr(target_config, "model_type", None) != "llama":
        raise ConfigError(f"shared-embedding drafters are built for Llama targets; got {target_config.model_type!r}")
    fields = target_config.to_dict()
    for key in ("architectures", "_name_or_path", "transformers_version", "dtype", "torch_dtype", "quantization_config"):
        fields.pop(key, None)
    fields.update(num_hidden_layers=num_layers, tie_word_embeddings=True, architectures=["LlamaForCausalLM"])
    return LlamaConfig(**fields)


def own_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The drafter's own weights: everything but the shared embedding and LM head."""
    return {name: tensor for name, tensor in model.state_dict().items()
            if not name.startswith(("model.embed_tokens.", "lm_head."))}


def _stub_rows(config: Any) -> int:
    """Rows for the placeholder embedding/head a drafter is built with (the target's replace them):
    not a second 49152-row table, but enough to hold the padding id."""
    pad = getattr(config, "pad_token_id", None)
    return (pad if isinstance(pad, int) and pad >= 0 else 0) + 1


def new_drafter(target_config: Any, num_layers: int) -> nn.Module:
    """A fresh drafter without embedding or head tables of its own (they are the target's)."""
    from transformers import LlamaForCausalLM

    config = drafter_config(target_config, num_layers)
    vocab, config.vocab_size = config.vocab_size, _stub_rows(config)
    model = LlamaForCausalLM(config)
    config.vocab_size = vocab
    return model


def save_drafter(model: nn.Module, token_ids: torch.Tensor, target: nn.Module, directory: Path, record: dict,
                 bias: torch.Tensor, dtype: torch.dtype = torch.float16) -> None:
    """Writes ``config.json``, the own weights and :data:`MARKER` into ``directory`` (a fresh
    folder: callers go through :func:`viasd_adapt.io.write_directory`)."""
    from safetensors.torch import save_file

    from viasd_adapt.routing.mask import model_fingerprint

    drafter_config(target.config, model.config.num_hidden_layers).save_pretrained(str(directory))
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in own_state(model).items()}
    tensors[BIAS_KEY] = bias.detach().to(dtype).contiguous()
    save_file(tensors, str(directory / WEIGHTS), metadata={"format": "pt"})  # 0600: write_directory follows the umask
    SharedDrafterMarker(vocab_size=int(target.config.vocab_size), draft_vocab=[int(t) for t in token_ids.tolist()],
                        target_fingerprint=model_fingerprint(target), **record).save(directory / MARKER)


def read_marker(path: str | Path) -> SharedDrafterMarker:
    """The marker of a shared-embedding drafter folder (a typed artifact: format and fields checked,
    errors naming the file and the field)."""
    return SharedDrafterMarker.load(Path(path) / MARKER)


def check_drafter_target(path: str | Path, target: nn.Module, marker: SharedDrafterMarker | None = None) -> None:
    """Refuses ``target`` unless it is the model the drafter at ``path`` was distilled from:
    same vocabulary size, same weight sketch (within dtype rounding)."""
    from viasd_adapt.routing.mask import model_mismatches

    marker = marker if marker is not None else read_marker(path)
    vocab = getattr(target.config, "vocab_size", None)
    if vocab != marker.vocab_size:
        raise ModelMismatchError(
            f"the drafter in {path} was built for a target with a {marker.vocab_size}-token vocabulary; this "
            f"target has {vocab}: it belongs to another target (rebuild it with `viasd models build`)")
    problems = model_mismatches(marker.target_fingerprint, target)
    if problems:
        raise ModelMismatchError(
            f"the drafter in {path} was distilled from another target (fingerprint): {'; '.join(problems)}")


def assemble_drafter(path: str | Path, target: nn.Module, device: torch.device | str | None = None) -> nn.Module:
    """The drafter at ``path`` as an ordinary eval-mode ``LlamaForCausalLM``, sharing ``target``'s
    embedding, with a :class:`DraftVocabHead`. Refuses a target it was not built for."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, LlamaForCausalLM

    path = Path(path)
    marker = read_marker(path)
    check_drafter_target(path, target, marker)
    embedding = target.get_input_embeddings()
    dtype = embedding.weight.dtype
    try:
        config = AutoConfig.from_pretrained(str(path))
        state = load_file(str(path / WEIGHTS))
    except (OSError, ValueError, RuntimeError) as err:
        raise ViasdError(f"cannot load the drafter from {path}: {err}") from None
    config.tie_word_embeddings = False  # the head is ours, not a tied copy of the embedding
    config_vocab, config.vocab_size = config.vocab_size, _stub_rows(config)
    model = LlamaForCausalLM(config)
    config.vocab_size = config_vocab
    model.model.embed_tokens = embedding
    bias = state.pop(BIAS_KEY, None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if not name.startswith(("model.embed_tokens.", "lm_head."))]
    if missing or unexpected:
        raise ViasdError(f"the drafter weights in {path} do not fit its config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    token_ids = torch.tensor(marker.draft_vocab, dtype=torch.long)
    if token_ids.numel() == 0 or int(token_ids.min()) < 0 or int(token_ids.max()) >= config_vocab:
        raise ViasdError(f"{path / MARKER}: draft_vocab holds ids outside the {config_vocab}-token vocabulary")
    if bias is not None and bias.shape != token_ids.shape:
        raise ViasdError(f"{path / WEIGHTS}: {BIAS_KEY} has shape {tuple(bias.shape)}, the drafting vocabulary {token_ids.numel()} tokens")
    model.lm_head = DraftVocabHead(embedding.weight, token_ids, None if bias is None else bias.float())
    model.to(dtype)
    model.model.embed_tokens = embedding  # .to() above must not have re-created the shared module
    if device is not None:
        model.to(device)
    return model.eval()


__all__ = ["FORMAT", "MARKER", "DraftVocabHead", "assemble_drafter", "check_drafter_target", "drafter_config",
           "is_shared_drafter", "new_drafter", "own_state", "read_marker", "save_drafter"]
