"""How sure a verdict is: a paired bootstrap over prompts (pure numpy, seeded, no model).

A verdict compares settings measured on the *same* prompts (the bench's rows, the tuner's points).
Which is cheapest within the fidelity budget can hinge on one or two prompts: on 3 prompts the
demo once called lossy PEARL a win because one prompt's regret pushed lenient out of the budget.
So every replicate here resamples the prompt indices once, with replacement, and recomputes every
setting's cost (full-equivalent passes per token, a ratio of sums) and fidelity (LL drop, regret,
overrule rate) from its per-prompt sums, then applies the one recommendation rule
(:func:`viasd_adapt.config.budget.recommend`) and the one budget rule (:class:`viasd_adapt.config.budget.Budget`).

The result says how often the stated recommendation holds across replicates and gives an interval
on the gain of the cheapest slim-tier setting over the best simpler one (``1 - tier / simple``
cost). Where the two are not separated (the recommendation holds in fewer than ``level`` of the
replicates, or the gain interval straddles the tie margin) the verdict is *undetermined at N
prompts*, and the simpler setting is recommended: it needs no slim verifier, mask or tuning.
Fewer than :data:`MIN_PROMPTS` prompts are always undetermined: a resample of 1 or 2 prompts
cannot show how much the prompts vary.

Evidence is counted once. A prompt that appears several times (the same token ids, told apart by
the ``keys`` of :class:`PromptSums`) is one unit of the bootstrap: its copies' sums are pooled into
it, so the point estimate is unchanged, but six copies of one prompt are one prompt of evidence,
not six, and they do not count towards :data:`MIN_PROMPTS`. The sentence reports the copies.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from viasd_adapt.config.budget import TIE_MARGIN, Budget

DEFAULT_REPLICATES = 1000
DEFAULT_LEVEL = 0.95
DEFAULT_SEED = 0
#: Below this many prompts a verdict is undetermined whatever the resamples say.
MIN_PROMPTS = 5


@dataclass(frozen=True)
class PromptSums:
    """One setting's sums per prompt; index i is prompt i, the same prompt for every setting.

    ``cost``: full-equivalent passes spent on the prompt (not per token). ``overruled`` /
    ``audited``: summed overrule probabilities and the number of audited tokens (None when the
    setting was not audited). ``log_likelihood`` and ``regret`` are sums over the prompt's tokens.
    ``keys``: what identifies each prompt (:func:`prompt_key` of its token ids); equal keys are
    copies of one prompt (None: every prompt counts as distinct, as in files written before keys)."""

    tokens: Sequence[float]
    cost: Sequence[float]
    log_likelihood: Sequence[float] | None = None
    regret: Sequence[float] | None = None
    overruled: Sequence[float] | None = None
    audited: Sequence[float] | None = None
    keys: Sequence[str] | None = None
    passes: dict[str, Sequence[float]] | None = None  # raw passes per kind per prompt (priced again per replicate)

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class Candidate:
    """A setting the verdict chooses among: its name, its per-prompt sums, and whether it is exact
    (always within budget) and simple (needs no slim tier: ar, none, lenient)."""

    name: str
    sums: PromptSums
    exact: bool
    simple: bool


@dataclass(frozen=True)
class Uncertainty:
    """What the bootstrap found (module docstring)."""

    prompts: int
    replicates: int
    level: float
    stated: str | None  # the recommendation the point estimate states
    recommended: str | None  # the same when determined, else the simpler setting
    determined: bool
    holds: float  # share of replicates whose recommendation is ``stated``
    tier: str | None = None  # the cheapest slim-tier setting within budget (point estimate)
    simple: str | None = None  # the cheapest simpler setting within budget (point estimate)
    gain_interval: tuple[float, float] | None = None  # 1 - cost(tier) / cost(simple), ``level`` interval
    admitted: dict[str, float] = field(default_factory=dict)  # share of replicates within budget, per setting
    margin: float = TIE_MARGIN
    copies: int = 0  # prompts that repeat another one (not counted in ``prompts``)

    def sentence(self) -> str:
        """One clause for the verdict: "determined at 40 prompts (...)" or "undetermined at 3 prompts (...)"."""
        # "undetermined" never stands beside a share that reads as certainty: an undetermined verdict
        # names what leaves it open (too few prompts, an interval across the margin, a share below the level)
        resamples = f"{self.replicates} bootstrap resamples of the prompts"
        if self.determined or self.holds < self.level:
            parts = [f"holds in {'only ' if not self.determined else ''}{self.holds:.0%} of {resamples}"]
        else:  # the share is no evidence here: the clauses below say what leaves the verdict open
            parts = []
        if self.gain_interval is not None:
            lo, hi = self.gain_interval
            across = " (an interval across the margin)" if lo <= self.margin <= hi else ""
            parts.append(f"{self.tier} saves {lo:+.1%} to {hi:+.1%} of {self.simple}'s passes ({self.level:.0%} interval; "
                         f"it must save over {self.margin:.0%}){across}")
        flipping = [f"{name} {share:.0%}" for name, share in self.admitted.items() if 1 - self.level < share < self.level]
        if flipping:
            more = f" and {len(flipping) - 3} more settings" if len(flipping) > 4 else ""
            parts.append("within budget in: " + ", ".join(flipping[:3] if more else flipping) + more)
        if self.prompts < MIN_PROMPTS:
            parts.append(f"fewer than {MIN_PROMPTS} distinct prompts" if self.copies else f"fewer than {MIN_PROMPTS} prompts")
        if self.copies:
            copies = "1 copy" if self.copies == 1 else f"{self.copies} copies"
            parts.append(f"{copies} of other prompts counted once, not as evidence")
        head = "determined" if self.determined else "undetermined"
        tail = "" if self.determined or self.recommended == self.stated else f": use the simpler {self.recommended}"
        counted = f"{prompts_words(self.prompts)}" + (" (distinct)" if self.copies else "")
        return f"{head} at {counted} ({'; '.join(parts)}){tail}"


def prompt_key(token_ids: Sequence[int]) -> str:
    """A short, stable identity of a prompt's token ids: copies of one prompt share it."""
    return hashlib.sha1(",".join(str(int(t)) for t in token_ids).encode()).hexdigest()[:16]


def distinct_units(keys: Sequence[str] | None, n: int) -> np.ndarray:
    """``(n,)`` the bootstrap unit of each prompt index: equal keys share a unit, numbered in order of
    first appearance (no keys: every prompt its own unit)."""
    if keys is None:
        return np.arange(n)
    if len(keys) != n:
        raise ValueError(f"{len(keys)} prompt keys for {n} prompts")
    first: dict[str, int] = {}
    return np.array([first.setdefault(str(key), len(first)) for key in keys])


def _pooled(values: Sequence[float] | None, units: np.ndarray, m: int) -> Sequence[float] | None:
    """Per-prompt sums added up per unit (NaN-free sums stay sums; None stays None)."""
    if values is None:
        return None
    pooled = np.zeros(m)
    np.add.at(pooled, units, np.asarray(values, dtype=float))
    return pooled.tolist()


def _pool_copies(sums: PromptSums, units: np.ndarray, m: int) -> PromptSums:
    pooled = PromptSums(*(_pooled(getattr(sums, name), units, m)
                          for name in ("tokens", "cost", "log_likelihood", "regret", "overruled", "audited")))
    if not sums.passes:
        return pooled
    return PromptSums(pooled.tokens, pooled.cost, pooled.log_likelihood, pooled.regret, pooled.overruled, pooled.audited,
                      passes={kind: _pooled(values, units, m) for kind, values in sums.passes.items()})


def _common_keys(candidates: Sequence["Candidate"], reference: "PromptSums | None") -> Sequence[str] | None:
    """The prompt keys the settings carry (they were measured on the same prompts, so they must agree)."""
    found = [tuple(s.keys) for s in [c.sums for c in candidates] + ([reference] if reference is not None else [])
             if s.keys is not None]
    if not found:
        return None
    if any(keys != found[0] for keys in found):
        raise ValueError("the settings of a verdict were measured on different prompts (their prompt keys differ)")
    return found[0]


def prompts_words(n: int) -> str:
    """ "1 prompt", "40 prompts"."""
    return f"{n} prompt" if n == 1 else f"{n} prompts"


def _resample_counts(n: int, replicates: int, seed: int) -> np.ndarray:
    """(replicates, n) how often each prompt is drawn in each replicate (paired: one draw for all settings)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(replicates, n))
    counts = np.zeros((replicates, n))
    np.add.at(counts, (np.arange(replicates)[:, None], draws), 1.0)
    return counts


def _column(values: Sequence[float] | None, n: int) -> np.ndarray:
    return np.full(n, np.nan) if values is None else np.asarray(values, dtype=float)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _within(budget: Budget, exact: np.ndarray, ll_drop: np.ndarray, regret: np.ndarray, overrule: np.ndarray,
            unmeasured_ok: Sequence[str]) -> np.ndarray:
    """:meth:`Budget.admits_values` over arrays (NaN: not measured; tested equal to it)."""
    ok = np.ones(ll_drop.shape, dtype=bool)
    for name, limit, value in (("ll_drop", budget.max_ll_drop, ll_drop), ("overrule", budget.max_overrule, overrule),
                               ("regret", budget.max_regret, regret)):
        if limit is None:
            continue
        ok &= np.where(np.isnan(value), name in unmeasured_ok, value <= limit)
    return ok | exact


def _recommend(cost: np.ndarray, within: np.ndarray, simple: np.ndarray, margin: float) -> np.ndarray:
    """:func:`viasd_adapt.config.budget.recommend` per replicate (tested equal to it): (R, K) -> (R,)
    index, -1 where nothing qualifies."""
    inf = np.inf
    masked = np.where(within, cost, inf)
    cheapest = masked.argmin(axis=1)
    rows = np.arange(cost.shape[0])
    simple_masked = np.where(within & simple, cost, inf)
    best_simple = simple_masked.argmin(axis=1)
    has_simple = np.isfinite(simple_masked[rows, best_simple])
    tier_wins = masked[rows, cheapest] < (1.0 - margin) * simple_masked[rows, best_simple]
    use = np.where(simple[cheapest] | ~has_simple | tier_wins, cheapest, best_simple)
    return np.where(np.isfinite(masked[rows, cheapest]), use, -1)


@dataclass(frozen=True)
class Resampled:
    """Every setting of a verdict over the replicates (row 0: every prompt once, at the median prices).

    ``cost``, ``within``: ``(replicates + 1, settings)``; ``prompts``: distinct prompts (copies
    pooled), ``copies``: how many prompts repeated another one."""

    names: list[str]
    cost: np.ndarray
    within: np.ndarray
    prompts: int
    copies: int
    candidates: list[Candidate]
    priced: bool  # whether the prices were resampled beside the prompts


def _price_rounds(price_vectors: Sequence[np.ndarray] | None, k: int) -> list[np.ndarray] | None:
    if price_vectors is None or len(price_vectors) != k or any(v is None for v in price_vectors):
        return None
    rounds = {np.asarray(v).shape[0] for v in price_vectors}
    return [np.asarray(v, dtype=float) for v in price_vectors] if len(rounds) == 1 else None


def resample(candidates: Sequence[Candidate], budget: Budget, reference: PromptSums | None = None,
             replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED, unmeasured_ok: Sequence[str] = (),
             price_vectors: Sequence[np.ndarray] | None = None) -> Resampled:
    """Each setting's cost per token and budget status in every replicate of the paired bootstrap.

    ``price_vectors``: per setting, the run's price rounds it is priced by
    (:meth:`~viasd_adapt.bench.prices.PriceList.vectors`, the same rounds for every setting); with
    them and every setting's raw pass counts (``PromptSums.passes``), each replicate also resamples
    the price list's rounds (one draw for every setting, :func:`~viasd_adapt.bench.prices.price_replicates`)
    and prices the resampled passes with it: the price list's spread is carried into the verdict."""
    if not candidates:
        raise ValueError("a verdict needs at least one candidate")
    if replicates < 1:
        raise ValueError(f"the bootstrap needs at least one replicate, got {replicates}")
    n = len(candidates[0].sums)
    if n == 0 or any(len(c.sums) != n for c in candidates) or (reference is not None and len(reference) != n):
        raise ValueError("every candidate needs sums for the same, non-empty list of prompts")
    units = distinct_units(_common_keys(candidates, reference), n)
    m = int(units.max()) + 1
    copies = n - m
    if copies:  # copies of a prompt are one unit of evidence (module docstring)
        candidates = [Candidate(c.name, _pool_copies(c.sums, units, m), c.exact, c.simple) for c in candidates]
        reference = _pool_copies(reference, units, m) if reference is not None else None
        n = m
    names = [c.name for c in candidates]
    weights = np.vstack([np.ones(n), _resample_counts(n, replicates, seed)])  # row 0: all prompts once

    def per_token(values_of) -> np.ndarray:
        num = np.column_stack([_column(values_of(c.sums), n) for c in candidates])
        den = np.column_stack([_column(c.sums.tokens, n) for c in candidates])
        return _ratio(weights @ np.nan_to_num(num), weights @ den) + np.where(np.isnan(num).any(axis=0), np.nan, 0.0)

    rounds = _price_rounds(price_vectors, len(candidates))
    priced = rounds is not None and all(c.sums.passes for c in candidates)
    cost = _priced_cost(candidates, weights, rounds, replicates, seed, n) if priced else per_token(lambda s: s.cost)
    regret = per_token(lambda s: s.regret)
    if reference is not None and reference.log_likelihood is not None:
        ref_ll = _ratio(weights @ _column(reference.log_likelihood, n), weights @ _column(reference.tokens, n))
        ll_drop = ref_ll[:, None] - per_token(lambda s: s.log_likelihood)
    else:
        ll_drop = np.full(cost.shape, np.nan)
    audited = np.column_stack([_column(c.sums.audited, n) for c in candidates])
    overruled = np.column_stack([_column(c.sums.overruled, n) for c in candidates])
    overrule = _ratio(weights @ np.nan_to_num(overruled), weights @ np.nan_to_num(audited))
    overrule = np.where(np.isnan(audited).any(axis=0) | np.isnan(overruled).any(axis=0), np.nan, overrule)
    exact = np.array([c.exact for c in candidates])
    within = _within(budget, np.broadcast_to(exact, cost.shape), ll_drop, regret, overrule, unmeasured_ok)
    within &= np.isfinite(cost)
    return Resampled(names, cost, within, n, copies, list(candidates), priced)


def _priced_cost(candidates: Sequence[Candidate], weights: np.ndarray, rounds: list[np.ndarray], replicates: int,
                 seed: int, n: int) -> np.ndarray:
    """``(R + 1, K)`` cost per token: each replicate's resampled passes priced by its resampled prices."""
    from viasd_adapt.bench.prices import PASS_KINDS, price_replicates

    columns = []
    for candidate, vectors in zip(candidates, rounds):
        passes = np.column_stack([_column(candidate.sums.passes.get(kind, [0.0] * n), n) for kind in PASS_KINDS])
        prices = price_replicates(vectors, replicates, seed + 1)  # one draw of rounds for every setting
        tokens = weights @ _column(candidate.sums.tokens, n)
        columns.append(_ratio(((weights @ passes) * prices).sum(axis=1), tokens))
    return np.column_stack(columns)


def bootstrap_verdict(candidates: Sequence[Candidate], budget: Budget, reference: PromptSums | None = None,
                      margin: float = TIE_MARGIN, replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED,
                      level: float = DEFAULT_LEVEL, unmeasured_ok: Sequence[str] = (), stated: str | None = None,
                      price_vectors: Sequence[np.ndarray] | None = None) -> Uncertainty:
    """The paired bootstrap of a verdict (module docstring).

    ``reference``: the target's own greedy output on the same prompts (its log-likelihood and
    tokens), from which every LL drop is measured; without it the drop counts as not measured.
    ``stated``: the recommendation the caller states (default: this function's own on all prompts).
    ``price_vectors``: see :func:`resample`."""
    resampled = resample(candidates, budget, reference, replicates, seed, unmeasured_ok, price_vectors)
    names, cost, within, n, copies = resampled.names, resampled.cost, resampled.within, resampled.prompts, resampled.copies
    candidates = resampled.candidates
    simple = np.array([c.simple for c in candidates])
    use = _recommend(cost, within, simple, margin)
    stated_index = names.index(stated) if stated is not None else int(use[0])
    holds = float(np.mean(use[1:] == stated_index))
    admitted = {name: float(share) for name, share in zip(names, within[1:].mean(axis=0))}

    point_cost = np.where(within[0], cost[0], np.inf)
    tier_index = _argmin_where(point_cost, ~simple)
    simple_index = _argmin_where(point_cost, simple)
    gain_interval = None
    if tier_index is not None and simple_index is not None:
        gain = 1.0 - cost[1:, tier_index] / cost[1:, simple_index]
        tail = (1.0 - level) / 2
        gain_interval = (float(np.quantile(gain, tail)), float(np.quantile(gain, 1 - tail)))
    separated = gain_interval is None or not (gain_interval[0] <= margin <= gain_interval[1])
    determined = n >= MIN_PROMPTS and holds >= level and separated and stated_index >= 0
    recommended = names[stated_index] if stated_index >= 0 else None
    if not determined:
        recommended = _simpler(candidates, cost[0], within, level) or recommended
    return Uncertainty(n, replicates, level, names[stated_index] if stated_index >= 0 else None, recommended, determined,
                       holds, names[tier_index] if tier_index is not None else None,
                       names[simple_index] if simple_index is not None else None, gain_interval, admitted, margin,
                       copies)


def _argmin_where(cost: np.ndarray, allowed: np.ndarray) -> int | None:
    masked = np.where(allowed, cost, np.inf)
    index = int(masked.argmin())
    return index if np.isfinite(masked[index]) else None


def _simpler(candidates: Sequence[Candidate], cost: np.ndarray, within: np.ndarray, level: float) -> str | None:
    """The cheapest simple setting that is within budget in at least ``level`` of the replicates
    (an exact one always is); None when there is none."""
    robust = [i for i, c in enumerate(candidates)
              if c.simple and np.isfinite(cost[i]) and (c.exact or within[1:, i].mean() >= level)]
    return candidates[min(robust, key=lambda i: cost[i])].name if robust else None


def sums_from_json(data: Any) -> PromptSums | None:
    """A :class:`PromptSums` from its JSON object (a bench row's or tune point's ``per_prompt``);
    None for a missing or incomplete one (an older file: the verdict then states no uncertainty)."""
    if not isinstance(data, dict) or not data.get("tokens") or data.get("cost") is None:
        return None
    return PromptSums(**{key: data.get(key) for key in ("tokens", "cost", "log_likelihood", "regret", "overruled", "audited",
                                                         "keys", "passes")})


__all__ = ["Candidate", "DEFAULT_LEVEL", "DEFAULT_REPLICATES", "MIN_PROMPTS", "PromptSums", "Resampled", "Uncertainty",
           "bootstrap_verdict", "resample", "distinct_units", "prompt_key", "prompts_words", "sums_from_json"]
