"""The runners of the baseline frameworks for encoder-decoder pairs (``ar`` and ``engine``).

A request's ``prompt_ids`` are the source the encoder reads (or ``input_features`` for a target
that reads features, Whisper); the decoder starts from its ``decoder_start_token_id``.
"""

from __future__ import annotations

import torch
from torch import nn

from viasd_adapt.checks import (
    check_decoder_cache_layers,
    check_fits_encoder,
    check_prompt_ids,
)
from viasd_adapt.routing.seq2seq import default_decoder_prompt
from viasd_adapt.engine.seq2seq import seq2seq_generate
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import is_encoder_decoder
from viasd_adapt.routing.slim import SlimVerifier


def load_input_features(path) -> torch.Tensor:
    """Encoder input features (Whisper's log-mel) from ``.npy`` (NumPy) or ``.pt``/``.pth`` (a torch
    tensor), as float32 ``(1, mel, frames)``."""
    from pathlib import Path

    from viasd_adapt.errors import ViasdError

    path = Path(path).expanduser()
    if not path.is_file():
        raise ViasdError(f"input features file not found: {path}")
    if path.suffix not in (".npy", ".pt", ".pth"):
        raise ConfigError(f"input features must be a .npy or .pt file, got {path.name}")
    try:
        if path.suffix == ".npy":
            import numpy as np

            features = torch.from_numpy(np.load(path, allow_pickle=False))
        else:
            features = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as err:
        raise ViasdError(f"cannot read input features from {path}: {str(err).splitlines()[0]}") from None
    if not isinstance(features, torch.Tensor) or features.dim() not in (2, 3) or not features.is_floating_point():
        raise ConfigError(f"input features in {path} must be a float array of shape (mel, frames) or (1, mel, frames)")
    features = features.float()
    return features.unsqueeze(0) if features.dim() == 2 else features


def request_source(pair, request) -> torch.Tensor:
    """The encoder input of a :class:`~viasd_adapt.frameworks.requests.RunRequest` for an encoder-decoder pair:
    ``prompt_ids`` as source ids, or ``input_features`` for a target that reads features."""
    from viasd_adapt.checks import check_encoder_source, check_token_ids_in_vocabulary

    target = pair.target
    features = getattr(request, "input_features", None)
    if getattr(target, "main_input_name", "input_ids") == "input_ids":
        if features is not None:
            raise ConfigError(f"{type(target).__name__} reads source token ids; input_features are for targets like Whisper")
        ids = check_prompt_ids(request.prompt_ids)
        check_token_ids_in_vocabulary(ids, target, what="source")
        source = torch.tensor([ids], dtype=torch.long, device=pair.device)
        for model in (target, pair.draft):
            if model is not None and is_encoder_decoder(model):
                check_fits_encoder(model, source)
        return source
    features = check_encoder_source(features, what=f"input features of {type(target).__name__}")
    if features.dim() == 2:
        features = features.unsqueeze(0)
    dtype = next(target.parameters()).dtype
    return features.to(device=pair.device, dtype=dtype)


def generated_tokens(target: nn.Module, sequences: torch.Tensor) -> list[int]:
    """The new tokens of row 0 of a ``generate`` output: after the decoder start token (Whisper's
    ``generate`` already strips its decoder prompt)."""
    skip = 0 if getattr(target.config, "model_type", "") == "whisper" else len(default_decoder_prompt(target))
    return sequences[0, skip:].tolist()


def run_ar(pair, request):
    """The ``ar`` row for an encoder-decoder pair: ``target.generate`` on the source, no assistant."""
    from viasd_adapt.core.ledger import plain_decoding_metrics
    from viasd_adapt.frameworks.baselines import generation_config_for
    from viasd_adapt.frameworks.requests import RunOutput

    check_decoder_cache_layers(pair.target)
    source = request_source(pair, request)
    torch.manual_seed(request.seed)
    with torch.no_grad():
        out = pair.target.generate(**{pair.target.main_input_name: source}, generation_config=generation_config_for(pair, request))
    tokens = generated_tokens(pair.target, out)
    return RunOutput(tokens, plain_decoding_metrics(tokens))


def run_engine(pair, request):
    """The ``engine`` row for an encoder-decoder pair: :func:`seq2seq_generate` (mode none: untiered SD)."""
    from viasd_adapt.frameworks.requests import RunOutput

    settings = request.settings
    slim = SlimVerifier(pair.target, pair.routing) if settings.mode.uses_slim else None
    generator = torch.Generator(device="cpu").manual_seed(request.seed)
    eos = pair.eos_token_ids if request.stop_at_eos else ()
    out = seq2seq_generate(pair.target, pair.draft, request_source(pair, request), request.max_new_tokens, settings,
                           request.sampling, slim=slim, eos_token_ids=eos, generator=generator, framework="engine")
    return RunOutput(out.tokens, out.metrics)
