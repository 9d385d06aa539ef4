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


def refuse_compile_wrapper(model: nn.Module) -> None:
    """Raises :class:`UnsupportedModelError` for a ``torch.compile(model)`` wrapper (``OptimizedModule``).

    It forwards attribute lookups to the model, so a decoder stack would be found, but routed views
    cannot be built through it and its compiled graph is specialised to the full layer list.
    Compiling the layers in place works: every view shares those layer objects.
    """
    if isinstance(getattr(model, "_orig_mod", None), nn.Module):
        raise UnsupportedModelError(
            f"got a torch.compile wrapper ({type(model).__name__}) of {type(model._orig_mod).__name__}: pass the model "
            "itself (compiled._orig_mod). To compile, compile the decoder layers in place (for layer in "
            "model.model.layers: layer.compile()): every view shares those layer objects, so the slim and full "
            "verifiers both run them compiled."
        )


def find_decoder_stack(model: nn.Module) -> DecoderStack:
    """Returns the decoder stack of ``model`` or raises :class:`UnsupportedModelError` (also for a
    ``torch.compile`` wrapper, :func:`refuse_compile_wrapper`)."""
    refuse_compile_wrapper(model)
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
