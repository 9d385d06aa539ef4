"""DIMR: random search over a mask space with a BoTorch proposal every theta steps.

The loop is independent of models: it minimises any ``cost(bits) -> float`` over the masks of a
:class:`~viasd_adapt.search.candidates.MaskSpace` (exactly ``k`` skipped layers, or any mask within
a shared-prefix compute budget). That keeps the strategy testable on constructed objectives and
lets the benchmark compare strategies on one cached objective.

Reproducibility: random proposals draw from their own ``torch.Generator`` (seed), BO pool draws
from another (seed + 1), and each BO fit/sampler reseeds the global RNG with (seed, step); with a
fixed ``torch.set_num_threads`` the same seed gives the same sequence of masks.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from viasd_adapt.search.bo import propose_bo
from viasd_adapt.search.candidates import Bits, FixedCountSpace, MaskSpace, check_cardinality, random_unseen_in
from viasd_adapt.search.config import DEFAULTS, DIMR_MIN_OBSERVATIONS, SearchConfig

RANDOM, BO = "random", "bo"


def _bo_failure_types() -> tuple[type[BaseException], ...]:
    from botorch.exceptions.errors import BotorchError, ModelFittingError

    # NotPSDError and Cholesky failures are RuntimeErrors
    return (BotorchError, ModelFittingError, RuntimeError, ValueError)


_BO_FAILURES = _bo_failure_types()


@dataclass(frozen=True)
class Evaluation:
    step: int
    bits: Bits
    cost: float
    kind: str  # RANDOM or BO (guided search: probe, warm, local, global)
    seconds: float
    in_space: bool = True  # False for probes outside the search space (never a result)

    @property
    def skipped(self) -> list[int]:
        return [i for i, b in enumerate(self.bits) if b == 0]


@dataclass
class SearchResult:
    """A strategy's evaluations in order, why it stopped, and the config it ran with."""

    history: list[Evaluation]
    stop_reason: str
    wall_seconds: float
    config: SearchConfig
    bo_seconds: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def best(self) -> Evaluation:
        return min((e for e in self.history if e.in_space), key=lambda e: (e.cost, e.step))

    def best_curve(self) -> list[float]:
        """Best cost of the space after each step (what the convergence plot draws; inf before the
        first mask of the space, e.g. during the guided search's probes)."""
        curve, best = [], float("inf")
        for e in self.history:
            if e.in_space:
                best = min(best, e.cost)
            curve.append(best)
        return curve

    @property
    def evaluations(self) -> int:
        return len(self.history)


class StopSearch(Exception):
    """Raised by an ``on_step`` callback to end a search after the evaluation it was just given (a
    time budget spent): the search returns its best mask so far, with stop reason ``"budget"``."""


def dimr_search(
    cost: Callable[[Bits], float],
    space: MaskSpace,
    config: SearchConfig = DEFAULTS,
    on_step: Callable[[Evaluation, float], None] | None = None,
) -> SearchResult:
    """Minimise ``cost`` over the masks of ``space`` with DIMR's schedule of ``config``: at most
    ``config.steps_for(L)`` evaluations, a BoTorch proposal (``config.bo``) every ``bo_every``
    steps, stopping after ``patience`` steps without improvement, seeded by ``seed``.

    ``on_step(evaluation, best_cost)`` is called after every evaluation (the CLI's progress bar).
    Costs are treated as exact (our calibration is fixed), so the result's best is the observed
    minimum without re-evaluation.
    """
    if isinstance(space, FixedCountSpace):
        check_cardinality(space.num_layers, space.k)
    steps = config.steps_for(space.num_layers, strategy="dimr")
    random_gen = torch.Generator().manual_seed(config.seed)
    pool_gen = torch.Generator().manual_seed(config.seed + 1)
    history: list[Evaluation] = []
    seen: set[Bits] = set()
    best, since_best = float("inf"), 0
    bo_seconds = 0.0
    bo_failures: list[str] = []
    stop_reason = "steps"
    started = time.perf_counter()
    total = space.size()
    for step in range(1, steps + 1):
        if len(seen) >= total:
            stop_reason = "exhausted"
            break
        t0 = time.perf_counter()
        is_bo_step = config.bo_every > 0 and step % config.bo_every == 0 and len(history) >= DIMR_MIN_OBSERVATIONS
        bits = None
        if is_bo_step:
            try:
                bits = propose_bo(
                    [e.bits for e in history], [e.cost for e in history], space, pool_gen,
                    seed=config.seed * 100_003 + step, bo=config.bo,
                )
            except _BO_FAILURES as err:  # a failed GP fit costs one random step, not the search
                bo_failures.append(f"step {step}: {type(err).__name__}: {err}"[:200])
            bo_seconds += time.perf_counter() - t0
        kind = BO if bits is not None else RANDOM
        if bits is None:
            bits = random_unseen_in(space, seen, random_gen)
        if bits is None:
            stop_reason = "exhausted"
            break
        if bits in seen or not space.contains(bits):  # invariant, never expected
            raise AssertionError(f"search proposed an invalid or repeated mask {bits}")
        value = float(cost(bits))
        seen.add(bits)
        evaluation = Evaluation(step, bits, value, kind, time.perf_counter() - t0)
        history.append(evaluation)
        if value < best:
            best, since_best = value, 0
        else:
            since_best += 1
        if on_step is not None:
            try:
                on_step(evaluation, best)
            except StopSearch:
                stop_reason = "budget"
                break
        if config.patience and since_best >= config.patience:
            stop_reason = "patience"
            break
    return SearchResult(history, stop_reason, time.perf_counter() - started, config, bo_seconds,
                        extras={"bo_failures": bo_failures})


def random_masks(space: MaskSpace, count: int, seed: int) -> list[Bits]:
    """``count`` independent random masks of ``space`` (the random baseline; repeats allowed, as in
    the paper's "random skip set" ablation)."""
    if isinstance(space, FixedCountSpace):
        check_cardinality(space.num_layers, space.k)
    generator = torch.Generator().manual_seed(seed)
    return [space.random(generator) for _ in range(count)]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
