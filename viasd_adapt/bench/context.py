"""Everything a row runner needs, loaded once per bench: models, tokenizer, mask, settings.

Models are loaded from local paths with ``AutoModelForCausalLM`` / ``AutoTokenizer``, so the bench
runs on any HF decoder-only pair, not only the pairs this project trains. On CPU the weights are
upcast to float32 (fp16 matmuls are slow and inexact there); on CUDA they keep their stored dtype.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.routing import RoutingMask, SlimVerifier
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.mask import MaskArtifact, skip_count
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import TierSettings

FALLBACK_MASK_LABEL = "FALLBACK fixed mask (every other layer from layer 1; not a DIMR mask)"


@dataclass
class MaskInfo:
    """The routing mask in use and where it came from (shown in every report)."""

    mask: RoutingMask
    source: str  # a path, or FALLBACK_MASK_LABEL
    is_fallback: bool

    def to_dict(self) -> dict:
        return {
            "bits": self.mask.bits(),
            "skipped_layers": list(self.mask.skipped),
            "source": self.source,
            "is_fallback": self.is_fallback,
        }


@dataclass
class BenchContext:
    """Loaded models and the settings shared by every row."""

    target: nn.Module
    draft: nn.Module
    tokenizer: object
    settings: TierSettings
    sampling: SamplingConfig
    mask: MaskInfo | None
    device: torch.device
    target_path: str = ""
    draft_path: str = ""
    eagle_head: str | None = None
    eos_token_ids: tuple[int, ...] = ()
    slim: SlimVerifier | None = field(default=None, init=False)
    # Objects a framework loads once and reuses across its rows (e.g. EAGLE's EaModel).
    loaded: dict = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.rebuild_slim()

    def rebuild_slim(self) -> None:
        """A fresh slim view of the target. The bench calls it after registering its forward
        hooks so that the view it hands to row runners carries them (views copy the target's hook
        registries when they are built), which is how the view's KV cache gets measured."""
        self.slim = SlimVerifier(self.target, self.mask.mask) if self.mask is not None else None


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


def load_model(path: str | Path, device: torch.device, role: str) -> nn.Module:
    """An eval-mode causal LM from a local directory, with a clear error if it is not one."""
    from transformers import AutoModelForCausalLM

    path = Path(path).expanduser()
    if not (path / "config.json").is_file():
        raise ViasdError(f"{role} path {path} is not a model directory (no config.json)")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path))
    except (OSError, ValueError, KeyError) as err:
        raise ViasdError(f"cannot load the {role} model from {path}: {err}") from None
    if device.type == "cpu":
        model = model.float()
    return model.to(device).eval()


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(Path(path).expanduser()))
    except (OSError, ValueError, KeyError) as err:
        raise ViasdError(f"cannot load a tokenizer from {path}: {err}") from None


def fallback_mask(num_layers: int, ratio: float) -> RoutingMask:
    """The documented fixed mask used when no DIMR mask exists: skip layers 1, 3, 5, ... until
    ``round(ratio * L)`` are skipped (wrapping to even layers > 0 if needed). Layer 0 is always kept:
    on the pairs measured so far every mask that skipped it collapsed."""
    k = skip_count(num_layers, ratio)
    order = [i for i in range(1, num_layers, 2)] + [i for i in range(2, num_layers, 2)]
    return RoutingMask.from_skipped(num_layers, sorted(order[:k]))


def resolve_mask(target: nn.Module, mask_path: str | Path | None, ratio: float, search_dirs: list[Path] = ()) -> MaskInfo:
    """The mask at ``mask_path`` (checked against the target), else ``mask.json`` in one of
    ``search_dirs``, else the labelled fallback mask."""
    candidates = [Path(mask_path).expanduser()] if mask_path else [Path(d) / "mask.json" for d in search_dirs]
    for path in candidates:
        if mask_path or path.is_file():
            artifact = MaskArtifact.load(path, model=target)
            return MaskInfo(artifact.mask, str(path), False)
    layers = find_decoder_stack(target).num_layers
    return MaskInfo(fallback_mask(layers, ratio), FALLBACK_MASK_LABEL, True)


def build_context(
    target_path: str | Path,
    draft_path: str | Path,
    settings: TierSettings,
    sampling: SamplingConfig,
    mask_path: str | Path | None = None,
    need_mask: bool = True,
    device: str = "auto",
    eagle_head: str | None = None,
) -> BenchContext:
    """Loads the pair and the mask; checks that drafter and target share a vocabulary."""
    dev = pick_device(device)
    target = load_model(target_path, dev, "target")
    draft = load_model(draft_path, dev, "draft")
    tokenizer = load_tokenizer(target_path)
    t_vocab, d_vocab = target.get_output_embeddings().weight.shape[0], draft.get_output_embeddings().weight.shape[0]
    if t_vocab != d_vocab:
        raise ModelMismatchError(
            f"target and drafter vocabularies differ ({t_vocab} vs {d_vocab}); speculative decoding needs one tokenizer"
        )
    search = [Path(target_path).expanduser().parent]
    mask = resolve_mask(target, mask_path, settings.ratio, search) if need_mask else None
    return BenchContext(
        target=target,
        draft=draft,
        tokenizer=tokenizer,
        settings=settings,
        sampling=sampling,
        mask=mask,
        device=dev,
        target_path=str(target_path),
        draft_path=str(draft_path),
        eagle_head=eagle_head,
    )


def read_prompts_file(path: str | Path) -> list[str]:
    """Prompts from a file: a JSON list of strings, or else one prompt per non-empty line (write
    ``\\n`` for a newline inside a one-line prompt)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as err:
        raise ViasdError(f"cannot read prompts file {path}: {err.strerror or err}") from None
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"prompts file {path} looks like JSON but is not valid: {err}") from None
        if not isinstance(data, list) or not all(isinstance(p, str) for p in data):
            raise ConfigError(f"prompts file {path} must hold a JSON list of strings")
        prompts = data
    else:
        prompts = [line.replace("\\n", "\n") for line in text.splitlines() if line.strip()]
    prompts = [p for p in prompts if p.strip()]
    if not prompts:
        raise ConfigError(f"prompts file {path} holds no prompts")
    return prompts
