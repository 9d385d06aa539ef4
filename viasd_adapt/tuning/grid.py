"""The sweep's grid: which families, settings and masks ``viasd tune`` measures (:mod:`viasd_adapt.tuning.tune`).

* :class:`TuneGrid`: the tolerances, lenience values and gate readings swept, and the block length;
* :class:`TuneConfig`: every option of one sweep (the grid, the budget, the masks to search, the
  prompts' budget and sampling), checked when built, like the bench's ``BenchConfig``;
* the masks: the pair's own, one DIMR mask per ratio it does not cover, and early-exit masks;
* the candidates: every (family, settings, mask) of the tier on every cycle (the adaptive twins of
  the best fixed points depend on the choice: :func:`viasd_adapt.tuning.choose.adaptive_candidates`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from viasd_adapt.config.budget import Budget
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.tuned import MEASURED_ON_DEFAULT
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import Mode, TierSettings, check_real
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.routing.mask import model_fingerprint

#: The framework whose loop every candidate runs on (recorded in tuned.json as ``measured_on``):
#: the tier's own SD loop, the loop the HF adapter's tiered modes run. Other frameworks apply the
#: same settings; ``viasd generate --explain`` says when a setting rests on another framework's run.
MEASURED_ON = MEASURED_ON_DEFAULT
#: The families of the sweep, in the order they are reported, by the one vocabulary of modes (a
#: point's family is its settings' row name, :func:`~viasd_adapt.core.settings.mode_label`): untiered
#: SD, the tier on every cycle (``-fixed``), the lenient baseline, and the adaptive tier.
FAMILIES = ("none", "lossless-fixed", "lenient", "lossy-fixed", "lossless", "lossy")
#: The families that run a slim verifier (priced with their mask's forward costs).
TIER_FAMILIES = ("lossless-fixed", "lossy-fixed", "lossless", "lossy")
#: The families without a slim verifier: the simpler settings a tier must beat by the margin.
SIMPLE_FAMILIES = ("none", "lenient")


@dataclass(frozen=True)
class TuneGrid:
    """What the tuner sweeps."""

    alpha1: tuple[float, ...] = (0.0, 0.3, 0.5, 0.8)
    alpha2: tuple[float, ...] = (0.0, 0.3, 0.6)
    lenience: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8)
    greedy_gates: tuple[str, ...] = ("proposer", "top")
    gamma: int = 5

    def __post_init__(self) -> None:
        for name in ("alpha1", "alpha2", "lenience"):
            values = getattr(self, name)
            if not values:
                raise ConfigError(f"the tuning grid needs at least one {name} value")
            for value in values:
                check_real(name, value, low=0.0, high=1.0, high_open=True)
        for gate in self.greedy_gates:
            TierSettings(greedy_gates=gate)



@dataclass(frozen=True)
class TuneConfig:
    """Every option of one sweep (``viasd tune``'s), checked once, when it is built.

    Attributes:
        max_new_tokens: tokens generated per calibration prompt and candidate.
        grid: what is swept (:class:`TuneGrid`).
        budget: the fidelity budget the choice must meet.
        ratios, search_steps: a DIMR mask is searched (``search_steps`` steps) for each skip ratio
            the pair's own mask does not cover.
        exits: early-exit masks (keep layers ``0..k-1``) measured beside them.
        sampling, seed: how every candidate samples (the seed of prompt i is ``seed + i``).
        save_masks_to: where searched masks are saved (None: kept in memory, named by their ratio).
        cost_repeats: repeats of each forward timed for the costs.
        chat: how text prompts become ids (``auto``, ``on``, ``off``).
        adaptive: also measure the adaptive twins (False: the tier on every cycle only).
        mask_files: masks already searched (files, checked against the target) measured beside
            the pair's own, each named by its path (``viasd models add``'s other skip ratios).
    """

    max_new_tokens: int = 48
    grid: TuneGrid = TuneGrid()
    budget: Budget = Budget()
    ratios: tuple[float, ...] = ()
    search_steps: int = 40
    exits: tuple[int, ...] = ()
    sampling: SamplingConfig = SamplingConfig()
    save_masks_to: Path | None = None
    seed: int = 0
    cost_repeats: int = 15
    chat: str = "auto"
    adaptive: bool = True
    mask_files: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.cost_repeats < 1:
            raise ConfigError(f"cost_repeats must be at least 1, got {self.cost_repeats}")
        object.__setattr__(self, "ratios", tuple(self.ratios))
        object.__setattr__(self, "exits", tuple(self.exits))
        object.__setattr__(self, "mask_files", tuple(Path(p) for p in self.mask_files))

    @property
    def base(self) -> TierSettings:
        """The settings every candidate starts from (the grid's block length)."""
        return TierSettings(gamma=self.grid.gamma)


def masks_for_ratios(pair: LoadedPair, ratios: tuple[float, ...], search_steps: int, save_dir: Path | None,
                      say: Callable[[str], None], exits: tuple[int, ...] = (),
                      mask_files: tuple[Path, ...] = ()) -> dict[str, RoutingMask]:
    """The pair's own mask, the masks of ``mask_files`` (searched already), one DIMR mask per ratio
    none of those covers, and the early-exit masks ``exits`` (keep layers ``0..k-1``, skip the rest:
    everything the slim pass computes is reused when the target resumes at k, so they cost nothing
    beyond the exit's own layers)."""
    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.routing.mask import load_mask
    from viasd_adapt.config.mask import skip_count

    masks: dict[str, RoutingMask] = {}
    if pair.mask is not None:
        masks[pair.mask.source] = pair.mask.mask
    for path in mask_files:
        masks[str(path)] = load_mask(path, pair.target).mask
    num_layers = find_decoder_stack(pair.target).num_layers
    have = {mask.num_skipped for mask in masks.values()}
    for ratio in ratios:
        k = skip_count(num_layers, ratio)
        if k in have:
            continue
        have.add(k)
        say(f"searching a DIMR mask for r = {ratio} ({k} of {num_layers} layers skipped, {search_steps} steps)")
        artifact = _search(pair, ratio, search_steps)
        name = f"DIMR r={ratio}"
        if save_dir is not None:
            path = artifact.save(save_dir / f"mask-r{ratio:.2f}.json")
            name = str(path)
        masks[name] = artifact.mask
    for k in exits:
        if not 0 < k < num_layers:
            raise ConfigError(f"an early exit must keep 1..{num_layers - 1} layers, got {k}")
        mask = RoutingMask.from_skipped(num_layers, range(k, num_layers))
        name = f"early exit at layer {k}"
        if save_dir is not None:
            from viasd_adapt.config.search_record import EarlyExitRecord

            name = str(MaskArtifact(mask, mask.ratio, fingerprint=model_fingerprint(pair.target),
                                    search=EarlyExitRecord(exit_layer=k)).save(save_dir / f"mask-exit{k}.json"))
        masks[name] = mask
    return masks


def _search(pair: LoadedPair, ratio: float, steps: int) -> MaskArtifact:
    """A quick DIMR mask for one ratio: ``viasd search``'s config (:data:`~viasd_adapt.search.config.DEFAULTS`)
    with the tuner's overrides, named here: DIMR with the tuner's step budget and patience, and 8
    short stdlib snippets as plain text (no chat template, also on a chat target) with no
    held-out set (the tune measures the mask itself afterwards)."""
    from viasd_adapt.search.config import DEFAULTS
    from viasd_adapt.search.pipeline import search_pair

    calibration = replace(DEFAULTS.calibration, n_calibration=8, n_heldout=0, new_tokens=32, chat="off",
                          spec_bench_for_chat=False)
    config = DEFAULTS.with_(strategy="dimr", ratio=ratio, steps=steps, patience=max(10, steps // 3), calibration=calibration)
    return search_pair(pair.target, pair.draft, pair.tokenizer, config).artifact


def fixed_candidates(masks: dict[str, RoutingMask], grid: TuneGrid, base: TierSettings, greedy: bool):
    """(family, settings, mask name) for every candidate of the sweep with the tier on every cycle."""
    yield "none", base.with_(mode=Mode.NONE), None
    for a in grid.lenience:
        yield "lenient", base.with_(mode=Mode.LENIENT, lenience=a), None
    gates = grid.greedy_gates if greedy else ("proposer",)
    fixed = base.with_(adaptive=False)
    for name, mask in masks.items():
        yield "lossless-fixed", fixed.with_(mode=Mode.LOSSLESS, ratio=mask.ratio), name
        for a1, a2, gate in itertools.product(grid.alpha1, grid.alpha2, gates):
            yield "lossy-fixed", fixed.with_(mode=Mode.LOSSY, alpha1=a1, alpha2=a2, greedy_gates=gate, ratio=mask.ratio), name


__all__ = ["FAMILIES", "MEASURED_ON", "SIMPLE_FAMILIES", "TIER_FAMILIES", "TuneConfig", "TuneGrid"]
