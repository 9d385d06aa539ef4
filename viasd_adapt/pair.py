"""A loaded model pair, and the request/response types every framework runner speaks.

``viasd generate``, ``viasd bench`` and ``viasd tune`` all load a pair once (target, drafter,
tokenizer, routing mask, device) and hand it with a :class:`RunRequest` to a framework's runner
(:mod:`viasd_adapt.frameworks`). Models load through ``AutoModelForCausalLM.from_pretrained`` from a
local directory (or a hub id where a hub is reachable), so any HF decoder-only pair works, not
only the pairs this project trains. On CPU weights are upcast to float32 (fp16 matmuls are slow
and inexact there); on CUDA they keep their stored dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from viasd_adapt.checks import check_drafter_reads_source, check_same_tokenizer, check_same_vocabulary
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.io import relative_name
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.models.gguf import gguf_model_folder, is_gguf_path
from viasd_adapt.prompt_lookup import DRAFT_NAME as PROMPT_LOOKUP, PromptLookupSpec
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, skip_count
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import TierSettings

FALLBACK_MASK_LABEL = "FALLBACK fixed mask (every other layer from layer 1; not a DIMR mask)"


@dataclass
class MaskInfo:
    """The routing mask in use and where it came from (shown in every report)."""

    mask: RoutingMask
    source: str  # a path, or FALLBACK_MASK_LABEL
    is_fallback: bool
    artifact: MaskArtifact | None = None

    def to_dict(self) -> dict:
        return {
            "bits": self.mask.bits(),
            "skipped_layers": list(self.mask.skipped),
            "first_skipped": self.mask.first_skipped,
            # a report travels: the mask file by its name relative to the working folder, not a machine path
            "source": self.source if self.is_fallback else relative_name(self.source, Path.cwd()),
            "is_fallback": self.is_fallback,
            "delta": self.artifact.delta if self.artifact is not None else None,
        }


@dataclass
class LoadedPair:
    """Models, tokenizer and mask shared by every run of one command."""

    target: nn.Module
    draft: nn.Module | None
    tokenizer: Any
    mask: MaskInfo | None
    device: torch.device
    target_path: str = ""
    draft_path: str = ""
    eagle_head: str | None = None
    # The drafter when it is prompt lookup (``draft`` is then None): token-only, a point mass to the tier.
    lookup: PromptLookupSpec | None = None
    # Objects a framework loads once and reuses across runs (e.g. EAGLE's EaModel).
    loaded: dict = field(default_factory=dict)

    @property
    def routing(self) -> RoutingMask | None:
        return self.mask.mask if self.mask is not None else None

    @property
    def eos_token_ids(self) -> list[int]:
        eos = getattr(getattr(self.target, "generation_config", None), "eos_token_id", None)
        if eos is None:
            eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            return []
        return [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]


@dataclass(frozen=True)
class RunRequest:
    """One generation by one framework.

    ``mode`` is ``"plain"`` (the framework without viasd-adapt at all, where such a path exists)
    or a tier mode; ``settings.mode`` is that mode for tier modes. ``stop_at_eos=False`` generates
    exactly ``max_new_tokens`` (benchmarks: every row does the same amount of work).
    """

    mode: str
    prompt_ids: list[int]
    max_new_tokens: int
    settings: TierSettings
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0
    stop_at_eos: bool = True
    # Encoder-decoder targets: ``prompt_ids`` are the SOURCE ids (the decoder starts from its
    # decoder_start_token_id); a target that reads features (Whisper) takes them here instead,
    # ``(1, mel, frames)`` (:func:`viasd_adapt.seq2seq.load_input_features`).
    input_features: Any = None


@dataclass
class RunOutput:
    """Generated ids (prompt excluded), the metrics when the run kept any, and notes for people."""

    tokens: list[int]
    metrics: TierMetrics | None = None
    notes: list[str] = field(default_factory=list)
    extra_bytes: int = 0  # buffers outside HF cache objects (EAGLE's pre-allocated KV cache)

    @property
    def tiers(self) -> list[int] | None:
        return None if self.metrics is None else self.metrics.token_tiers[: len(self.tokens)]


# ----------------------------------------------------------------------------- loading


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"unknown device {name!r}: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but CUDA is not available")
    return device


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


def load_model(path: str | Path, device: torch.device, role: str, target: nn.Module | None = None) -> nn.Module:
    """An eval-mode causal LM (or encoder-decoder model: T5, BART, Marian, Whisper, ...) from a
    local directory or a ``.gguf`` file (:mod:`viasd_adapt.models.gguf`), with a clear error if it
    is not one (missing, no config.json, unknown architecture, missing or damaged weights).

    A drafter folder that shares its target's embedding (:mod:`viasd_adapt.models.shared_drafter`)
    is assembled with ``target`` and refused for any other target."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    from viasd_adapt.models.shared_drafter import assemble_drafter, is_shared_drafter

    path = Path(path).expanduser()
    if not path.exists():
        raise ViasdError(f"{role} path {path} does not exist")
    if path.is_dir() and is_shared_drafter(path):
        if target is None:
            raise ConfigError(f"the {role} in {path} shares its target's embedding and loads only with its target "
                              "(viasd_adapt.models.shared_drafter.assemble_drafter(path, target))")
        return assemble_drafter(path, target, device)
    if is_gguf_path(path):  # dequantized once, then read from the cache
        path = gguf_model_folder(path)
    if not (path / "config.json").is_file():
        raise ViasdError(f"{role} path {path} is not a model directory (no config.json)")
    try:
        dtype = torch.float32 if device.type == "cpu" else "auto"
        auto = AutoModelForCausalLM
        config = AutoConfig.from_pretrained(str(path))
        if getattr(config, "is_encoder_decoder", False):
            auto = AutoModelForSpeechSeq2Seq if config.model_type == "whisper" else AutoModelForSeq2SeqLM
        model = auto.from_pretrained(str(path), dtype=dtype)
    except _load_errors() as err:
        detail = _first_line(err)
        if "deserializ" in detail or "incomplete metadata" in detail or isinstance(err, (EOFError,)):
            detail = f"a weights file is damaged or truncated ({detail})"
        raise ViasdError(f"cannot load the {role} model from {path}: {detail}") from None
    return model.to(device).eval()


def _is_local(path: str | Path) -> bool:
    text = str(path)
    return isinstance(path, Path) or text.startswith(("/", ".", "~")) or Path(text).expanduser().exists()


def load_tokenizer(path: str | Path):
    """The tokenizer saved in a model directory or a ``.gguf`` file (or a hub id where a hub is reachable)."""
    from transformers import AutoTokenizer

    if _is_local(path):
        local = Path(path).expanduser()
        if not local.exists():
            raise ViasdError(f"tokenizer path {local} does not exist")
        if is_gguf_path(local):
            local = gguf_model_folder(local)
        if not local.is_dir():
            raise ViasdError(f"tokenizer path {local} is not a directory")
        if not any((local / name).is_file() for name in TOKENIZER_FILES):
            raise ViasdError(f"{local} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                             "pass the directory the model was saved to with its tokenizer")
        path = local
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except _load_errors() as err:
        raise ViasdError(f"cannot load a tokenizer from {path}: {_first_line(err)}") from None


def _check_draft_tokenizer(tokenizer, draft_path: str | Path) -> None:
    """A drafter saved with its own tokenizer must map every string to the target's ids: equal
    vocabulary *sizes* (checked above) do not make two tokenizers the same, and a drafter whose
    ids mean other strings would draft nonsense the tiers then compare token by token. A drafter
    folder without a tokenizer is taken to use the target's."""
    folder = Path(draft_path).expanduser() if _is_local(draft_path) else None
    if folder is None or not folder.is_dir() or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return
    check_same_tokenizer(tokenizer, load_tokenizer(folder), role=f"drafter ({folder})")


def fallback_mask(num_layers: int, ratio: float) -> RoutingMask:
    """The documented fixed mask used when no DIMR mask exists: skip layers 1, 3, 5, ... until
    ``round(ratio * L)`` are skipped (wrapping to even layers > 0 if needed). Layer 0 is always kept:
    on the pairs measured so far every mask that skipped it collapsed."""
    k = skip_count(num_layers, ratio)
    order = [i for i in range(1, num_layers, 2)] + [i for i in range(2, num_layers, 2)]
    return RoutingMask.from_skipped(num_layers, sorted(order[:k]))


def resolve_mask_info(target: nn.Module, mask_path: str | Path | None, ratio: float,
                      search_dirs: list[Path] = ()) -> MaskInfo:
    """The mask at ``mask_path`` (checked against the target), else ``mask.json`` in one of
    ``search_dirs``, else the labelled fallback mask."""
    candidates = [Path(mask_path).expanduser()] if mask_path else [Path(d) / "mask.json" for d in search_dirs]
    for path in candidates:
        if mask_path or path.is_file():
            artifact = MaskArtifact.load(path, model=target)
            return MaskInfo(artifact.mask, str(path), False, artifact)
    layers = find_decoder_stack(target).num_layers
    return MaskInfo(fallback_mask(layers, ratio), FALLBACK_MASK_LABEL, True)


def load_pair(
    target_path: str | Path,
    draft_path: str | Path | None,
    mask_path: str | Path | None = None,
    need_mask: bool = True,
    device: str = "auto",
    eagle_head: str | Path | None = None,
    ratio: float = TierSettings().ratio,
) -> LoadedPair:
    """Loads the pair and the mask; checks that drafter and target share a vocabulary.

    ``draft_path`` is a model folder or ``.gguf`` file, ``"prompt-lookup"`` (no model: the drafter
    copies n-grams of the text, :mod:`viasd_adapt.prompt_lookup`), or None (no drafter)."""
    dev = pick_device(device)
    target = load_model(target_path, dev, "target")
    lookup = PromptLookupSpec() if str(draft_path) == PROMPT_LOOKUP else None
    draft = load_model(draft_path, dev, "draft", target=target) if draft_path is not None and lookup is None else None
    tokenizer = load_tokenizer(target_path)
    if draft is not None:
        check_same_vocabulary(target, draft)
        check_drafter_reads_source(target, draft)
        _check_draft_tokenizer(tokenizer, draft_path)
    search = [Path(target_path).expanduser().parent]
    mask = resolve_mask_info(target, mask_path, ratio, search) if need_mask else None
    return LoadedPair(target, draft, tokenizer, mask, dev, str(target_path), str(draft_path or ""),
                      str(eagle_head) if eagle_head else None, lookup=lookup)


__all__ = [
    "FALLBACK_MASK_LABEL",
    "LoadedPair",
    "MaskInfo",
    "RunOutput",
    "RunRequest",
    "fallback_mask",
    "load_model",
    "load_pair",
    "load_tokenizer",
    "pick_device",
    "resolve_mask_info",
]
