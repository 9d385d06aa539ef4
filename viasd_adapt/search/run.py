"""Stage 2 of a mask search: calibration windows + a plan -> the best mask and the evaluation trace.

The strategy (DIMR or the guided search) minimises the routed-path cost of
:class:`~viasd_adapt.search.objective.MaskObjective` over the plan's mask space; the random
baseline is scored on the same objective, and the held-out agreement of the best mask, the
drafter and the random masks is measured on the held-out windows of stage 1. Nothing is generated
here and nothing is formatted: :mod:`viasd_adapt.search.report` turns the trace into the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Union

from torch import nn

from viasd_adapt.errors import ConfigError
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.search.bo import BOSettings
from viasd_adapt.search.calibrate import Calibrated
from viasd_adapt.search.candidates import Bits, MaskSpace
from viasd_adapt.search.dimr import SearchResult, SearchSettings, dimr_search, random_masks
from viasd_adapt.search.guided import GuidedSettings, guided_search
from viasd_adapt.search.objective import OBJECTIVE_KINDS, AgreementProbe, MaskObjective, MaskScore
from viasd_adapt.core.settings import TierSettings

StrategySettings = Union[SearchSettings, GuidedSettings]
#: The random baseline draws with the search's seed plus this offset (a stream of its own).
RANDOM_SEED_OFFSET = 7919


@dataclass(frozen=True)
class SearchPlan:
    """What stage 2 runs: the masks to search, the strategy, the tier they are scored at, and the
    size of the random baseline. ``objective``: what a mask is scored by
    (:data:`~viasd_adapt.search.objective.OBJECTIVE_KINDS`; ``"q-only"`` for a prompt-lookup
    drafter, which has no distribution)."""

    space: MaskSpace
    settings: StrategySettings = SearchSettings()
    tier: TierSettings = TierSettings()
    bo: BOSettings = BOSettings()
    compare_random: int = 0
    objective: str = "routed"

    @property
    def drafter_term(self) -> bool:
        """Whether the objective scores the drafter's segment C(u||p)."""
        return self.objective == "routed"

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVE_KINDS:
            raise ConfigError(f"unknown mask objective {self.objective!r}; choose from {', '.join(OBJECTIVE_KINDS)}")
        if isinstance(self.compare_random, bool) or not isinstance(self.compare_random, int) or self.compare_random < 0:
            raise ConfigError(f"compare_random must be an integer >= 0, got {self.compare_random!r}")

    @property
    def guided(self) -> bool:
        return isinstance(self.settings, GuidedSettings)

    @property
    def random_seed(self) -> int:
        return self.settings.seed + RANDOM_SEED_OFFSET


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
        result: the strategy's history, stop reason and timings.
        best_mask, best_score: the cheapest mask of the space and its score.
        direct_cost: C_alpha2(q||p), the direct path a mask's Delta is read against.
        fingerprint: the target's fingerprint (the artifact refuses other models).
        setup_seconds: building the objective (prefix states, direct cost), part of calibrating.
        eval_seconds: time inside the objective during the search.
        seconds: the whole stage, random baseline and held-out agreement included.
    """

    plan: SearchPlan
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
    extras: dict = field(default_factory=dict)


def check_space(target: nn.Module, space: MaskSpace) -> int:
    """The target's layer count, refusing a space built for another (before any forward)."""
    num_layers = find_decoder_stack(target).num_layers
    if space.num_layers != num_layers:
        raise ConfigError(f"the search space is for {space.num_layers} layers, the target has {num_layers}")
    return num_layers


def run_search(target: nn.Module, draft: nn.Module, calibrated: Calibrated, plan: SearchPlan,
               on_step: Callable | None = None) -> SearchTrace:
    """Searches ``plan.space`` on the calibration of stage 1 and scores the random baseline.

    ``on_step(evaluation, best_cost)`` is called after every evaluation (a progress bar).
    """
    num_layers = check_space(target, plan.space)
    started = time.perf_counter()
    objective = MaskObjective(target, calibrated.calibration, plan.tier, objective=plan.objective)
    setup_seconds = time.perf_counter() - started

    def cost(bits) -> float:
        return objective(RoutingMask.from_bits(bits))

    if plan.guided:
        result = guided_search(cost, plan.space, plan.settings, on_step)
    else:
        result = dimr_search(cost, plan.space, plan.settings, plan.bo, on_step)
    eval_seconds = objective.seconds
    best_mask = RoutingMask.from_bits(result.best.bits)
    best_score = objective.score(best_mask)
    probe = AgreementProbe(target, calibrated.heldout) if calibrated.heldout is not None else None

    random = None
    if plan.compare_random:
        masks = random_masks(plan.space, plan.compare_random, seed=plan.random_seed)
        scores = [objective.score(RoutingMask.from_bits(b)) for b in masks]
        agreements = [probe.of_mask(RoutingMask.from_bits(b)) for b in masks] if probe is not None else None
        random = RandomScores(masks, scores, agreements)
    trace = SearchTrace(plan, result, best_mask, best_score, objective.direct_cost, num_layers,
                        model_fingerprint(target), setup_seconds, eval_seconds, 0.0, objective.prefix is not None,
                        random)
    if probe is not None:
        trace.heldout_tau = probe.windows.num_scored
        trace.heldout_agreement = probe.of_mask(best_mask)
        trace.drafter_heldout_agreement = probe.of_model(draft)
    trace.seconds = time.perf_counter() - started
    return trace


__all__ = ["RANDOM_SEED_OFFSET", "RandomScores", "SearchPlan", "SearchTrace", "StrategySettings", "check_space",
           "run_search"]
