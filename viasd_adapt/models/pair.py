"""A loaded model pair: target, drafter, tokenizer, routing mask and the tuned settings.

``load_pair("smollm2")`` loads a pair by name (shipped, built with ``viasd models build``, or a
real model such as SmolLM2 from its GGUF file): everything an adapter needs, in one call. With
paths (``load_pair(target, drafter, mask)``) it loads any pair. ``viasd generate``, ``viasd bench``
and ``viasd tune`` load a pair once and hand it with a
:class:`~viasd_adapt.frameworks.requests.RunRequest` to a framework's runner.

Models load through ``from_pretrained`` from a local directory, a ``.gguf`` file or a hub id where
a hub is reachable, so any HF pair works, not only the pairs this project trains. On CPU weights
are upcast to float32 (fp16 matmuls are slow and inexact there); on CUDA they keep their stored dtype.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from viasd_adapt.checks import check_drafter_reads_source, check_same_tokenizer, check_same_vocabulary
from viasd_adapt.errors import ConfigError
from viasd_adapt.io import relative_name
from viasd_adapt.models.loading import TOKENIZER_FILES, gguf_dtype, is_local_path, load_model, load_tokenizer, pick_device  # noqa: F401  (their old home)
from viasd_adapt.models.placement import Placement, check_dtype, input_device, placement
from viasd_adapt.engine.prompt_lookup import DRAFT_NAME as PROMPT_LOOKUP, PromptLookupSpec
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.mask import MaskArtifact, RoutingMask, skip_count
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.routing.mask import check_mask_model
from viasd_adapt.routing.mask import load_mask
from viasd_adapt.config.resolve import UNREAD, RunSpec, read_settings

FALLBACK_MASK_LABEL = "FALLBACK fixed mask (every other layer from layer 1; not a DIMR mask)"


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class PairFiles:
    """What a pair read beside its models when it loaded, kept so that no run reads it again: the
    mask file its own settings resolve from, the ``tuned.json`` beside it (None: none there), and
    every mask file read (path -> artifact). Files, not a resolution: what a run uses is resolved
    per run, by the planner (:mod:`viasd_adapt.frameworks.planning`) or :meth:`LoadedPair.run_context`."""

    mask: Path | None = None
    tuned: TunedSettings | None = None
    masks: Mapping[Path, MaskArtifact] = field(default_factory=dict)

    def own_spec(self) -> RunSpec | None:
        """The settings a run on the pair uses when it asks for none: the tuned choice beside its
        mask, each value with its source (:func:`~viasd_adapt.config.resolve.read_settings` over
        what was read: no file is read again); None without a mask. Its notices are the caller's."""
        if self.mask is None:
            return None
        return read_settings(self.mask, tuned=self.tuned, read_masks=self.masks)


@dataclass(frozen=True, eq=False)
class LoadedPair:
    """Models, tokenizer, mask and the files read with them, shared by every run of one command;
    immutable.

    What a run uses beyond the models (its settings, plugins, the tuned evidence for its drafter) is
    its :class:`~viasd_adapt.engine.context.RunContext`, resolved per run (:meth:`run_context`, or
    the planner's :meth:`~viasd_adapt.frameworks.planning.RunPlan.context`), not state on the
    pair: two runs with different settings on one pair, in two threads, do not see each other's.
    Compared by identity (``eq=False``): two loads of the same files are two pairs.
    """

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
    #: the pair's name when it was loaded by name
    name: str | None = None
    #: the files read beside the models (the mask's tuned.json), each read once
    files: PairFiles = field(default_factory=PairFiles)
    #: models a framework loaded for this pair, by framework (``{"eagle": ea_model}``: EAGLE's EaModel
    #: with its head), handed to that framework's runner with the pair; the planner loads them
    framework_models: Mapping[str, Any] = field(default_factory=dict)
    #: 0.2's way of handing over objects a framework loaded for this pair (``{"eagle": ea_model}``):
    #: an argument only, kept in :attr:`framework_models`; ``pair.loaded`` holds nothing.
    #: Deprecated (until 0.4.0): pass the framework's object to its adapter (``eagle.tiered(ea_model, ...)``)
    loaded: InitVar[Mapping[str, Any] | None] = None

    def __post_init__(self, loaded: Mapping[str, Any] | None) -> None:
        if loaded is not None:
            from viasd_adapt.deprecated import deprecated_use

            deprecated_use("LoadedPair(loaded=...)", "the framework's own object given to its adapter (eagle.tiered(ea_model, ...))",
                           stacklevel=3)  # __post_init__ <- the dataclass's __init__ <- user
        # read-only: a pair is immutable, the models a framework loaded for it included
        object.__setattr__(self, "framework_models", MappingProxyType({**self.framework_models, **(loaded or {})}))

    @property
    def spec(self) -> RunSpec | None:
        """The pair's own settings resolution, by its 0.2 name; deprecated (until 0.4.0): a run's
        settings are its context's, ``pair.run_context().spec``; the pair keeps the files only."""
        from viasd_adapt.deprecated import deprecated_use

        deprecated_use("LoadedPair.spec", "LoadedPair.run_context().spec")
        return self.files.own_spec()

    @property
    def evidence(self) -> TunedSettings | None:
        """The tuned evidence, by its 0.2 name; deprecated (until 0.4.0): ``pair.run_context().evidence``."""
        from viasd_adapt.deprecated import deprecated_use

        deprecated_use("LoadedPair.evidence", "LoadedPair.run_context().evidence")
        own = self.files.own_spec()
        return own.evidence if own is not None else None

    @property
    def routing(self) -> RoutingMask | None:
        return self.mask.mask if self.mask is not None else None

    @property
    def mask_path(self) -> Path | None:
        """The mask file in use (None for the fallback mask or none): what adapters take as ``mask=``,
        so that the tuned settings measured with it apply."""
        if self.mask is None or self.mask.is_fallback:
            return None
        return Path(self.mask.source)

    @property
    def settings(self) -> TierSettings:
        """The settings a run on the pair uses when it asks for none (its tuned choice:
        :meth:`PairFiles.own_spec`), else :class:`TierSettings` defaults."""
        own = self.files.own_spec()
        return own.settings if own is not None else TierSettings()

    @property
    def eos_token_ids(self) -> list[int]:
        eos = getattr(getattr(self.target, "generation_config", None), "eos_token_id", None)
        if eos is None:
            eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            return []
        return [int(eos)] if isinstance(eos, int) else [int(e) for e in eos]

    @property
    def drafter(self) -> Any:
        """What the pair drafts with, as the tuned-drafter check knows it: the prompt-lookup spec,
        the drafter model, or None."""
        return self.lookup if self.lookup is not None else self.draft

    def run_context(self, settings: TierSettings | None = None, plugins: Iterable[object] = (), *,
                    drafter: Any = None, advice: bool = True, **options: Any):
        """The :class:`~viasd_adapt.engine.context.RunContext` of a run on this pair, from what was
        read when it was loaded (no file is read again): ``settings``, else the pair's own (its
        tuned choice, with where each value came from: :meth:`PairFiles.own_spec`), its mask, its
        tuned evidence (set aside when measured on another kind of device). ``drafter``: what the
        run drafts with when known. ``advice=False`` leaves out the mask's Delta advice (a command
        that runs many requests gives it once, in its own report). ``options`` are
        :func:`~viasd_adapt.engine.context.resolve_context`'s (``plugin_manager``, ``build_slim``,
        ``use_measured``, ``evidence``). The notices are the caller's to give; the resolution's own
        (a tuned file measured with another mask) were given when the pair loaded."""
        from viasd_adapt.engine.context import resolve_context, spec_for_device

        info = self.mask
        mask = None if info is None else info.artifact if advice and info.artifact is not None else info.mask
        own = self.files.own_spec()
        if "evidence" not in options:
            options["evidence"] = spec_for_device(own, self.target).evidence if own is not None else None
        spec = replace(own, notices=()) if settings is None and own is not None else None
        return resolve_context(self.target, settings, spec=spec, mask=mask, mask_source=info.source if info else "mask",
                               plugins=plugins, drafter=drafter, **options)


# ----------------------------------------------------------------------------- loading


def _check_draft_tokenizer(tokenizer, draft_path: str | Path) -> None:
    """A drafter saved with its own tokenizer must map every string to the target's ids: equal
    vocabulary *sizes* (checked above) do not make two tokenizers the same, and a drafter whose
    ids mean other strings would draft nonsense the tiers then compare token by token. A drafter
    folder without a tokenizer is taken to use the target's."""
    folder = Path(draft_path).expanduser() if is_local_path(draft_path) else None
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
                      search_dirs: list[Path] = (), read_masks: Mapping[Path, MaskArtifact] | None = None) -> MaskInfo:
    """The mask at ``mask_path`` (checked against the target), else ``mask.json`` in one of
    ``search_dirs``, else the labelled fallback mask. ``read_masks``: files the run already read
    (:attr:`viasd_adapt.config.resolve.RunSpec.masks`), checked here instead of read again."""
    candidates = [Path(mask_path).expanduser()] if mask_path else [Path(d) / "mask.json" for d in search_dirs]
    for path in candidates:
        if mask_path or path.is_file():
            artifact = (read_masks or {}).get(path)
            if artifact is None:
                artifact = load_mask(path, target)
            else:
                check_mask_model(artifact, target, source=str(path))
            return MaskInfo(artifact.mask, str(path), False, artifact)
    layers = find_decoder_stack(target).num_layers
    return MaskInfo(fallback_mask(layers, ratio), FALLBACK_MASK_LABEL, True)


#: ``load_pair(name)``: no drafter given, so the named pair's own
_PAIRS_OWN: Any = object()


def load_pair(
    target_path: str | Path | nn.Module,
    draft_path: str | Path | nn.Module | None = _PAIRS_OWN,
    mask_path: str | Path | None = None,
    need_mask: bool = True,
    device: str = "auto",
    eagle_head: str | Path | None = None,
    ratio: float = TierSettings().ratio,
    read_masks: Mapping[Path, MaskArtifact] | None = None,
    spec: Any = UNREAD,
    *,
    tokenizer: Any = None,
    dtype: str | None = None,
    device_map: str | Mapping[str, Any] | None = None,
    max_memory: Mapping[Any, Any] | None = None,
    offload_folder: str | Path | None = None,
) -> LoadedPair:
    """Loads a pair and its mask; checks that drafter and target share a vocabulary.

    ``load_pair("demo")`` (a name, no drafter): the pair of that name (:func:`load_named_pair`),
    with its tuned settings; ``viasd models add`` names the user's own pairs. Otherwise
    ``target_path`` is a model folder, a ``.gguf`` file, a hub id (where a hub is reachable) or a
    model object already loaded (``AutoModelForCausalLM.from_pretrained(...)``: then pass its
    ``tokenizer``), and ``draft_path`` the same, ``"prompt-lookup"`` (no model: the drafter copies
    n-grams of the text, :mod:`viasd_adapt.engine.prompt_lookup`), or None (no drafter).
    ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``), ``dtype`` (``auto``, ``float32``,
    ``bfloat16``, ``float16``; auto: float32 on the CPU, the stored dtype on a GPU) and
    ``device_map`` (``"auto"``, ..., or a dict of module name -> device, ``"disk"`` included, with
    ``max_memory`` and ``offload_folder`` as accelerate takes them) say where and how the models
    load (:mod:`viasd_adapt.models.placement`): on the device, in the dtype, with no float32 copy
    on the way. With a device map the target is spread by accelerate and the drafter loads on the
    target's first device.

    ``spec``: the run's resolution of its settings (:class:`~viasd_adapt.config.resolve.RunSpec`),
    when the caller resolved them (the commands): the mask files and the tuned file it read are
    used, not read again. By default the settings beside the mask file in use are read here, once
    (its tuned choice becomes the pair's own, as for a pair loaded by name); None: none.
    ``read_masks``: mask files the run already read, for a caller without a spec."""
    if draft_path is _PAIRS_OWN:
        if (mask_path is not None or eagle_head is not None or read_masks is not None or spec is not UNREAD
                or tokenizer is not None):
            raise ConfigError("load_pair(name) takes the pair's own mask and head; pass paths to choose others "
                              "(load_pair(target, drafter, mask))")
        return load_named_pair(str(target_path), device=device, dtype=dtype, device_map=device_map,
                               max_memory=max_memory, offload_folder=offload_folder)
    given = isinstance(target_path, nn.Module)
    target, where, dev = _placed_target(target_path, placement(device, dtype, device_map, max_memory, offload_folder)
                                        if not given else None, device_map)
    drafter_place = Placement(dev, where.dtype if where is not None else check_dtype(dtype))
    lookup = PromptLookupSpec() if isinstance(draft_path, (str, Path)) and str(draft_path) == PROMPT_LOOKUP else None
    if isinstance(draft_path, nn.Module):
        draft = draft_path.eval()
    else:
        draft = (load_model(draft_path, dev, "draft", target=target, placement=drafter_place)
                 if draft_path is not None and lookup is None else None)
    if tokenizer is None:  # a .gguf target's tokenizer comes from the cache entry its weights loaded from
        tokenizer = load_tokenizer(_model_source(target) if given else target_path,
                                   dtype=gguf_dtype(where) if where is not None else dtype)
    if draft is not None:
        check_same_vocabulary(target, draft)
        check_drafter_reads_source(target, draft)
        if not isinstance(draft_path, nn.Module):
            _check_draft_tokenizer(tokenizer, draft_path)
    folder = None if given else Path(target_path).expanduser().parent
    edge = spec is UNREAD  # no caller resolved the settings: this call reads the tuned file and gives its notices
    if edge:
        beside = mask_path if mask_path else (_mask_in(folder) if folder is not None else None)
        spec = _spec_beside(beside) if need_mask else None
    read = dict(read_masks or {}) | (dict(spec.masks) if spec is not None else {})
    search = [] if folder is None else [folder]
    mask = resolve_mask_info(target, mask_path, ratio, search, read) if need_mask else None
    target_name = _model_name(target) if given else str(target_path)
    draft_name = _model_name(draft) if isinstance(draft_path, nn.Module) else str(draft_path or "")
    files = PairFiles(spec.mask_path, spec.tuned, read) if spec is not None else PairFiles(masks=read)
    if edge and spec is not None:
        give_load_notices(spec, target)
    return LoadedPair(target, draft, tokenizer, mask, dev, target_name, draft_name,
                      str(eagle_head) if eagle_head else None, lookup=lookup, files=files)


def give_load_notices(spec: RunSpec, target: nn.Module, check_model: bool = False) -> None:
    """Gives, once, what a pair's own files say to the user as it loads (a tuned file measured with
    another mask, or on another kind of device): the edge of a load that resolved its own settings.
    ``check_model``: also refuse a tuned file made for another model, now (a named pair)."""
    from viasd_adapt.core.notices import emit
    from viasd_adapt.engine.context import spec_for_device
    from viasd_adapt.routing.mask import check_tuned_model

    if check_model and spec.tuned is not None:
        check_tuned_model(spec.tuned, target, source=f"tuned settings {spec.tuned_path}")
    emit(spec.notices + spec_for_device(spec, target).notices)


def _placed_target(target_path: Any, where: Placement | None, device_map: Any) -> tuple[nn.Module, Placement | None, torch.device]:
    """``(target, its placement, where inputs and the drafter go)``: a model object as it is (None:
    it is placed already), else the target loaded where ``where`` says; with a device map, inputs
    go where the map put the embeddings."""
    if where is None:
        if device_map is not None:
            raise ConfigError("device_map places a model while it loads; this target is a model object already loaded "
                              "(pass its path, or load it with from_pretrained(..., device_map=...) yourself)")
        return target_path.eval(), None, _device_of(target_path)
    target = load_model(target_path, where.device, "target", placement=where)
    return target, where, input_device(target) if where.split else where.device


def _device_of(model: nn.Module) -> torch.device:
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _model_name(model: nn.Module) -> str:
    """A model object's ``name_or_path``, else its class name (what reports call it)."""
    return str(getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__)


def _model_source(model: nn.Module) -> str:
    """Where a model object came from (its ``name_or_path``: a hub id or folder), for the tokenizer and reports."""
    source = getattr(getattr(model, "config", None), "name_or_path", "") or ""
    if not source:
        raise ConfigError("load_pair got a model object that does not say where it came from (config.name_or_path "
                          "is empty): pass its tokenizer, load_pair(target, drafter, tokenizer=tokenizer)")
    return str(source)


def _mask_in(folder: Path) -> Path | None:
    path = folder / "mask.json"
    return path if path.is_file() else None


def _spec_beside(mask_path: str | Path | None):
    """The settings resolved beside a mask file (its tuned choice, read once), or None without a
    tuned file there."""
    from viasd_adapt.config.tuned import tuned_path_beside

    beside = tuned_path_beside(mask_path) if mask_path else None
    if beside is None or not beside.is_file() or not Path(mask_path).expanduser().is_file():
        return None
    return read_settings(mask_path)


def load_named_pair(name: str, device: str = "auto", dtype: str | None = None,
                    device_map: str | Mapping[str, Any] | None = None, max_memory: Mapping[Any, Any] | None = None,
                    offload_folder: str | Path | None = None) -> LoadedPair:
    """The pair called ``name`` (:func:`viasd_adapt.models.registry.resolve_pair`: shipped, built,
    or declared by ``pair.json`` like smollm2; a pair directory works too), loaded with its mask and
    the settings it runs with by default: ``viasd tune``'s choice when the pair has a ``tuned.json``,
    with the mask that choice was measured with (:func:`viasd_adapt.config.resolve.resolve_settings`).
    Each file is read once; runs on the pair read none again (:meth:`LoadedPair.run_context`).
    ``dtype`` (None or ``"auto"``: the pair's own, its ``pair.json``'s) and the placement arguments
    are :func:`load_pair`'s."""
    from viasd_adapt.models.registry import resolve_pair

    paths = resolve_pair(name)
    spec = read_settings(pair_mask=paths.mask) if paths.mask is not None else None
    pair = load_pair(paths.target, paths.draft, spec.mask_path if spec is not None else None,
                     need_mask=paths.mask is not None, device=device, eagle_head=paths.eagle_head,
                     spec=spec, dtype=named_dtype(paths, dtype), device_map=device_map, max_memory=max_memory,
                     offload_folder=offload_folder)
    if spec is not None:  # this call is the edge that read the files: it gives their notices, once
        give_load_notices(spec, pair.target, check_model=True)
    return replace(pair, name=paths.name)


def named_dtype(paths: Any, asked: str | None = None) -> str | None:
    """The dtype a named pair loads in: the one asked (not ``auto``), else its ``pair.json``'s (the
    weights its mask was searched on; None: auto, float32 on the CPU)."""
    asked = check_dtype(asked)
    if asked is not None:
        return asked
    own = getattr(paths, "dtype", "float32")
    return None if own == "float32" else own


__all__ = [
    "FALLBACK_MASK_LABEL",
    "LoadedPair",
    "MaskInfo",
    "PairFiles",
    "fallback_mask",
    "load_named_pair",
    "load_model",
    "load_pair",
    "load_tokenizer",
    "named_dtype",
    "pick_device",
    "resolve_mask_info",
]
