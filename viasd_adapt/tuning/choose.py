"""The choice: measured points, the cheapest within the budget, and what ``tuned.json`` records.

:class:`Point` is one measured candidate, :class:`TuneResult` a sweep's points and its choice
(:func:`choose`, confirmed by the paired bootstrap over prompts in :func:`judged`), judged again
under another budget or other forward costs without running anything; :func:`artifact_of` is the
choice as the :class:`~viasd_adapt.config.tuned.TunedSettings` artifact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from viasd_adapt.bench.costs import ForwardCosts, PassCounts, full_equivalent
from viasd_adapt.bench.exact_first import AR_RUNG, EXACT_RUNG, EXACT_TIER_RUNG, LENIENT_RUNG, LOSSY_TIER_RUNG, Decision, decide
from viasd_adapt.bench.prices import PriceList
from viasd_adapt.bench.projection import CostModel, project_costs_per_mask, repriced_prompt_sums
from viasd_adapt.config.budget import TIE_MARGIN, Budget, recommend  # Budget: the one budget rule, shared with the bench's verdict
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.config.tuned import PLAIN_DECODING_CHOICE, PROMPT_LOOKUP_DRAFTER, TunedSettings, plain_decoding_cost
from viasd_adapt.core.settings import FIXED_SUFFIX, Mode, TierSettings
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.routing.hardware import hardware_stamp
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.tuning.grid import FAMILIES, MEASURED_ON, SIMPLE_FAMILIES, TIER_FAMILIES


@dataclass
class Point:
    """One measured candidate."""

    family: str  # one of tuning.grid.FAMILIES: its settings' row name ("none", "lossy-fixed", "lossy", ...)
    settings: TierSettings
    mask: str | None  # the mask's source, for tier modes
    full_equivalent: float
    ll_drop: float
    overrule: float | None
    tokens: int
    metrics: dict = field(default_factory=dict)
    regret: float | None = None
    passes: dict = field(default_factory=dict)  # per token: draft, slim, full, resumed (PassCounts)
    # per calibration prompt: tokens, cost, raw passes, LL, regret, overrules, the reference's LL
    # (what the choice's bootstrap over prompts resamples); None in files written before it existed
    per_prompt: dict | None = None

    @property
    def exact(self) -> bool:
        return self.settings.mode.is_exact

    def to_dict(self) -> dict:
        data = asdict(self)
        data["settings"] = self.settings.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Point":
        """A point back from a tune file (its families in today's names: :class:`~viasd_adapt.config.tune_points.TunePoints`
        reads older files so). A point of a fixed family (``-fixed``) ran the tier on every cycle:
        files written before the adaptive tier existed do not say ``"adaptive": false``, and reading
        its absence as on would label (and write) a point measured fixed as adaptive."""
        fields = {k: v for k, v in data.items() if k != "settings"}
        settings = dict(data["settings"])
        if str(data.get("family", "")).endswith(FIXED_SUFFIX):
            settings.setdefault("adaptive", False)
        return cls(settings=TierSettings(**settings), **fields)


@dataclass
class TuneResult:
    """A sweep's points and what is written: ``chosen``. ``pooled`` is the point estimate's choice
    (on all prompts at once) when the bootstrap left it undetermined and the simpler ``chosen`` is
    written instead (:func:`judged`); None when the two agree."""

    points: list[Point]
    chosen: Point
    budget: Budget
    costs: dict[str, dict]
    masks: dict[str, dict]
    seconds: float
    pooled: Point | None = None
    prices: dict | None = None  # the sweep's one price list (PriceList.to_dict()); None in older files
    decision: Decision | None = None  # the exact-first ladder with the target alone (exact_first)
    drafting: Decision | None = None  # the same ladder without it: the drafting setting written

    @property
    def point_estimate(self) -> Point:
        """The cheapest point within budget on all prompts pooled (what the verdict's figures describe)."""
        return self.pooled if self.pooled is not None else self.chosen

    @property
    def price_list(self) -> PriceList | None:
        return PriceList.from_dict(self.prices) if self.prices else None

    def best(self, family: str) -> Point | None:
        within = [p for p in self.points if p.family == family and self.budget.admits(p)]
        return min(within, key=lambda p: p.full_equivalent) if within else None

    def relative_to(self, folder: str | Path) -> "TuneResult":
        """The same result with every mask named relative to ``folder`` (where its ``tuned.json`` is
        written): an artifact must not hold the absolute paths of the machine that made it. A mask
        outside ``folder`` keeps only its file name (it is looked up beside the tuned file)."""
        names = {name: portable_name(name, folder) for name in self.masks}
        rename = lambda name: names.get(name, name) if name is not None else None  # noqa: E731
        points = [replace(p, mask=rename(p.mask)) for p in self.points]
        chosen = points[self.points.index(self.chosen)]
        pooled = points[self.points.index(self.pooled)] if self.pooled is not None else None
        costs = {(rename(k) if k in names else k): v for k, v in self.costs.items()}
        prices = self.price_list.renamed(names).to_dict() if self.price_list is not None else None
        return replace(self, points=points, chosen=chosen, costs=costs, masks={rename(k): v for k, v in self.masks.items()},
                       pooled=pooled, prices=prices)

    def rechosen(self, budget: Budget) -> "TuneResult":
        """The same measurements judged under another budget (nothing is run again)."""
        return judged(self.points, budget, self.costs, self.masks, self.seconds, prices=self.price_list)

    def repriced(self, costs: dict[str | None, ForwardCosts], prices: PriceList | None = None) -> "TuneResult":
        """The same pass counts priced with per-forward costs measured again (keyed by mask name,
        None for the runs without a slim verifier): timings are the only noisy part of a sweep.
        ``prices``: the price list ``costs`` are the medians of (its spread goes into the verdict)."""
        points = []
        for point in self.points:
            if not point.passes:
                raise ConfigError("these points carry no pass counts (an older tune file); run the sweep again")
            point_costs = costs[point.mask if point.family in TIER_FAMILIES else None]
            priced = full_equivalent(point_costs, PassCounts(**point.passes))
            points.append(replace(point, full_equivalent=priced, per_prompt=repriced_prompt_sums(point.per_prompt, point_costs)))
        return judged(points, self.budget, {str(k): v.to_dict() for k, v in costs.items()}, self.masks, self.seconds,
                      prices=prices)


def portable_name(name: str, folder: str | Path) -> str:
    """``name`` (a mask's source) as an artifact records it: relative to ``folder`` when it is a file
    inside it, its file name when it is a file elsewhere, else as is (a label such as a fallback)."""
    from viasd_adapt.io import relative_name

    path = Path(name)
    if not path.is_absolute() or not path.is_file():
        return name
    return relative_name(path, folder)


def choose(points: list[Point], budget: Budget, margin: float = TIE_MARGIN) -> Point:
    """The cheapest point within ``budget``; an exact mode wins ties. Exact modes always qualify.

    A slim-tier point (lossless cascade, VIA-SD) is chosen only when it beats the cheapest simpler
    point (plain SD, lenient) by more than ``margin``: within timing noise the simpler setting,
    which needs no mask and no slim verifier, is the better recommendation."""
    admitted = [p for p in points if budget.admits(p)]
    _, chosen = recommend(admitted, cost=lambda p: p.full_equivalent, is_simple=lambda p: p.family in SIMPLE_FAMILIES,
                          margin=margin, tie_break=lambda p: not p.exact)
    return chosen


def judged(points: list[Point], budget: Budget, costs: dict[str, dict], masks: dict[str, dict],
           seconds: float, prices: PriceList | dict | None = None) -> TuneResult:
    """The result of a sweep, with what tuned.json is to record: the exact-first ladder's choice
    (:mod:`viasd_adapt.bench.exact_first`) over every point and the target alone, each priced by the
    sweep's one price list (``prices``), its rounds resampled beside the calibration prompts.

    ``chosen`` is the drafting setting the ladder picks without the target alone (written as the
    settings, also under the choice ``ar``); ``pooled`` the cheapest point within the budget when
    the ladder wrote another (the verdict names both). Points without per-prompt sums (an older
    file) are judged on their pooled costs alone."""
    if isinstance(prices, dict):
        prices = PriceList.from_dict(prices)
    drafting = ladder(points, budget, costs, prices, with_target_alone=False)
    decision = ladder(points, budget, costs, prices, with_target_alone=True)
    names = point_names(points)
    if decision is not None and decision.chosen in names:  # a drafting setting climbed over the target alone
        chosen = points[names.index(decision.chosen)]
    elif drafting is not None:  # the target alone is written; these settings serve a run that drafts anyway
        chosen = points[names.index(drafting.chosen)]
    else:  # nothing within the budget: the cheapest exact point (exact points always are)
        chosen = choose(points, budget)
    cheapest = points[names.index(drafting.cheapest)] if drafting is not None and drafting.cheapest in names else chosen
    return TuneResult(points, chosen, budget, costs, masks, seconds, cheapest if cheapest is not chosen else None,
                      prices.to_dict() if prices is not None else None, decision, drafting)


#: The ladder's rung of each tune family (:mod:`viasd_adapt.bench.exact_first`).
FAMILY_RUNGS = {"none": EXACT_RUNG, "lossless-fixed": EXACT_TIER_RUNG, "lossless": EXACT_TIER_RUNG,
                "lenient": LENIENT_RUNG, "lossy-fixed": LOSSY_TIER_RUNG, "lossy": LOSSY_TIER_RUNG}


def ladder(points: list[Point], budget: Budget, costs: dict[str, dict], prices: PriceList | None,
           with_target_alone: bool) -> Decision | None:
    """The exact-first decision over ``points`` (and, ``with_target_alone``, plain decoding priced by
    the same list): resampled over prompts and price rounds where the points carry their per-prompt
    sums, else on the pooled costs alone."""
    from viasd_adapt.bench.uncertainty import Candidate, PromptSums, resample, sums_from_json

    names = point_names(points)
    sums = [sums_from_json(p.per_prompt) for p in points]
    plain = plain_decoding_cost(costs) if with_target_alone else None
    if not points or any(s is None for s in sums) or len({len(s) for s in sums}) != 1:
        return decide(_pooled_only(points, names, budget, plain), _rungs(points, plain))
    first = points[0].per_prompt
    reference = PromptSums(first["reference_tokens"], first["reference_tokens"], first["reference_ll"],
                           keys=first.get("keys")) if first.get("reference_ll") is not None else None
    candidates = [Candidate(name, s, exact=p.exact, simple=p.family in SIMPLE_FAMILIES)
                  for name, p, s in zip(names, points, sums)]
    vectors = [prices.vectors(p.mask if p.family in TIER_FAMILIES else None) for p in points] if prices else None
    if plain is not None and reference is not None:
        tokens = list(reference.tokens)
        alone = PromptSums(tokens, [t * plain for t in tokens], reference.log_likelihood, [0.0] * len(tokens),
                           keys=reference.keys, passes={"single": tokens})
        candidates.append(Candidate(PLAIN_DECODING_CHOICE, alone, exact=True, simple=True))
        vectors = vectors + [prices.vectors(None)] if vectors is not None else None
    elif plain is not None:
        return decide(_pooled_only(points, names, budget, plain), _rungs(points, plain))
    resampled = resample(candidates, budget, reference, price_vectors=vectors)
    return decide(resampled, _rungs(points, plain))


def _rungs(points: list[Point], plain: float | None) -> list[int]:
    return [FAMILY_RUNGS.get(p.family, EXACT_RUNG) for p in points] + ([AR_RUNG] if plain is not None else [])


def _pooled_only(points: list[Point], names: list[str], budget: Budget, plain: float | None):
    """The points as one replicate (their pooled costs): an older file's points carry no per-prompt sums."""
    import numpy as np

    from viasd_adapt.bench.uncertainty import Candidate, PromptSums, Resampled

    cost = [p.full_equivalent for p in points] + ([plain] if plain is not None else [])
    within = [budget.admits(p) for p in points] + ([True] if plain is not None else [])
    candidates = [Candidate(n, PromptSums([1.0], [c]), exact=p.exact, simple=False) for n, p, c in zip(names, points, cost)]
    if plain is not None:
        candidates.append(Candidate(PLAIN_DECODING_CHOICE, PromptSums([1.0], [plain]), exact=True, simple=True))
    return Resampled(names + ([PLAIN_DECODING_CHOICE] if plain is not None else []), np.array([cost], dtype=float),
                     np.array([within]), 0, 0, candidates, False)


def choice_uncertainty(result: TuneResult):
    """The paired bootstrap over calibration prompts of the tuner's choice
    (:mod:`viasd_adapt.bench.uncertainty`): every point resampled on the same prompts, judged by the same
    budget and rule as :func:`choose`. None when a point carries no per-prompt sums (an older file)."""
    from viasd_adapt.bench.uncertainty import Candidate, PromptSums, bootstrap_verdict, sums_from_json

    sums = [sums_from_json(p.per_prompt) for p in result.points]
    if not sums or any(s is None for s in sums) or len({len(s) for s in sums}) != 1:
        return None
    first = result.points[0].per_prompt
    reference = PromptSums(first["reference_tokens"], first["reference_tokens"], first["reference_ll"],
                           keys=first.get("keys")) if first.get("reference_ll") is not None else None
    names = point_names(result.points)
    candidates = [Candidate(name, s, exact=p.exact, simple=p.family in SIMPLE_FAMILIES)
                  for name, p, s in zip(names, result.points, sums)]
    return bootstrap_verdict(candidates, result.budget, reference,
                             stated=names[result.points.index(result.point_estimate)])


def family_and_settings(family: str, settings: TierSettings) -> str:
    """ "lenient: lenient a=0.4", or the family alone where its settings say nothing more ("none", not
    "none: none")."""
    label = settings_label(settings)
    return family if label == family else f"{family}: {label}"


def point_names(points: list[Point]) -> list[str]:
    """A readable, unique name per point ("lenient a=0.4", "lossy alpha1=0.3 ... on mask-r0.45.json")."""
    names = []
    for point in points:
        name = family_and_settings(point.family, point.settings) + (f" on {Path(point.mask).name}" if point.mask else "")
        names.append(name if name not in names else f"{name} #{len(names)}")
    return names


def load_result(data: dict, source: str = "the tune JSON") -> TuneResult:
    """A result back from ``viasd tune --json``'s file (for judging it again under another budget);
    a file of another shape is refused naming ``source`` and what is missing."""
    try:
        tuned = TunedSettings.from_json(data["tuned"], f"{source} (its 'tuned' part)")
        points = [Point.from_dict(p) for p in data["points"]]
        budget = Budget(tuned.budget.max_ll_drop, tuned.budget.max_overrule, tuned.budget.max_regret)
        report = tuned.report
        if report.seconds is None:
            raise KeyError("seconds")
        return judged(points, budget, report.costs, report.masks, report.seconds, prices=report.prices)
    except KeyError as err:
        raise ConfigError(f"{source} is not a complete viasd tune --json file: it has no {err.args[0]!r}") from None
    except (TypeError, AttributeError) as err:
        raise ConfigError(f"{source} is not a viasd tune --json file: {err}") from None


def pareto(points: list[Point], key: str = "ll_drop") -> list[Point]:
    """The points no other point beats on both cost and ``key`` (a fidelity field), by cost."""
    front, best = [], float("inf")
    for point in sorted(points, key=lambda p: (p.full_equivalent, getattr(p, key))):
        if getattr(point, key) < best:
            front.append(point)
            best = getattr(point, key)
    return front


def artifact_of(result: TuneResult, pair: LoadedPair, masks_dir: Path | None = None,
                folder: str | Path | None = None) -> TunedSettings:
    """The tuned-settings artifact of a result (the chosen point, its evidence, the target's
    fingerprint); with ``folder`` (where it will be saved), every mask is named relative to it."""
    chosen = result.chosen
    mask_file = chosen.mask if chosen.mask and Path(chosen.mask).is_file() else None
    if folder is not None:
        mask_file = portable_name(mask_file, folder) if mask_file else None
        result = result.relative_to(folder)
        chosen = result.chosen
    elif mask_file:
        mask_file = Path(mask_file).name
    mask_bits = result.masks[chosen.mask]["bits"] if chosen.mask else None
    best = {family: (p.to_dict() if p else None) for family in FAMILIES for p in [result.best(family)]}
    return TunedSettings(
        settings=chosen.settings,
        choice=PLAIN_DECODING_CHOICE if target_alone_cheapest(result) else chosen.family,
        mask_bits=mask_bits,
        fingerprint=model_fingerprint(pair.target),
        drafter=drafter_record(pair),
        budget=asdict(result.budget),
        measured=chosen.to_dict(),
        measured_on=MEASURED_ON,
        hardware=hardware_stamp(pair.target) if pair.target is not None else None,
        report={"best_within_budget": best, "costs": result.costs, "masks": result.masks, "seconds": round(result.seconds, 1),
                "mask_file": mask_file,
                "points": len(result.points),
                **({"prices": result.prices} if result.prices is not None else {}),
                **({"why": result.decision.reason()} if result.decision is not None else {})},
    )


def drafter_record(pair: LoadedPair):
    """What tuned.json records as the drafter the settings were measured with: the drafter model's
    fingerprint, or the prompt-lookup drafter by name (:mod:`viasd_adapt.config.tuned`)."""
    if pair.draft is not None:
        return model_fingerprint(pair.draft)
    return PROMPT_LOOKUP_DRAFTER if pair.lookup is not None else None


def projected(result: TuneResult, model: CostModel, gamma: int) -> TuneResult:
    """The sweep's pass counts priced with a :class:`~viasd_adapt.bench.projection.CostModel` (another
    machine's forward costs), and the choice made again under them."""
    masks = {name: RoutingMask.from_bits(info["bits"]) for name, info in result.masks.items()}
    return result.repriced(project_costs_per_mask(model, {None: None, **masks}, gamma + 1))


def ar_full_equivalent(result: TuneResult) -> float | None:
    """What plain autoregressive decoding costs in the tune's own units: one 1-token target pass per
    token, priced by the forward costs measured in the same run (c_full / c_full_block)."""
    return plain_decoding_cost(result.costs)


def target_alone_cheapest(result: TuneResult) -> bool:
    """Whether the exact-first ladder keeps plain decoding (:func:`judged`): no drafting setting saves
    more than the margin over it in enough resamples. Then ``tuned.json`` records the choice ``ar``
    (the chosen point's settings stay, for a run that asks to draft anyway)."""
    if result.decision is not None:
        return result.decision.chosen == PLAIN_DECODING_CHOICE
    plain = ar_full_equivalent(result)
    return plain is not None and plain < result.chosen.full_equivalent



def settings_label(settings: TierSettings) -> str:
    mode = settings.mode
    adaptive = " adaptive" if settings.adapts else ""
    if mode is Mode.LENIENT:
        return f"lenient a={settings.lenience}"
    if mode is Mode.LOSSY:
        return f"lossy alpha1={settings.alpha1} alpha2={settings.alpha2} gates={settings.greedy_gates}{adaptive}"
    return mode.value + adaptive




def adaptive_candidates(fixed: TuneResult, masks: dict[str, RoutingMask]):
    """(family, settings, mask name) of the adaptive twins (module docstring): per mask, of the
    lossless point, and of the cheapest lossy point within the budget (if any is)."""
    for name in masks:
        on_mask = [p for p in fixed.points if p.mask == name]
        lossless = next((p for p in on_mask if p.family == "lossless-fixed"), None)
        if lossless is not None:
            yield "lossless", lossless.settings.with_(adaptive=True), name
        lossy = [p for p in on_mask if p.family == "lossy-fixed" and fixed.budget.admits(p)]
        if lossy:
            best = min(lossy, key=lambda p: p.full_equivalent)
            yield "lossy", best.settings.with_(adaptive=True), name


__all__ = ["Point", "adaptive_candidates", "TuneResult", "ar_full_equivalent", "artifact_of", "target_alone_cheapest", "choice_uncertainty", "choose", "drafter_record",
           "judged", "ladder", "load_result", "pareto", "point_names", "portable_name", "projected", "settings_label"]
