"""Stage 2 of a mask search: the prepared windows + the config -> the best mask and the trace.

The strategy (DIMR or the guided search) minimises the config's objective
(:class:`~viasd_adapt.search.objective.MaskObjective`) over the config's mask space for this
target; the random baseline is scored on the same objective, and the held-out agreement of the
best mask, the drafter and the random masks is measured on the held-out windows of stage 1.
Nothing is generated here and nothing is formatted: :mod:`viasd_adapt.search.report` turns the
trace into the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from torch import nn

from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.routing.hardware import hardware_stamp
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.search.candidates import Bits, MaskSpace
from viasd_adapt.search.config import DEFAULTS, SearchConfig
from viasd_adapt.search.dimr import SearchResult, dimr_search, random_masks
from viasd_adapt.search.guided import guided_search
from viasd_adapt.search.objective import AgreementProbe, MaskObjective, MaskScore
from viasd_adapt.search.prepare import Prepared


@dataclass
class RandomScores:
    """The random baseline: its masks, their scores and (with held-out windows) agreements."""

    masks: list[Bits]
    scores: list[MaskScore]
    heldout_agreement: list[float] | None = None

    @property
    def costs(self) -> list[float]:
        return [s.cost for s in self.scores]


@dataclass
class SearchTrace:
    """Everything the search measured (stage 2's output).

    Attributes:
        config: what the search was asked to do.
        space: the masks it searched (the config's space for this target's layer count).
        objective: what the masks were scored by (the config's, ``"auto"`` resolved).
        result: the strategy's history, stop reason and timings.
        best_mask, best_score: the cheapest mask of the space and its score.
        direct_cost: C_alpha2(q||p), the direct path a mask's Delta is read against.
        fingerprint: the target's fingerprint (the artifact refuses other models).
        setup_seconds: building the objective (prefix states, direct cost), part of calibrating.
        eval_seconds: time inside the objective during the search.
        seconds: the whole stage, random baseline and held-out agreement included.
    """

    config: SearchConfig
    space: MaskSpace
    objective: str
    result: SearchResult
    best_mask: RoutingMask
    best_score: MaskScore
    direct_cost: float
    num_layers: int
    fingerprint: dict
    setup_seconds: float
    eval_seconds: float
    seconds: float
    prefix_states: bool
    random: RandomScores | None = None
    heldout_tau: int | None = None
    heldout_agreement: float | None = None
    drafter_heldout_agreement: float | None = None
    hardware: HardwareStamp | None = None  # where the search ran (the target's device and dtype)
    extras: dict = field(default_factory=dict)


def run_search(target: nn.Module, draft: nn.Module, prepared: Prepared, config: SearchConfig = DEFAULTS,
               on_step: Callable | None = None) -> SearchTrace:
    """Searches ``config``'s mask space of ``target`` on the windows of stage 1 and scores the
    random baseline (a space with no mask is refused before the first forward).

    ``on_step(evaluation, best_cost)`` is called after every evaluation (a progress bar).
    """
    num_layers = find_decoder_stack(target).num_layers
    space = config.mask_space(num_layers)
    objective_kind = config.objective_kind()
    started = time.perf_counter()
    objective = MaskObjective(target, prepared.calibration, config.tier(), objective=objective_kind)
    setup_seconds = time.perf_counter() - started

    def cost(bits) -> float:
        return objective(RoutingMask.from_bits(bits))

    strategy = guided_search if config.strategy == "guided" else dimr_search
    result = strategy(cost, space, config, on_step)
    eval_seconds = objective.seconds
    best_mask = RoutingMask.from_bits(result.best.bits)
    best_score = objective.score(best_mask)
    probe = AgreementProbe(target, prepared.heldout) if prepared.heldout is not None else None

    random = None
    if config.compare_random:
        masks = random_masks(space, config.compare_random, seed=config.random_seed)
        scores = [objective.score(RoutingMask.from_bits(b)) for b in masks]
        agreements = [probe.of_mask(RoutingMask.from_bits(b)) for b in masks] if probe is not None else None
        random = RandomScores(masks, scores, agreements)
    trace = SearchTrace(config, space, objective_kind, result, best_mask, best_score, objective.direct_cost, num_layers,
                        model_fingerprint(target), setup_seconds, eval_seconds, 0.0, objective.prefix is not None,
                        random)
    trace.hardware = hardware_stamp(target)
    if probe is not None:
        trace.heldout_tau = probe.windows.num_scored
        trace.heldout_agreement = probe.of_mask(best_mask)
        trace.drafter_heldout_agreement = probe.of_model(draft)
    trace.seconds = time.perf_counter() - started
    return trace


__all__ = ["RandomScores", "SearchTrace", "run_search"]
