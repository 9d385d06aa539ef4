"""Loading one model or tokenizer from a folder, a ``.gguf`` file or a hub id, with errors that
name the problem (missing, no config.json, unknown architecture, damaged weights).

Kept below :mod:`viasd_adapt.models.pair` (which loads whole pairs with these) so that the model builders
in this package can load a target without importing the pair layer above them.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.models.gguf import is_gguf_path, load_gguf
from viasd_adapt.models.placement import Placement, check_device, check_dtype, forget_offload_with


def pick_device(name: str = "auto") -> torch.device:
    """The device ``--device`` names (:func:`viasd_adapt.models.placement.check_device`: auto, cpu, cuda, cuda:N)."""
    return check_device(name)


# Files from which transformers can build a tokenizer; a directory with none of them is not one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "spiece.model", "vocab.json",
                   "vocab.txt", "merges.txt")


def _load_errors() -> tuple[type[BaseException], ...]:
    """What loading a damaged checkpoint raises (besides the usual OSError/ValueError): a truncated
    safetensors file, a truncated or foreign pytorch_model.bin."""
    import pickle
    import zipfile

    errors: list[type[BaseException]] = [OSError, ValueError, KeyError, RuntimeError, EOFError, TypeError,
                                         pickle.UnpicklingError, zipfile.BadZipFile]
    try:
        from safetensors import SafetensorError

        errors.append(SafetensorError)
    except ImportError:  # pragma: no cover - safetensors is a dependency
        pass
    return tuple(errors)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def load_model(path: str | Path, device: torch.device, role: str, target: nn.Module | None = None,
               dtype: str | None = None, placement: Placement | None = None) -> nn.Module:
    """An eval-mode causal LM (or encoder-decoder model: T5, BART, Marian, Whisper, ...) from a
    local directory or a ``.gguf`` file (:mod:`viasd_adapt.models.gguf`), with a clear error if it
    is not one (missing, no config.json, unknown architecture, missing or damaged weights).

    A drafter folder that shares its target's embedding (:mod:`viasd_adapt.models.shared_drafter`)
    is assembled with ``target`` and refused for any other target. ``dtype`` (``"bfloat16"``, ...):
    the weights' dtype (default float32 on the CPU, the stored one on CUDA); a GGUF file is cached
    in it. ``placement`` (:class:`~viasd_adapt.models.placement.Placement`: device, dtype, device
    map) replaces ``device`` and ``dtype`` when given. The weights are created on the device in
    their dtype (no float32 copy on the way). A name that is no local path is a hub id, loaded where
    a hub is reachable."""
    from viasd_adapt.models.shared_drafter import assemble_drafter, is_shared_drafter

    where = placement if placement is not None else Placement(torch.device(device), check_dtype(dtype))
    if not is_local_path(path):
        return _load_folder(str(path), where, role)  # a hub id: from_pretrained fetches it
    path = Path(path).expanduser()
    if not path.exists():
        raise ViasdError(f"{role} path {path} does not exist")
    if path.is_dir() and is_shared_drafter(path):
        if target is None:
            raise ConfigError(f"the {role} in {path} shares its target's embedding and loads only with its target "
                              "(viasd_adapt.models.shared_drafter.assemble_drafter(path, target))")
        return assemble_drafter(path, target, where.device)
    if is_gguf_path(path):  # dequantized once, then read from the (checked) cache
        return load_gguf(path, lambda folder: _load_folder(folder, where, role), dtype=gguf_dtype(where))
    return _load_folder(path, where, role)


def gguf_dtype(where: Placement) -> str:
    """The dtype a ``.gguf`` file is cached and loaded in: the one asked, else float32 on the CPU and
    bfloat16 on a GPU (a GGUF file stores quantized blocks, no float dtype of its own to keep)."""
    if where.dtype is not None:
        return where.dtype
    return "bfloat16" if where.device.type == "cuda" else "float32"


def _load_folder(path: Path | str, where: Placement, role: str) -> nn.Module:
    """A model saved with ``save_pretrained`` in ``path``, or a hub id (module docstring for the
    errors), created on ``where``'s device (or spread by its device map) in its dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    if isinstance(path, Path) and not (path / "config.json").is_file():
        raise ViasdError(f"{role} path {path} is not a model directory (no config.json)")
    kwargs = where.load_kwargs()
    try:
        auto = AutoModelForCausalLM
        config = AutoConfig.from_pretrained(str(path))
        if getattr(config, "is_encoder_decoder", False):
            auto = AutoModelForSpeechSeq2Seq if config.model_type == "whisper" else AutoModelForSeq2SeqLM
        model = auto.from_pretrained(str(path), dtype=where.torch_dtype(), **kwargs)
    except _load_errors() as err:
        detail = _first_line(err)
        if "deserializ" in detail or "incomplete metadata" in detail or isinstance(err, (EOFError,)):
            detail = f"a weights file is damaged or truncated ({detail})"
        if not isinstance(path, Path):
            detail += " (no such local path, so it was read as a hub id)"
        raise ViasdError(f"cannot load the {role} model from {path}: {detail}") from None
    forget_offload_with(model, kwargs.get("offload_folder"))
    if "device_map" not in kwargs:
        model = model.to(where.device)
    return model.eval()


def is_local_path(path: str | Path) -> bool:
    """Whether ``path`` names something on this machine rather than a hub id."""
    text = str(path)
    return isinstance(path, Path) or text.startswith(("/", ".", "~")) or Path(text).expanduser().exists()


def load_tokenizer(path: str | Path, dtype: str | None = None):
    """The tokenizer saved in a model directory or a ``.gguf`` file (or a hub id where a hub is reachable);
    ``dtype``: which cache entry of a ``.gguf`` file to read it from (the one its model loads from)."""
    if is_local_path(path):
        local = Path(path).expanduser()
        if not local.exists():
            raise ViasdError(f"tokenizer path {local} does not exist")
        if is_gguf_path(local):
            tokenizer = load_gguf(local, _tokenizer_from, dtype=dtype or "float32")
            tokenizer.name_or_path = str(local)  # errors about it (no chat template) name the .gguf, not the cache
            return tokenizer
        if not local.is_dir():
            raise ViasdError(f"tokenizer path {local} is not a directory")
        if not any((local / name).is_file() for name in TOKENIZER_FILES):
            raise ViasdError(f"{local} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                             "pass the directory the model was saved to with its tokenizer")
        return _tokenizer_from(local)
    return _tokenizer_from(path)


def _tokenizer_from(path: str | Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except _load_errors() as err:
        raise ViasdError(f"cannot load a tokenizer from {path}: {_first_line(err)}") from None


__all__ = ["TOKENIZER_FILES", "gguf_dtype", "is_local_path", "load_model", "load_tokenizer", "pick_device"]
