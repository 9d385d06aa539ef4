"""Guided DIMR: a mask search that uses its evaluations.

Random search with an occasional BoTorch proposal barely beat random search on the real cost
(``benchmarks/search_bo_vs_random.py``): with C(30, 6) = 593,775 masks, 60 blind draws see almost
nothing, and a GP fitted to a few dozen scattered masks in 30 binary dimensions has little to say.
This search spends its budget where the cost is informative:

1. **Probe** (``probe``): one evaluation per layer of the mask that skips that layer alone. These are
   the per-layer skip sensitivities s_i (L evaluations; with the prefix-cached objective a probe of
   layer i runs only layers i+1..L-1, about half a forward on average). They feed an additive
   surrogate, ``a(z) = log sum_{i skipped} s_i``.
2. **Warm starts** (``warm``): structured masks of the space, evaluated first: the k least sensitive
   layers, the contiguous block of k layers with the least summed sensitivity, early exit (the last
   k layers), and (without probes) contiguous blocks at a few depths.
3. **Swap trust region** (``local``): every later proposal is a mask at most ``radius`` moves
   (one-in-one-out swaps, or flips that stay in the space) from the incumbent. The radius starts at
   1, grows by one after ``fail_tolerance`` proposals that did not improve (variable-neighbourhood
   search: a discrete space has no smaller region than one swap) and resets to 1 on improvement;
   past ``max_radius`` the region restarts around the best mask not yet used as a centre.
4. **GP ranking** (``gp``): inside the region, candidates are ranked by a lower confidence bound of
   ``log cost``: a least-squares fit ``alpha + beta a(z)`` of the additive surrogate (when probed)
   plus a BoTorch ``SingleTaskGP`` on the 0/1 mask fitted to what the surrogate leaves unexplained
   (capped L-BFGS, :mod:`viasd_adapt.search.gp`). Without ``gp`` the surrogate alone ranks them;
   without either the choice inside the region is random.

Each ingredient can be switched off alone; ``benchmarks/search_bo_vs_random.py`` measures each
against random search and the previous strategy (random + BO every theta steps, ``dimr.py``) at
equal evaluation budgets. Probes count as evaluations there: every cost call is one.

:func:`guided_search` is a short loop over the steps below, each a documented function of what it
is given: :func:`probe_layers` and :func:`warm_start` (phases 1 and 2), then per proposal
:func:`stop_reason`, :func:`candidates` (the region's or a global pool, with the region's next
state), :func:`choose_candidate` (the surrogate's pick) and :func:`after_proposal` (the region
after the result). The trust region is an immutable :class:`Region` whose transitions
(:func:`centred`, :func:`after_proposal`) are pure; what was evaluated is an :class:`Evaluations`
record, the one place that calls the cost. The ingredients and internals are
:class:`~viasd_adapt.search.config.GuidedConfig`.

Reproducibility: pool draws use a ``torch.Generator`` seeded with ``seed``; the GP fit reseeds the
global RNG inside ``fork_rng``; with a fixed ``torch.set_num_threads`` a seed gives one sequence.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from viasd_adapt.errors import ConfigError
from viasd_adapt.search.candidates import (
    Bits,
    FixedCountSpace,
    MaskSpace,
    bits_from_skipped,
    check_cardinality,
    neighbours,
    random_neighbours,
    random_unseen_in,
    unique_unseen,
)
from viasd_adapt.search.config import DEFAULTS, GuidedConfig, SearchConfig, default_steps
from viasd_adapt.search.dimr import Evaluation, SearchResult, StopSearch
from viasd_adapt.search.gp import fit_gp, fitted_state, rebuild_gp

PROBE, WARM, LOCAL, GLOBAL = "probe", "warm", "local", "global"
#: :func:`candidates`' kind when the region held no unseen mask and was widened instead.
WIDENED = "widened"


# ----------------------------------------------------------------------------- structured starts


def structured_starts(space: MaskSpace, sensitivity: list[float] | None) -> list[Bits]:
    """Structured masks of ``space``, most promising first (module docstring, step 2)."""
    L = space.num_layers
    out: list[Bits] = []
    if isinstance(space, FixedCountSpace):
        k = space.k
        if sensitivity is not None:
            order = sorted(range(L), key=lambda i: (sensitivity[i], i))
            out.append(bits_from_skipped(L, order[:k]))
            blocks = sorted(range(L - k + 1), key=lambda s: (sum(sensitivity[s:s + k]), -s))
            out.extend(bits_from_skipped(L, range(s, s + k)) for s in blocks[:2])
        out.append(bits_from_skipped(L, range(L - k, L)))  # early exit
        out.append(bits_from_skipped(L, range(L - k - 1, L - 1)))  # the block before the last layer
        for start in (max(1, (L - k) // 2), max(1, (L - k) * 3 // 4), max(1, (L - k) // 4)):
            out.append(bits_from_skipped(L, range(start, start + k)))
    else:  # budget space (or any space with contains): early exits, then late blocks
        for s1 in range(L - 1, 0, -1):
            out.append(tuple(1 if i < s1 else 0 for i in range(L)))
        if sensitivity is not None:
            order = sorted(range(1, L), key=lambda i: (sensitivity[i], i))
            for count in range(1, L):
                out.append(bits_from_skipped(L, order[:count]))
        # deepest first: among masks the budget admits, fewer skipped layers usually agree more
        out = sorted((b for b in out if space.contains(b)), key=lambda b: (b.count(0), b))
    return [b for b in unique_unseen(out, set()) if space.contains(b)]


# ----------------------------------------------------------------------------- surrogate


class Surrogate:
    """log cost ~ alpha + beta a(z) + GP(z) (module docstring, step 4)."""

    def __init__(self, sensitivity: list[float] | None, use_gp: bool, kappa: float, fit_maxiter: int, min_gp_points: int,
                 refit_every: int = 1):
        self.refit_every, self._hyper, self._since_fit = max(1, refit_every), None, 0
        self.sensitivity = None if sensitivity is None else torch.tensor(sensitivity, dtype=torch.float64)
        self.use_gp, self.kappa, self.fit_maxiter, self.min_gp_points = use_gp, kappa, fit_maxiter, min_gp_points
        self.alpha, self.beta = 0.0, 1.0
        self.model = None
        self.fit_seconds = 0.0
        self.fits = 0

    @property
    def informative(self) -> bool:
        return self.sensitivity is not None or self.use_gp

    def additive(self, x: torch.Tensor) -> torch.Tensor:
        if self.sensitivity is None:
            return torch.zeros(x.shape[0], dtype=torch.float64)
        floor = max(float(self.sensitivity.abs().min()) * 1e-3, 1e-9)
        return ((1.0 - x) @ self.sensitivity.clamp_min(floor)).clamp_min(floor).log()

    def fit(self, masks: list[Bits], costs: list[float], seed: int) -> None:
        x = torch.tensor(masks, dtype=torch.float64)
        y = torch.tensor(costs, dtype=torch.float64)
        y = y.clamp_min(1e-12).log() if bool((y > 0).all()) else y
        a = self.additive(x)
        if self.sensitivity is not None and len(masks) >= 3 and float(a.std()) > 1e-9:
            design = torch.stack([torch.ones_like(a), a], dim=1)
            ridge = 1e-6 * torch.eye(2, dtype=torch.float64)
            self.alpha, self.beta = torch.linalg.solve(design.T @ design + ridge, design.T @ y).tolist()
        else:
            self.alpha, self.beta = float(y.mean()), (1.0 if self.sensitivity is not None else 0.0)
        self.model = None
        if self.use_gp and len(masks) >= self.min_gp_points:
            residual = y - (self.alpha + self.beta * a)
            started = time.perf_counter()
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    if self._hyper is not None and self._since_fit < self.refit_every - 1:
                        self.model = rebuild_gp(x, residual.unsqueeze(-1), self._hyper)
                        self._since_fit += 1
                    else:
                        self.model = fit_gp(x, residual.unsqueeze(-1), self.fit_maxiter)
                        self._hyper = fitted_state(self.model)
                        self._since_fit = 0
                        self.fits += 1
            except Exception as err:  # a failed fit falls back to the surrogate, never stops the search
                self.model, self._hyper = None, None
                self.last_error = f"{type(err).__name__}: {err}"[:200]
            self.fit_seconds += time.perf_counter() - started

    @torch.no_grad()
    def lower_bound(self, masks: list[Bits]) -> torch.Tensor:
        """Predicted log cost minus kappa standard deviations (lower is more promising)."""
        x = torch.tensor(masks, dtype=torch.float64)
        value = self.alpha + self.beta * self.additive(x)
        if self.model is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                posterior = self.model.posterior(x)
            value = value + posterior.mean.squeeze(-1) - self.kappa * posterior.variance.clamp_min(0).sqrt().squeeze(-1)
        return value


# ----------------------------------------------------------------------------- evaluations


@dataclass
class Evaluations:
    """Every mask the search has evaluated: the history, the masks seen, the costs of the masks of
    the space, and the best of them (with how many evaluations ago it last improved). The only
    part of the search that calls the cost and reports progress."""

    cost: Callable[[Bits], float]
    space: MaskSpace
    on_step: Callable | None = None
    history: list[Evaluation] = field(default_factory=list)
    seen: set[Bits] = field(default_factory=set)
    in_space: dict[Bits, float] = field(default_factory=dict)
    best: float = math.inf
    since_best: int = 0
    stopped: bool = False  # the on_step callback raised StopSearch (a time budget spent)

    def evaluate(self, bits: Bits, kind: str) -> float:
        """Scores ``bits`` (a probe outside the space is recorded, never a result)."""
        t0 = time.perf_counter()
        value = float(self.cost(bits))
        self.seen.add(bits)
        member = self.space.contains(bits)
        record = Evaluation(len(self.history) + 1, bits, value, kind, time.perf_counter() - t0, member)
        self.history.append(record)
        if member:
            self.in_space[bits] = value
            if value < self.best:
                self.best, self.since_best = value, 0
            else:
                self.since_best += 1
        if self.on_step is not None:
            try:
                self.on_step(record, self.best)
            except StopSearch:
                self.stopped = True
        return value

    def best_bits(self) -> Bits | None:
        """The cheapest mask of the space so far (ties: the smaller bits), None before the first."""
        return min(self.in_space, key=lambda b: (self.in_space[b], b)) if self.in_space else None


# ----------------------------------------------------------------------------- phases 1 and 2


def probe_layers(evaluations: Evaluations, steps: int, guided: GuidedConfig, notes: list[str]) -> list[float] | None:
    """Phase 1: the per-layer skip sensitivities (one evaluation per layer), or None when probes
    are off or ``steps`` leaves too little after them (a note says so)."""
    layers = evaluations.space.num_layers
    if not guided.probe:
        return None
    if steps < layers + 5:
        notes.append(f"probes skipped: {steps} steps leave too little after {layers} probes")
        return None
    return [evaluations.evaluate(bits_from_skipped(layers, [i]), PROBE) for i in range(layers)]


def warm_start(evaluations: Evaluations, sensitivity: list[float] | None, steps: int, guided: GuidedConfig) -> None:
    """Phase 2: the first ``warm_starts`` structured masks (:func:`structured_starts`) not yet seen,
    within the budget."""
    if not guided.warm:
        return
    for bits in structured_starts(evaluations.space, sensitivity)[: guided.warm_starts]:
        if len(evaluations.history) >= steps or evaluations.stopped:
            break
        if bits not in evaluations.seen:
            evaluations.evaluate(bits, WARM)


# ----------------------------------------------------------------------------- phases 3 and 4


@dataclass(frozen=True)
class Region:
    """The swap trust region (module docstring, step 3): its centre (None until the first mask of
    the space), radius in moves, non-improving proposals at this radius, the centres already used,
    and how many widenings in a row found the region empty."""

    centre: Bits | None = None
    radius: int = 1
    failures: int = 0
    used_centres: frozenset[Bits] = frozenset()
    empty_regions: int = 0


def stop_reason(evaluations: Evaluations, patience: int, total: int) -> str | None:
    """Why the search stops before its next proposal (``"patience"``: the best mask unchanged for
    ``patience`` evaluations of the space; ``"exhausted"``: all ``total`` masks seen), or None."""
    if patience and evaluations.in_space and evaluations.since_best >= patience:
        return "patience"
    if len(evaluations.in_space) >= total:
        return "exhausted"
    return None


def centred(region: Region, evaluations: Evaluations, max_radius: int) -> tuple[Region, bool]:
    """The region with a centre: the best mask when it has none; past ``max_radius``, restarted
    (radius 1) around the best mask not yet used as a centre. Also whether it restarted."""
    best = evaluations.best_bits()
    if region.centre is None:
        region = replace(region, centre=best)
    if region.radius <= max_radius:
        return region, False
    used = region.used_centres | {region.centre}
    in_space = evaluations.in_space
    fresh = sorted((b for b in in_space if b not in used), key=lambda b: (in_space[b], b))
    return Region(fresh[0] if fresh else best, 1, 0, used, region.empty_regions), True


def candidates(region: Region, evaluations: Evaluations, guided: GuidedConfig, generator: torch.Generator,
               notes: list[str]) -> tuple[list[Bits], str, Region]:
    """The masks the next proposal chooses from, their kind and the region's next state.

    Inside the trust region (``local``, once a mask of the space is known, unless the region came
    up empty more than ``max_radius + 1`` times in a row): its unseen masks, kind ``LOCAL``; an
    empty region is widened by one move and returned with kind :data:`WIDENED` and no masks.
    Otherwise ``global_pool`` unseen random masks of the space, kind ``GLOBAL`` (none left: the
    space is exhausted)."""
    if guided.local and evaluations.in_space and region.empty_regions <= guided.max_radius + 1:
        region, restarted = centred(region, evaluations, guided.max_radius)
        if restarted:
            notes.append(f"step {len(evaluations.history) + 1}: region restarted")
        pool = _region(region.centre, evaluations.space, region.radius, evaluations.seen, guided.pool_walks, generator)
        if not pool:  # the region is exhausted: widen at once
            return [], WIDENED, replace(region, radius=region.radius + 1, empty_regions=region.empty_regions + 1)
        return pool, LOCAL, replace(region, empty_regions=0)
    pool = _global_pool(evaluations.space, evaluations.seen, guided.global_pool, generator)
    return pool, GLOBAL, replace(region, empty_regions=0)


def choose_candidate(pool: list[Bits], surrogate: Surrogate, evaluations: Evaluations,
                     sensitivity: list[float] | None, seed: int, generator: torch.Generator) -> Bits:
    """Phase 4: the pool's mask with the lowest lower confidence bound of the surrogate, refitted
    on every mask of the space so far; a random one when the surrogate has nothing to go on."""
    if surrogate.informative and (evaluations.in_space or sensitivity is not None):
        if evaluations.in_space:
            masks, costs = zip(*sorted(evaluations.in_space.items()))
            surrogate.fit(list(masks), list(costs), seed=seed * 100_003 + len(evaluations.history))
        return pool[int(torch.argmin(surrogate.lower_bound(pool)))]
    return pool[int(torch.randint(len(pool), (1,), generator=generator))]


def after_proposal(region: Region, choice: Bits, value: float, kind: str, evaluations: Evaluations,
                   fail_tolerance: int) -> Region:
    """The region after ``choice`` cost ``value``: moved to it (radius 1) when it beats the centre;
    after ``fail_tolerance`` local proposals that did not, one move wider."""
    centre = region.centre
    if centre is not None and evaluations.space.contains(choice) and value < evaluations.in_space[centre]:
        return replace(region, centre=choice, radius=1, failures=0)
    if kind != LOCAL:
        return region
    if region.failures + 1 >= fail_tolerance:
        return replace(region, radius=region.radius + 1, failures=0)
    return replace(region, failures=region.failures + 1)


# ----------------------------------------------------------------------------- the search


def guided_search(
    cost: Callable[[Bits], float],
    space: MaskSpace,
    config: SearchConfig = DEFAULTS,
    on_step: Callable | None = None,
) -> SearchResult:
    """Minimise ``cost`` over ``space`` with the ingredients of ``config.guided``, at most
    ``config.steps_for(L)`` evaluations (probes included), seeded by ``config.seed``; returns a
    :class:`~viasd_adapt.search.dimr.SearchResult` whose ``best`` is the best mask *of the space*
    (probes skip a single layer and are never a result unless the space holds them)."""
    if isinstance(space, FixedCountSpace):
        check_cardinality(space.num_layers, space.k)
    guided = config.guided
    steps = config.steps_for(space.num_layers, strategy="guided")
    generator = torch.Generator().manual_seed(config.seed)
    evaluations = Evaluations(cost, space, on_step)
    notes: list[str] = []
    phase_seconds = {"probe": 0.0, "warm": 0.0, "local": 0.0, "proposal": 0.0}
    started = time.perf_counter()

    sensitivity = probe_layers(evaluations, steps, guided, notes)
    phase_seconds["probe"] = time.perf_counter() - started if sensitivity is not None else 0.0
    t0 = time.perf_counter()
    warm_start(evaluations, sensitivity, steps, guided)
    phase_seconds["warm"] = time.perf_counter() - t0 if guided.warm else 0.0

    surrogate = Surrogate(sensitivity, guided.gp, guided.kappa, guided.fit_maxiter, guided.min_gp_points,
                          guided.refit_every)
    region, reason, total = Region(), "steps", space.size()
    t_loop = time.perf_counter()
    while len(evaluations.history) < steps:
        stop = "budget" if evaluations.stopped and evaluations.in_space else stop_reason(evaluations, config.patience, total)
        if stop is not None:
            reason = stop
            break
        t0 = time.perf_counter()
        pool, kind, region = candidates(region, evaluations, guided, generator, notes)
        if kind == WIDENED:
            continue
        if not pool:
            reason = "exhausted"
            break
        choice = choose_candidate(pool, surrogate, evaluations, sensitivity, config.seed, generator)
        phase_seconds["proposal"] += time.perf_counter() - t0
        value = evaluations.evaluate(choice, kind)
        region = after_proposal(region, choice, value, kind, evaluations, guided.fail_tolerance)
    phase_seconds["local"] = time.perf_counter() - t_loop
    if not evaluations.in_space:
        raise ConfigError(f"the search evaluated no mask of the space in {steps} steps; raise --steps")
    history = evaluations.history
    extras = {
        "strategy": "guided", "ingredients": guided.label(), "notes": notes, "sensitivity": sensitivity,
        "gp_fits": surrogate.fits, "gp_fit_seconds": round(surrogate.fit_seconds, 3),
        "phase_seconds": {k: round(v, 3) for k, v in phase_seconds.items()},
        "probe_evaluations": sum(1 for e in history if e.kind == PROBE),
        "bo_failures": [],
    }
    return SearchResult(history, reason, time.perf_counter() - started, config, surrogate.fit_seconds, extras=extras)


def _region(centre: Bits, space: MaskSpace, radius: int, seen: set[Bits], walks: int,
            generator: torch.Generator) -> list[Bits]:
    """Unseen masks of ``space`` at most ``radius`` moves from ``centre``: every one-move neighbour,
    plus ``walks`` random walks of 2..radius moves."""
    pool = list(neighbours(centre, space))
    for steps in range(2, radius + 1):
        pool.extend(random_neighbours(centre, space, steps, max(1, walks // max(1, radius - 1)), generator))
    return unique_unseen(pool, seen)


def _global_pool(space: MaskSpace, seen: set[Bits], count: int, generator: torch.Generator) -> list[Bits]:
    taken, pool = set(seen), []
    for _ in range(count):
        bits = random_unseen_in(space, taken, generator, tries=20)
        if bits is None:
            break
        taken.add(bits)
        pool.append(bits)
    return pool


__all__ = ["GLOBAL", "LOCAL", "PROBE", "WARM", "WIDENED", "Evaluations", "Region", "Surrogate", "after_proposal",
           "candidates", "centred", "choose_candidate", "default_steps", "guided_search", "probe_layers", "stop_reason",
           "structured_starts", "warm_start"]
