"""Guided DIMR: a mask search that uses its evaluations (issue 23).

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
   (capped L-BFGS, BO-RECIPE.md). Without ``gp`` the surrogate alone ranks them; without either
   the choice inside the region is random.

Each ingredient can be switched off alone; ``benchmarks/search_bo_vs_random.py`` measures each
against random search and the previous strategy (random + BO every theta steps, ``dimr.py``) at
equal evaluation budgets. Probes count as evaluations there: every cost call is one.

Reproducibility: pool draws use a ``torch.Generator`` seeded with ``seed``; the GP fit reseeds the
global RNG inside ``fork_rng``; with a fixed ``torch.set_num_threads`` a seed gives one sequence.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from viasd_adapt.errors import ConfigError
from viasd_adapt.search.candidates import (
    Bits,
    FixedCountSpace,
    MaskSpace,
    bits_from_skipped,
    neighbours,
    random_neighbours,
    random_unseen_in,
    unique_unseen,
)

PROBE, WARM, LOCAL, GLOBAL = "probe", "warm", "local", "global"


def default_steps(num_layers: int) -> int:
    """Evaluations for a layer count: the L probes, then 1.5 L + 15 searched masks (60 at L = 16,
    90 at L = 30). Measured on the shipped pairs and SmolLM2-135M (README, "Mask search")."""
    return num_layers + int(1.5 * num_layers) + 15


@dataclass(frozen=True)
class GuidedSettings:
    """Budget and ingredients of one guided search.

    Attributes:
        steps: total evaluations, probes included (0 = :func:`default_steps`).
        probe, warm, local, gp: the ingredients (module docstring).
        warm_starts: most structured masks evaluated before the local phase.
        fail_tolerance: non-improving proposals before the trust region widens by one move.
        max_radius: widest region; past it the region restarts around the next-best centre.
        kappa: lower-confidence-bound weight on the GP's standard deviation.
        pool_walks: random multi-move walks sampled when the radius is above 1.
        global_pool: random masks scored per proposal when ``local`` is off.
        patience: stop when the best mask is unchanged for this many searched masks (0 = never).
        fit_maxiter: L-BFGS iterations of each GP fit.
        refit_every: the GP's hyperparameters are fitted on every this many proposals; between fits
            the GP is rebuilt on all data with the last fitted kernel (exact, no optimisation), which
            cut the search's overhead by about 3x with no measured loss (1 = fit every proposal).
    """

    steps: int = 0
    seed: int = 0
    probe: bool = True
    warm: bool = True
    local: bool = True
    gp: bool = True
    warm_starts: int = 4
    fail_tolerance: int = 4
    max_radius: int = 3
    kappa: float = 1.0
    pool_walks: int = 160
    global_pool: int = 384
    patience: int = 0
    fit_maxiter: int = 100
    min_gp_points: int = 4
    refit_every: int = 3

    def __post_init__(self) -> None:
        for name in ("steps", "seed", "warm_starts", "fail_tolerance", "max_radius", "pool_walks", "global_pool",
                     "patience", "fit_maxiter", "min_gp_points", "refit_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if self.max_radius < 1 or self.fail_tolerance < 1:
            raise ConfigError("max_radius and fail_tolerance must be at least 1")

    def to_dict(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        parts = [name for name in ("probe", "warm", "local", "gp") if getattr(self, name)]
        return "+".join(parts) or "random"


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
                        self.model = _rebuild_gp(x, residual.unsqueeze(-1), self._hyper)
                        self._since_fit += 1
                    else:
                        self.model = _fit_gp(x, residual.unsqueeze(-1), self.fit_maxiter)
                        self._hyper = {name: getattr(self.model, name).state_dict()
                                       for name in ("covar_module", "likelihood", "mean_module")}
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


def _fit_gp(train_x: torch.Tensor, train_y: torch.Tensor, maxiter: int):
    from viasd_adapt.search.bo import _fit_gp as fit

    return fit(train_x, train_y, maxiter)


def _rebuild_gp(train_x: torch.Tensor, train_y: torch.Tensor, hyper: dict):
    """A SingleTaskGP on all data with previously fitted kernel, noise and mean (no optimisation)."""
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SingleTaskGP(train_x, train_y, outcome_transform=Standardize(m=1))
        for name, state in hyper.items():
            getattr(model, name).load_state_dict(state)
    return model.eval()


# ----------------------------------------------------------------------------- the search


def guided_search(
    cost: Callable[[Bits], float],
    space: MaskSpace,
    settings: GuidedSettings = GuidedSettings(),
    on_step: Callable | None = None,
):
    """Minimise ``cost`` over ``space`` with the ingredients of ``settings``; returns a
    :class:`~viasd_adapt.search.dimr.SearchResult` whose ``best`` is the best mask *of the space*
    (probes skip a single layer and are never a result unless the space holds them)."""
    from viasd_adapt.search.dimr import Evaluation, SearchResult, check_cardinality

    if isinstance(space, FixedCountSpace):
        check_cardinality(space.num_layers, space.k)
    L = space.num_layers
    steps = settings.steps or default_steps(L)
    generator = torch.Generator().manual_seed(settings.seed)
    history: list[Evaluation] = []
    seen: set[Bits] = set()
    in_space: dict[Bits, float] = {}
    started = time.perf_counter()
    notes: list[str] = []
    phase_seconds = {"probe": 0.0, "warm": 0.0, "local": 0.0, "proposal": 0.0}
    state = {"best": math.inf, "since": 0}

    def evaluate(bits: Bits, kind: str) -> float:
        t0 = time.perf_counter()
        value = float(cost(bits))
        seen.add(bits)
        member = space.contains(bits)
        record = Evaluation(len(history) + 1, bits, value, kind, time.perf_counter() - t0, member)
        history.append(record)
        if member:
            in_space[bits] = value
            if value < state["best"]:
                state["best"], state["since"] = value, 0
            else:
                state["since"] += 1
        if on_step is not None:
            on_step(record, state["best"])
        return value

    # 1. probes
    sensitivity = None
    do_probe = settings.probe and steps >= L + 5
    if settings.probe and not do_probe:
        notes.append(f"probes skipped: {steps} steps leave too little after {L} probes")
    if do_probe:
        t0 = time.perf_counter()
        sensitivity = [evaluate(bits_from_skipped(L, [i]), PROBE) for i in range(L)]
        phase_seconds["probe"] = time.perf_counter() - t0

    # 2. warm starts
    if settings.warm:
        t0 = time.perf_counter()
        for bits in structured_starts(space, sensitivity)[: settings.warm_starts]:
            if len(history) >= steps:
                break
            if bits not in seen:
                evaluate(bits, WARM)
        phase_seconds["warm"] = time.perf_counter() - t0

    # 3./4. proposals
    surrogate = Surrogate(sensitivity, settings.gp, settings.kappa, settings.fit_maxiter, settings.min_gp_points,
                          settings.refit_every)
    radius, failures, centre, used_centres, empty_regions = 1, 0, None, set(), 0
    stop_reason = "steps"
    total = space.size()
    t_loop = time.perf_counter()
    while len(history) < steps:
        if settings.patience and in_space and state["since"] >= settings.patience:
            stop_reason = "patience"
            break
        if len(in_space) >= total:
            stop_reason = "exhausted"
            break
        t0 = time.perf_counter()
        best_bits = min(in_space, key=lambda b: (in_space[b], b)) if in_space else None
        pool, kind = [], GLOBAL
        if settings.local and best_bits is not None and empty_regions <= settings.max_radius + 1:
            if centre is None:
                centre = best_bits
            if radius > settings.max_radius:  # restart around the best mask not yet used as a centre
                used_centres.add(centre)
                fresh = sorted((b for b in in_space if b not in used_centres), key=lambda b: (in_space[b], b))
                centre = fresh[0] if fresh else best_bits
                radius, failures = 1, 0
                notes.append(f"step {len(history) + 1}: region restarted")
            pool = _region(centre, space, radius, seen, settings.pool_walks, generator)
            kind = LOCAL
            if not pool:  # the region is exhausted: widen at once
                radius, empty_regions = radius + 1, empty_regions + 1
                continue
            empty_regions = 0
        if not pool:
            pool = _global_pool(space, seen, settings.global_pool, generator)
            kind, empty_regions = GLOBAL, 0
            if not pool:
                stop_reason = "exhausted"
                break
        if surrogate.informative and (in_space or sensitivity is not None):
            if in_space:
                masks, costs = zip(*sorted(in_space.items()))
                surrogate.fit(list(masks), list(costs), seed=settings.seed * 100_003 + len(history))
            scores = surrogate.lower_bound(pool)
            choice = pool[int(torch.argmin(scores))]
        else:
            choice = pool[int(torch.randint(len(pool), (1,), generator=generator))]
        phase_seconds["proposal"] += time.perf_counter() - t0
        value = evaluate(choice, kind)
        if centre is not None and space.contains(choice) and value < in_space[centre]:
            centre, radius, failures = choice, 1, 0  # move the region to the better mask
        elif kind == LOCAL:
            failures += 1
            if failures >= settings.fail_tolerance:
                radius, failures = radius + 1, 0
    phase_seconds["local"] = time.perf_counter() - t_loop
    if not in_space:
        raise ConfigError(f"the search evaluated no mask of the space in {steps} steps; raise --steps")
    extras = {
        "strategy": "guided", "ingredients": settings.label(), "notes": notes, "sensitivity": sensitivity,
        "gp_fits": surrogate.fits, "gp_fit_seconds": round(surrogate.fit_seconds, 3),
        "phase_seconds": {k: round(v, 3) for k, v in phase_seconds.items()},
        "probe_evaluations": sum(1 for e in history if e.kind == PROBE),
        "bo_failures": [],
    }
    return SearchResult(history, stop_reason, time.perf_counter() - started, settings, surrogate.fit_seconds, extras=extras)


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


__all__ = ["GLOBAL", "LOCAL", "PROBE", "WARM", "GuidedSettings", "default_steps", "guided_search", "structured_starts"]
