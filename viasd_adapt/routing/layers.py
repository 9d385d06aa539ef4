"""Generic discovery of the decoder-layer stack of a Hugging Face model.

Families differ only in where the ``nn.ModuleList`` of blocks lives. We look along a short list of
known attribute paths rather than guessing from module names, so an unknown architecture fails
loudly with the list of what was tried instead of routing the wrong modules.

Encoder-decoder models (T5, BART, mBART, Marian, Whisper) are routed in their **decoder** only: the
encoder runs once per prompt and its output is shared by every pass, so skipping encoder layers
would not make a verifier pass cheaper. Their stacks are looked up by ``config.model_type``, not by
probing paths: an encoder-decoder model has two stacks, and probing could find the encoder's. The
``layout`` says what a block returns, so a bypassed block can return the same thing
(:func:`viasd_adapt.routing.view.pass_through_layer`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from viasd_adapt.errors import UnsupportedModelError
from viasd_adapt.model_kind import is_encoder_decoder  # noqa: F401 - also importable from here, as before

#: Blocks that take and return the residual-stream tensor (transformers >= 5 decoder layers).
PLAIN = "plain"
#: T5 blocks: return ``(hidden, self_attention_position_bias, cross_attention_position_bias)``; the
#: first block computes the relative position bias that every later block reuses.
T5_LAYOUT = "t5"

# (path of the module that owns the stack, attribute holding the nn.ModuleList), decoder-only models
LAYER_PATHS: tuple[tuple[str, str], ...] = (
    ("model", "layers"),  # Llama, Mistral, Qwen2/Qwen3, Gemma/Gemma2, Phi-3, ...
    ("transformer", "h"),  # GPT-2, GPT-J, Bloom, Falcon
    ("gpt_neox", "layers"),  # GPT-NeoX, Pythia
    ("model.decoder", "layers"),  # OPT
)

# config.model_type -> (owner path, attribute, layout) of the DECODER stack, encoder-decoder models
ENCODER_DECODER_PATHS: dict[str, tuple[str, str, str]] = {
    "t5": ("decoder", "block", T5_LAYOUT),
    "mt5": ("decoder", "block", T5_LAYOUT),
    "bart": ("model.decoder", "layers", PLAIN),
    "mbart": ("model.decoder", "layers", PLAIN),
    "marian": ("model.decoder", "layers", PLAIN),
    "whisper": ("model.decoder", "layers", PLAIN),
}


@dataclass(frozen=True)
class DecoderStack:
    """Where a model keeps its decoder layers: ``owner_path`` + ``attribute``, and the list.

    ``layout`` is what one block returns (:data:`PLAIN` or :data:`T5_LAYOUT`);
    ``encoder_decoder`` is True when the stack is the decoder of an encoder-decoder model.
    """

    owner_path: str
    attribute: str
    layers: nn.ModuleList
    layout: str = PLAIN
    encoder_decoder: bool = False

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


def _layer_list(model: nn.Module, owner_path: str, attribute: str) -> nn.ModuleList | None:
    owner = _get_submodule(model, owner_path)
    layers = getattr(owner, attribute, None) if owner is not None else None
    return layers if isinstance(layers, nn.ModuleList) and len(layers) > 0 else None


def _find_encoder_decoder_stack(model: nn.Module) -> DecoderStack:
    model_type = getattr(model.config, "model_type", None)
    supported = ", ".join(f"{name} ({owner}.{attr})" for name, (owner, attr, _) in ENCODER_DECODER_PATHS.items())
    entry = ENCODER_DECODER_PATHS.get(model_type)
    if entry is None:
        raise UnsupportedModelError(
            f"cannot route {type(model).__name__}: encoder-decoder model type {model_type!r} is not supported; "
            f"the decoder stack is looked up by model type, known: {supported}"
        )
    owner_path, attribute, layout = entry
    layers = _layer_list(model, owner_path, attribute)
    if layers is None:
        raise UnsupportedModelError(
            f"cannot route {type(model).__name__} ({model_type}): no decoder-layer nn.ModuleList at {owner_path}.{attribute} "
            "(only the ...ForConditionalGeneration / ...MTModel heads are supported, not encoder-only or base models)"
        )
    return DecoderStack(owner_path, attribute, layers, layout, encoder_decoder=True)


def find_decoder_stack(model: nn.Module) -> DecoderStack:
    """Returns the decoder stack of ``model`` or raises :class:`UnsupportedModelError` (also for a
    ``torch.compile`` wrapper, :func:`refuse_compile_wrapper`)."""
    refuse_compile_wrapper(model)
    if is_encoder_decoder(model):
        return _find_encoder_decoder_stack(model)
    for owner_path, attribute in LAYER_PATHS:
        layers = _layer_list(model, owner_path, attribute)
        if layers is not None:
            return DecoderStack(owner_path, attribute, layers)
    tried = ", ".join(f"{owner}.{attr}" for owner, attr in LAYER_PATHS)
    raise UnsupportedModelError(
        f"cannot route {type(model).__name__}: no decoder-layer nn.ModuleList found at any of {tried}. "
        "Supported families: Llama, Mistral, Qwen2/Qwen3, Gemma2, GPT-2, GPT-NeoX, OPT, Bloom, Falcon; encoder-decoder: "
        + ", ".join(ENCODER_DECODER_PATHS) + "."
    )
