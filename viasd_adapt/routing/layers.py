"""Generic discovery of the decoder-layer stack of a Hugging Face causal LM.

Families differ only in where the ``nn.ModuleList`` of blocks lives. We look along a short list of
known attribute paths rather than guessing from module names, so an unknown architecture fails
loudly with the list of what was tried instead of routing the wrong modules.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from viasd_adapt.errors import UnsupportedModelError

# (path of the module that owns the stack, attribute holding the nn.ModuleList)
LAYER_PATHS: tuple[tuple[str, str], ...] = (
    ("model", "layers"),  # Llama, Mistral, Qwen2/Qwen3, Gemma/Gemma2, Phi-3, ...
    ("transformer", "h"),  # GPT-2, GPT-J, Bloom, Falcon
    ("gpt_neox", "layers"),  # GPT-NeoX, Pythia
    ("model.decoder", "layers"),  # OPT
)


@dataclass(frozen=True)
class DecoderStack:
    """Where a model keeps its decoder layers: ``owner_path`` + ``attribute``, and the list."""

    owner_path: str
    attribute: str
    layers: nn.ModuleList

    @property
    def num_layers(self) -> int:
        return len(self.layers)


def _get_submodule(model: nn.Module, dotted: str) -> nn.Module | None:
    module: nn.Module | None = model
    for part in dotted.split("."):
        module = getattr(module, part, None)
        if not isinstance(module, nn.Module):
            return None
    return module


def find_decoder_stack(model: nn.Module) -> DecoderStack:
    """Returns the decoder stack of ``model`` or raises :class:`UnsupportedModelError`."""
    for owner_path, attribute in LAYER_PATHS:
        owner = _get_submodule(model, owner_path)
        layers = getattr(owner, attribute, None) if owner is not None else None
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return DecoderStack(owner_path, attribute, layers)
    tried = ", ".join(f"{owner}.{attr}" for owner, attr in LAYER_PATHS)
    raise UnsupportedModelError(
        f"cannot route {type(model).__name__}: no decoder-layer nn.ModuleList found at any of {tried}. "
        "Supported families: Llama, Mistral, Qwen2/Qwen3, Gemma2, GPT-2, GPT-NeoX, OPT, Bloom, Falcon."
    )
