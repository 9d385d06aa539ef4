"""Measuring: every candidate of the sweep on every calibration prompt, its cost and fidelity.

:func:`tune` is ``viasd tune``'s sweep (:mod:`viasd_adapt.tuning.tune`): the reference (the target's
greedy output), the forward costs per mask, then each candidate through the engine's loop
(:data:`~viasd_adapt.tuning.grid.MEASURED_ON`) with its own
:class:`~viasd_adapt.engine.context.RunContext`: its settings, its mask, and the evidence its
adaptive tier starts from (none for the fixed points: a ``tuned.json`` already beside the mask must
not steer the sweep; the fixed points themselves for the adaptive twins). Nothing on the pair changes.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from viasd_adapt.bench.costs import ForwardCosts, PassCounts, full_equivalent
from viasd_adapt.bench.prices import PriceList, measure_prices
from viasd_adapt.bench.fidelity import score_output
from viasd_adapt.bench.measure import RunMeter
from viasd_adapt.bench.prompt_sets import BenchPrompt
from viasd_adapt.bench.uncertainty import prompt_key
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.engine.context import resolve_context
from viasd_adapt.errors import ConfigError
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.prompts.chat import encode_prompt
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.tuning.choose import Point, TuneResult, adaptive_candidates, artifact_of, judged
from viasd_adapt.tuning.grid import MEASURED_ON, TuneConfig, fixed_candidates, masks_for_ratios


def tune(pair: LoadedPair, prompts: Sequence[str | BenchPrompt], config: TuneConfig | None = None, *,
         progress: Callable[[str], None] | None = None, bar: Callable[[int], object] | None = None,
         stop_when: Callable[[], bool] | None = None, **options: Any) -> TuneResult:
    """Measures every candidate and chooses the cheapest within ``config.budget`` (module docstring
    of :mod:`viasd_adapt.tuning.tune`); ``config.adaptive=False`` measures no adaptive twin.

    ``prompts``: encoded prompts (Spec-Bench's calibration split,
    :func:`viasd_adapt.bench.prompt_sets.tune_spec_bench_prompts`), or texts (held-out snippets,
    :func:`viasd_adapt.prompts.splits.tune_snippets`) put through the chat template per ``config.chat``.
    ``options``: :class:`TuneConfig`'s fields, when no ``config`` is given. ``progress`` says what
    is being done; ``bar(total)`` makes a progress bar of the candidates. ``stop_when()``, asked
    before each setting after the first (plain SD), ends the sweep early when it answers True (a
    time budget spent): the choice is made among the settings measured, and ``progress`` says so."""
    if config is None:
        config = TuneConfig(**options)
    elif options:
        raise ConfigError(f"tune() takes a TuneConfig or its fields, not both (got {', '.join(sorted(options))})")
    say = progress or (lambda message: None)
    started = time.perf_counter()
    if not prompts:
        raise ConfigError("tuning needs at least one calibration prompt")
    prompt_ids = [p.ids if isinstance(p, BenchPrompt) else encode_prompt(pair.tokenizer, p, config.chat) for p in prompts]
    masks = masks_for_ratios(pair, config.ratios, config.search_steps, config.save_masks_to, say, config.exits,
                             config.mask_files)
    sweep = Sweep.prepare(pair, prompt_ids, masks, config, say)
    candidates = list(fixed_candidates(masks, config.grid, config.base, config.sampling.greedy))
    ticker = bar(len(candidates) + (2 * len(masks) if config.adaptive else 0)) if bar is not None else None
    try:
        return sweep.run(candidates, ticker, started, stop_when)
    finally:
        if ticker is not None:
            ticker.close()


@dataclass(frozen=True)
class Reference:
    """The target's own greedy output on the calibration prompts: what fidelity is measured against."""

    ll_per_token: float
    each: dict[str, list[float]]  # per prompt: "reference_ll", "reference_tokens"

    @classmethod
    def measure(cls, pair: LoadedPair, prompt_ids: list[list[int]], config: TuneConfig) -> "Reference":
        ll, tokens = 0.0, 0
        each: dict[str, list[float]] = {"reference_ll": [], "reference_tokens": []}
        for index, ids in enumerate(prompt_ids):
            request = RunRequest.tiered(ids, config.max_new_tokens, config.base.with_(mode=Mode.NONE),
                                        seed=config.seed + index, stop_at_eos=False)
            score = score_output(pair.target, ids, frameworks.run("ar", pair, request).tokens)
            ll, tokens = ll + score.log_likelihood, tokens + score.tokens
            each["reference_ll"].append(score.log_likelihood)
            each["reference_tokens"].append(score.tokens)
        return cls(ll / max(1, tokens), each)


@dataclass(frozen=True)
class Runs:
    """One candidate's runs over every calibration prompt."""

    outputs: list[list[int]]
    merged: TierMetrics
    each: list[TierMetrics]
    singles: list[int]  # per prompt: target passes that fed one token (priced as one-token passes)


@dataclass(frozen=True)
class Sweep:
    """What every candidate of one sweep is measured against: the pair, the calibration prompts,
    the masks, the reference and the sweep's one price list (:mod:`viasd_adapt.bench.prices`), with
    its medians per mask (``costs``: the target's and drafter's prices the same for every mask)."""

    pair: LoadedPair
    prompt_ids: list[list[int]]
    masks: dict[str, RoutingMask]
    config: TuneConfig
    reference: Reference
    prices: PriceList
    say: Callable[[str], None]

    @property
    def costs(self) -> dict[str | None, ForwardCosts]:
        return self.prices.costs_by_mask()

    @classmethod
    def prepare(cls, pair: LoadedPair, prompt_ids: list[list[int]], masks: dict[str, RoutingMask], config: TuneConfig,
                say: Callable[[str], None]) -> "Sweep":
        say(f"reference: the target's greedy output on {len(prompt_ids)} calibration prompts x {config.max_new_tokens} tokens")
        reference = Reference.measure(pair, prompt_ids, config)
        say("timing single forwards of every kind, interleaved: the sweep's one price list")
        prices = mask_prices(pair, masks, prompt_ids[0], config.grid.gamma, config.cost_repeats)
        return cls(pair, prompt_ids, masks, config, reference, prices, say)

    @property
    def keys(self) -> list[str]:
        """Each calibration prompt's key: copies of a prompt are counted once."""
        return [prompt_key(ids) for ids in self.prompt_ids]

    def run(self, candidates: list[tuple[str, TierSettings, str | None]], ticker, started: float,
            stop_when: Callable[[], bool] | None = None) -> TuneResult:
        """Every fixed candidate, then (``config.adaptive``) the adaptive twins of the best fixed
        points, starting from those points as the written tuned.json will give them; ``stop_when``
        (:func:`tune`) can end either list early."""
        def measured(family: str, settings: TierSettings, mask_name: str | None, evidence=None) -> Point:
            point = self.measure(family, settings, mask_name, evidence)
            if ticker is not None:
                ticker.update(1)
            return point

        points = self.measured_until(candidates, measured, stop_when)
        cost_record = {str(k): v.to_dict() for k, v in self.costs.items()}
        mask_record = {name: {"bits": m.bits(), "skipped": list(m.skipped), "s1": m.first_skipped}
                       for name, m in self.masks.items()}
        budget = self.config.budget
        if self.config.adaptive:
            fixed = judged(points, budget, cost_record, mask_record, time.perf_counter() - started, prices=self.prices)
            self.say("the adaptive tier: the lossless point and the cheapest lossy point within budget of each mask, adaptive")
            evidence = artifact_of(fixed, self.pair)
            twins = [(*candidate, evidence) for candidate in adaptive_candidates(fixed, self.masks)]
            if len(points) == len(candidates):  # a sweep stopped early measures no twin
                points += self.measured_until(twins, measured, stop_when, first=False)
        return judged(points, budget, cost_record, mask_record, time.perf_counter() - started, prices=self.prices)

    def measured_until(self, candidates: list[tuple], measured: Callable[..., Point], stop_when: Callable[[], bool] | None,
                       first: bool = True) -> list[Point]:
        """``measured(*candidate)`` for each candidate until ``stop_when()`` says the time is spent (asked
        before each but the first of the sweep, ``first``), said in one line."""
        points: list[Point] = []
        for index, candidate in enumerate(candidates):
            if stop_when is not None and (index > 0 or not first) and stop_when():
                self.say(f"time budget: the sweep stops here, {len(candidates) - index} of its {len(candidates)} "
                         "settings not measured; the choice is made among those measured")
                break
            points.append(measured(*candidate))
        return points

    def runs(self, settings: TierSettings, mask_name: str | None, evidence: TunedSettings | None = None) -> Runs:
        """Every calibration prompt through the engine, with the candidate's own run context (unwatched:
        the sweep tries tolerances far from the defaults on purpose, and the drafter-quality monitor
        would read a loose gate 1 as a junk drafter)."""
        pair, config = self.pair, self.config
        context = resolve_context(pair.target, settings, mask=self.masks[mask_name] if mask_name else pair.routing,
                                  evidence=evidence, drafter=pair.drafter, watch_drafter=False)
        merged, outputs, each, singles = TierMetrics(), [], [], []
        with RunMeter(pair.target, None) as meter:
            for index, ids in enumerate(self.prompt_ids):
                request = RunRequest.of(context, ids, config.max_new_tokens, sampling=config.sampling,
                                        seed=config.seed + index, stop_at_eos=False)
                measured = meter.start()
                out = frameworks.run(MEASURED_ON, pair, request)
                meter.stop()
                outputs.append(out.tokens)
                each.append(out.metrics)
                singles.append(measured.single_passes)
                merged = merged.merge(out.metrics)
        return Runs(outputs, merged, each, singles)

    def measure(self, family: str, settings: TierSettings, mask_name: str | None,
                evidence: TunedSettings | None = None) -> Point:
        """One candidate on every calibration prompt: its cost, fidelity and per-prompt sums. (The
        sampling overrule of a lossy point is its audit's, which runs the tier on every cycle: for an
        adaptive point that is an upper bound, since its untiered cycles are exact.)"""
        runs = self.runs(settings, mask_name, evidence)
        metrics = runs.merged
        scores = [score_output(self.pair.target, ids, out) for ids, out in zip(self.prompt_ids, runs.outputs)]
        ll = sum(s.log_likelihood for s in scores)
        matches, tokens = sum(s.argmax_matches for s in scores), sum(s.tokens for s in scores)
        regret = sum(s.regret for s in scores)
        audit_each = None
        if self.config.sampling.greedy or settings.mode.is_exact:
            overrule = 0.0 if settings.mode.is_exact else 1.0 - matches / max(1, tokens)
        elif settings.mode is Mode.LENIENT:
            overrule, audit_each = metrics.overrule_rate, runs.each
        else:
            audited = self.runs(settings.with_(mode=Mode.AUDIT), mask_name)
            overrule, audit_each = audited.merged.overrule_rate, audited.each
        costs = self.prices.costs(mask_name)
        counts = PassCounts.of_metrics(metrics, metrics.committed, sum(runs.singles))
        per_prompt = (prompt_sums(scores, runs.each, audit_each, settings.mode.is_exact, costs, runs.singles)
                      | self.reference.each | {"keys": self.keys})
        return Point(family, settings, mask_name, full_equivalent(costs, counts),
                     self.reference.ll_per_token - ll / max(1, tokens), overrule, tokens,
                     {"rejection_rate": metrics.rejection_rate, "mean_accepted_length": metrics.mean_accepted_length,
                      "slim_tokens": metrics.slim_tokens, "escalated_cycles": metrics.escalated_cycles,
                      "cycles": metrics.cycles, "tier_cycles": metrics.tier_cycles},
                     regret / max(1, tokens), asdict(counts), per_prompt)


def mask_prices(pair: LoadedPair, masks: dict[str, RoutingMask], prompt_ids: list[int], gamma: int,
                repeats: int) -> PriceList:
    """The sweep's one price list: the target's, the drafter's and every mask's forwards, timed in the
    same rounds on one context (:func:`~viasd_adapt.bench.prices.measure_prices`)."""
    context = prompt_ids[:64] + list(range(1, 33))
    slims = {name: SlimVerifier(pair.target, mask) for name, mask in masks.items()}
    return measure_prices(pair.target, pair.draft, slims, context, gamma, repeats)


def mask_costs(pair: LoadedPair, masks: dict[str, RoutingMask], prompt_ids: list[int], gamma: int,
               repeats: int) -> dict[str | None, ForwardCosts]:
    """Per-forward costs without a slim verifier (key None) and with each mask: the medians of one
    price list (:func:`mask_prices`), so the target's prices are the same under every key."""
    return mask_prices(pair, masks, prompt_ids, gamma, repeats).costs_by_mask()


def prompt_sums(scores, each: list[TierMetrics], audit_each: list[TierMetrics] | None, exact: bool,
                 costs: ForwardCosts, singles: list[int] | None = None) -> dict:
    """One point's sums per calibration prompt (:class:`Point.per_prompt`). The overrule is what
    :meth:`Sweep.measure` measures: the greedy overrule (tokens that are not the target's argmax), 0 for
    an exact mode, or the audit's overrule probabilities where the run was audited."""
    singles = singles if singles is not None else [0] * len(each)
    passes = [PassCounts.of_metrics(m, 1, single) for m, single in zip(each, singles)]  # raw counts: "per 1 token"
    if exact:
        overruled = [0.0] * len(scores)
    elif audit_each is None:
        overruled = [float(s.tokens - s.argmax_matches) for s in scores]
    else:
        overruled = [float(sum(m.audit_overrule)) for m in audit_each]
    return {
        "tokens": [s.tokens for s in scores],
        "cost": [full_equivalent(costs, p) for p in passes],
        "passes": {kind: [getattr(p, kind) for p in passes] for kind in ("draft", "slim", "full", "resumed", "single")},
        "log_likelihood": [s.log_likelihood for s in scores],
        "regret": [s.regret for s in scores],
        "overruled": overruled,
        "audited": [float(s.tokens) for s in scores] if audit_each is None else [float(m.audited) for m in audit_each],
    }


__all__ = ["Reference", "Runs", "Sweep", "mask_costs", "mask_prices", "prompt_sums", "tune"]
