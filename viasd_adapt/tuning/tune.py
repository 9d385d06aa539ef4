"""``viasd tune``: the cheapest setting that meets a fidelity budget, VIA-SD and the baselines alike.

For one pair, every candidate runs the same speculative loop (:mod:`viasd_adapt.engine`, the loop
the HF adapter's tiered modes run) on calibration prompts kept apart from the bench's:

* untiered lossless SD (mode ``none``) and the lossless cascade (exact by construction);
* the lenient baseline for each tolerance ``a``;
* lossy VIA-SD for each routing mask (one DIMR mask per skip ratio r, reused or searched), each
  ``alpha1`` and ``alpha2``, and each greedy gate reading;
* the adaptive tier (:mod:`viasd_adapt.core.adaptive`; off with ``adaptive=False``): for each mask,
  the adaptive twin of the lossless cascade and of the cheapest lossy point within the budget
  (families ``lossless-adaptive`` and ``viasd-adaptive``). They are measured after the fixed points,
  starting from those points as a ``tuned.json`` would give them (its prices and priors,
  :mod:`viasd_adapt.engine.priors`), so they run as they will run from the written file. The fixed
  families run the tier on every cycle (``adaptive=False``, recorded so in tuned.json).

Each candidate gets a **cost**, full-equivalent passes per token (:mod:`viasd_adapt.bench.costs`,
per-forward costs measured once per mask), and a **fidelity**: the target's log-likelihood drop per
token from its own greedy output on the same prompts, and the overrule rate (greedy: the share of
tokens that are not the target's argmax given their prefix, exactly the audit's greedy overrule;
sampling: the audit run in shadow). The chosen setting is the cheapest within the budget; when
that is the lenient baseline or plain SD the tuner says so and writes that choice. Both Pareto
frontiers (cost vs log-likelihood drop) go into one PNG.
"""

from __future__ import annotations

import itertools
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence


from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.config.budget import TIE_MARGIN, Budget, recommend  # Budget: the one budget rule, shared with the bench's verdict
from viasd_adapt.bench.costs import ForwardCosts, PassCounts, full_equivalent, measure_forward_costs
from viasd_adapt.bench.fidelity import score_output
from viasd_adapt.bench.measure import RunMeter
from viasd_adapt.bench.projection import CostModel, project_costs_per_mask, repriced_prompt_sums
from viasd_adapt.bench.prompt_sets import BenchPrompt
from viasd_adapt.bench.uncertainty import prompt_key
from viasd_adapt.prompts.chat import encode_prompt
from viasd_adapt.core.settings import check_real
from viasd_adapt.errors import ConfigError
from viasd_adapt.io import save_figure
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.monitor import ViasdQualityWarning
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import ADAPTIVE_SUFFIX, Mode, TierSettings
from viasd_adapt.config.tuned import MEASURED_ON_DEFAULT, PROMPT_LOOKUP_DRAFTER, TunedSettings
from viasd_adapt.engine.context import resolve_context

#: The framework whose loop every candidate runs on (recorded in tuned.json as ``measured_on``):
#: the tier's own SD loop, the loop the HF adapter's tiered modes run. Other frameworks apply the
#: same settings; ``viasd generate --explain`` says when a setting rests on another framework's run.
MEASURED_ON = MEASURED_ON_DEFAULT
#: The families of the sweep, in the order they are reported: plain SD, the lenient baseline, the
#: tier on every cycle, and the adaptive tier (``-adaptive``, :data:`~viasd_adapt.core.settings.ADAPTIVE_SUFFIX`).
FAMILIES = ("sd", "lossless", "lenient", "viasd", "lossless" + ADAPTIVE_SUFFIX, "viasd" + ADAPTIVE_SUFFIX)
#: The families that run a slim verifier (priced with their mask's forward costs).
TIER_FAMILIES = ("lossless", "viasd", "lossless" + ADAPTIVE_SUFFIX, "viasd" + ADAPTIVE_SUFFIX)


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


@dataclass
class Point:
    """One measured candidate."""

    family: str  # "sd", "lossless", "lenient", "viasd", "lossless-adaptive" or "viasd-adaptive"
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
        fields = {k: v for k, v in data.items() if k != "settings"}
        return cls(settings=TierSettings(**data["settings"]), **fields)


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

    @property
    def point_estimate(self) -> Point:
        """The cheapest point within budget on all prompts pooled (what the verdict's figures describe)."""
        return self.pooled if self.pooled is not None else self.chosen

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
        return TuneResult(points, chosen, self.budget, costs, {rename(k): v for k, v in self.masks.items()}, self.seconds,
                          pooled)

    def rechosen(self, budget: Budget) -> "TuneResult":
        """The same measurements judged under another budget (nothing is run again)."""
        return judged(self.points, budget, self.costs, self.masks, self.seconds)

    def repriced(self, costs: dict[str | None, ForwardCosts]) -> "TuneResult":
        """The same pass counts priced with per-forward costs measured again (keyed by mask name,
        None for the runs without a slim verifier): timings are the only noisy part of a sweep."""
        points = []
        for point in self.points:
            if not point.passes:
                raise ConfigError("these points carry no pass counts (an older tune file); run the sweep again")
            point_costs = costs[point.mask if point.family in TIER_FAMILIES else None]
            priced = full_equivalent(point_costs, PassCounts(**point.passes))
            points.append(replace(point, full_equivalent=priced, per_prompt=repriced_prompt_sums(point.per_prompt, point_costs)))
        return judged(points, self.budget, {str(k): v.to_dict() for k, v in costs.items()}, self.masks, self.seconds)


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
    _, chosen = recommend(admitted, cost=lambda p: p.full_equivalent, is_simple=lambda p: p.family in ("sd", "lenient"),
                          margin=margin, tie_break=lambda p: not p.exact)
    return chosen


def judged(points: list[Point], budget: Budget, costs: dict[str, dict], masks: dict[str, dict],
           seconds: float) -> TuneResult:
    """The result of a sweep, with what tuned.json is to record.

    The point estimate (:func:`choose` on all prompts pooled) is written when the paired bootstrap
    over prompts confirms it. When it is undetermined, a few prompts decide it, and the simpler
    setting the bootstrap recommends is written instead (``pooled`` keeps the point estimate for
    the verdict): a file that users apply to every later run should not rest on a coin flip."""
    pooled = choose(points, budget)
    result = TuneResult(points, pooled, budget, costs, masks, seconds)
    uncertainty = choice_uncertainty(result)
    if uncertainty is None or uncertainty.determined or uncertainty.recommended in (None, uncertainty.stated):
        return result
    return replace(result, chosen=points[point_names(points).index(uncertainty.recommended)], pooled=pooled)


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
    candidates = [Candidate(name, s, exact=p.exact, simple=p.family in ("sd", "lenient"))
                  for name, p, s in zip(names, result.points, sums)]
    return bootstrap_verdict(candidates, result.budget, reference,
                             stated=names[result.points.index(result.point_estimate)])


def point_names(points: list[Point]) -> list[str]:
    """A readable, unique name per point ("lenient a=0.4", "lossy alpha1=0.3 ... on mask-r0.45.json")."""
    names = []
    for point in points:
        name = f"{point.family}: {_short(point.settings)}" + (f" on {Path(point.mask).name}" if point.mask else "")
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
        return judged(points, budget, report.costs, report.masks, report.seconds)
    except KeyError as err:
        raise ConfigError(f"{source} is not a complete viasd tune --json file: it has no {err.args[0]!r}") from None
    except (TypeError, AttributeError) as err:
        raise ConfigError(f"{source} is not a viasd tune --json file: {err}") from None


def _masks_for_ratios(pair: LoadedPair, ratios: tuple[float, ...], search_steps: int, save_dir: Path | None,
                      say: Callable[[str], None], exits: tuple[int, ...] = ()) -> dict[str, RoutingMask]:
    """The pair's own mask, one DIMR mask per ratio it does not already cover, and the early-exit
    masks ``exits`` (keep layers ``0..k-1``, skip the rest: everything the slim pass computes is
    reused when the target resumes at k, so they cost nothing beyond the exit's own layers)."""
    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.config.mask import skip_count

    masks: dict[str, RoutingMask] = {}
    if pair.mask is not None:
        masks[pair.mask.source] = pair.mask.mask
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


def mask_costs(pair: LoadedPair, masks: dict[str, RoutingMask], prompt_ids: list[int], gamma: int,
               repeats: int) -> dict[str | None, ForwardCosts]:
    """Per-forward costs without a slim verifier (key None) and with each mask, on one context."""
    context = prompt_ids[:64] + list(range(1, 33))
    costs: dict[str | None, ForwardCosts] = {None: measure_forward_costs(pair.target, pair.draft, None, context, gamma, repeats)}
    for name, mask in masks.items():
        costs[name] = measure_forward_costs(pair.target, pair.draft, SlimVerifier(pair.target, mask), context, gamma, repeats)
    return costs


def _candidates(masks: dict[str, RoutingMask], grid: TuneGrid, base: TierSettings, greedy: bool):
    """(family, settings, mask name) for every candidate of the sweep with the tier on every cycle."""
    yield "sd", base.with_(mode=Mode.NONE), None
    for a in grid.lenience:
        yield "lenient", base.with_(mode=Mode.LENIENT, lenience=a), None
    gates = grid.greedy_gates if greedy else ("proposer",)
    fixed = base.with_(adaptive=False)
    for name, mask in masks.items():
        yield "lossless", fixed.with_(mode=Mode.LOSSLESS, ratio=mask.ratio), name
        for a1, a2, gate in itertools.product(grid.alpha1, grid.alpha2, gates):
            yield "viasd", fixed.with_(mode=Mode.LOSSY, alpha1=a1, alpha2=a2, greedy_gates=gate, ratio=mask.ratio), name


def _adaptive_candidates(fixed: TuneResult, masks: dict[str, RoutingMask]):
    """(family, settings, mask name) of the adaptive twins (module docstring): per mask, of the
    lossless point, and of the cheapest lossy point within the budget (if any is)."""
    for name in masks:
        on_mask = [p for p in fixed.points if p.mask == name]
        lossless = next((p for p in on_mask if p.family == "lossless"), None)
        if lossless is not None:
            yield "lossless" + ADAPTIVE_SUFFIX, lossless.settings.with_(adaptive=True), name
        lossy = [p for p in on_mask if p.family == "viasd" and fixed.budget.admits(p)]
        if lossy:
            best = min(lossy, key=lambda p: p.full_equivalent)
            yield "viasd" + ADAPTIVE_SUFFIX, best.settings.with_(adaptive=True), name


def tune(
    pair: LoadedPair,
    prompts: Sequence[str | BenchPrompt],
    max_new_tokens: int = 48,
    grid: TuneGrid = TuneGrid(),
    budget: Budget = Budget(),
    ratios: tuple[float, ...] = (),
    search_steps: int = 40,
    exits: tuple[int, ...] = (),
    sampling: SamplingConfig = SamplingConfig(),
    save_masks_to: Path | None = None,
    seed: int = 0,
    cost_repeats: int = 15,
    progress: Callable[[str], None] | None = None,
    bar: Callable[[int], object] | None = None,
    chat: str = "auto",
    adaptive: bool = True,
) -> TuneResult:
    """Measures every candidate and chooses the cheapest within ``budget`` (module docstring);
    ``adaptive=False`` measures no adaptive twin.

    ``prompts``: encoded prompts (Spec-Bench's calibration split,
    :func:`viasd_adapt.bench.prompt_sets.tune_spec_bench_prompts`), or texts (held-out snippets,
    :func:`viasd_adapt.prompts.splits.tune_snippets`) put through the chat template per ``chat``."""
    say = progress or (lambda message: None)
    started = time.perf_counter()
    if not prompts:
        raise ConfigError("tuning needs at least one calibration prompt")
    prompt_ids = [p.ids if isinstance(p, BenchPrompt) else encode_prompt(pair.tokenizer, p, chat) for p in prompts]
    masks = _masks_for_ratios(pair, ratios, search_steps, save_masks_to, say, exits)
    with warnings.catch_warnings():
        # the sweep tries tolerances far from the defaults on purpose; the junk-drafter monitor
        # would read a loose gate 1 as a junk drafter
        warnings.simplefilter("ignore", ViasdQualityWarning)
        return _measure(pair, prompt_ids, masks, max_new_tokens, grid, budget, sampling, seed, cost_repeats, say,
                        bar, started, adaptive)


def _measure(pair, prompt_ids, masks, max_new_tokens, grid, budget, sampling, seed, cost_repeats, say, bar, started,
             adaptive=True):
    base = TierSettings(gamma=grid.gamma)

    def run(settings: TierSettings, mask_name: str | None, evidence: TunedSettings | None = None
            ) -> tuple[list[list[int]], TierMetrics, list[TierMetrics], list[int]]:
        """Every calibration prompt through the engine: outputs, merged and per-prompt metrics, and per
        prompt the target passes that fed one token (priced as one-token passes, as the bench does:
        a prompt lookup that found no n-gram checks one token). The run context holds the candidate's
        mask and the evidence the adaptive tier starts from (none: a tuned.json already beside the
        mask must not steer the sweep's own points)."""
        context = resolve_context(pair.target, settings, mask=masks[mask_name] if mask_name else pair.routing,
                                  evidence=evidence, drafter=pair.drafter)
        merged, outputs, each, singles = TierMetrics(), [], [], []
        with RunMeter(pair.target, None) as meter:
            for index, ids in enumerate(prompt_ids):
                request = RunRequest.tiered(ids, max_new_tokens, settings, sampling=sampling, seed=seed + index,
                                            stop_at_eos=False, context=context)
                measured = meter.start()
                out = frameworks.run(MEASURED_ON, pair, request)
                meter.stop()
                outputs.append(out.tokens)
                each.append(out.metrics)
                singles.append(measured.single_passes)
                merged = merged.merge(out.metrics)
        return outputs, merged, each, singles

    say(f"reference: the target's greedy output on {len(prompt_ids)} calibration prompts x {max_new_tokens} tokens")
    reference_ll = 0.0
    reference_tokens = 0
    reference_each: dict[str, list[float]] = {"reference_ll": [], "reference_tokens": []}
    for index, ids in enumerate(prompt_ids):
        ref = frameworks.run("ar", pair, RunRequest.tiered(ids, max_new_tokens, base.with_(mode=Mode.NONE),
                                                           seed=seed + index, stop_at_eos=False))
        score = score_output(pair.target, ids, ref.tokens)
        reference_ll += score.log_likelihood
        reference_tokens += score.tokens
        reference_each["reference_ll"].append(score.log_likelihood)
        reference_each["reference_tokens"].append(score.tokens)
    reference_ll /= max(1, reference_tokens)

    keys = [prompt_key(ids) for ids in prompt_ids]  # copies of a calibration prompt are counted once
    say("timing single forwards per mask")
    costs = mask_costs(pair, masks, prompt_ids[0], grid.gamma, cost_repeats)
    candidates = list(_candidates(masks, grid, base, sampling.greedy))
    ticker = bar(len(candidates) + (2 * len(masks) if adaptive else 0)) if bar is not None else None

    def measure(family: str, settings: TierSettings, mask_name: str | None, evidence: TunedSettings | None = None) -> Point:
        """One candidate on every calibration prompt: its cost, fidelity and per-prompt sums. (The
        sampling overrule of a lossy point is its audit's, which runs the tier on every cycle: for an
        adaptive point that is an upper bound, since its untiered cycles are exact.)"""
        outputs, metrics, each, singles = run(settings, mask_name, evidence)
        ll, matches, tokens, regret = 0.0, 0, 0, 0.0
        scores = []
        for ids, out in zip(prompt_ids, outputs):
            score = score_output(pair.target, ids, out)
            scores.append(score)
            ll, matches, tokens = ll + score.log_likelihood, matches + score.argmax_matches, tokens + score.tokens
            regret += score.regret
        audit_each = None
        if sampling.greedy or settings.mode.is_exact:
            overrule = 0.0 if settings.mode.is_exact else 1.0 - matches / max(1, tokens)
        elif settings.mode is Mode.LENIENT:
            overrule, audit_each = metrics.overrule_rate, each
        else:
            _, audited, audit_each, _ = run(settings.with_(mode=Mode.AUDIT), mask_name)
            overrule = audited.overrule_rate
        counts = PassCounts.of_metrics(metrics, metrics.committed, sum(singles))
        feq = full_equivalent(costs[mask_name], counts)
        per_prompt = _prompt_sums(scores, each, audit_each, settings.mode.is_exact, costs[mask_name], singles) | reference_each \
            | {"keys": keys}
        if ticker is not None:
            ticker.update(1)
        return Point(family, settings, mask_name, feq, reference_ll - ll / max(1, tokens), overrule, tokens,
                     {"rejection_rate": metrics.rejection_rate, "mean_accepted_length": metrics.mean_accepted_length,
                      "slim_tokens": metrics.slim_tokens, "escalated_cycles": metrics.escalated_cycles,
                      "cycles": metrics.cycles, "tier_cycles": metrics.tier_cycles},
                     regret / max(1, tokens), asdict(counts), per_prompt)

    points = [measure(*candidate) for candidate in candidates]
    cost_record = {str(k): v.to_dict() for k, v in costs.items()}
    mask_record = {name: {"bits": m.bits(), "skipped": list(m.skipped), "s1": m.first_skipped} for name, m in masks.items()}
    if adaptive:
        fixed = judged(points, budget, cost_record, mask_record, time.perf_counter() - started)
        say("the adaptive tier: the lossless point and the cheapest lossy point within budget of each mask, adaptive")
        # what the adaptive twins start from: these points, as the written tuned.json will give them
        evidence = artifact_of(fixed, pair)
        points += [measure(*candidate, evidence) for candidate in _adaptive_candidates(fixed, masks)]
    if ticker is not None:
        ticker.close()
    return judged(points, budget, cost_record, mask_record, time.perf_counter() - started)


def _prompt_sums(scores, each: list[TierMetrics], audit_each: list[TierMetrics] | None, exact: bool,
                 costs: ForwardCosts, singles: list[int] | None = None) -> dict:
    """One point's sums per calibration prompt (:class:`Point.per_prompt`). The overrule is what
    :func:`_measure` measures: the greedy overrule (tokens that are not the target's argmax), 0 for
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
        choice=chosen.family,
        mask_bits=mask_bits,
        fingerprint=model_fingerprint(pair.target),
        drafter=drafter_record(pair),
        budget=asdict(result.budget),
        measured=chosen.to_dict(),
        measured_on=MEASURED_ON,
        report={"best_within_budget": best, "costs": result.costs, "masks": result.masks, "seconds": round(result.seconds, 1),
                "mask_file": mask_file,
                "points": len(result.points)},
    )


def drafter_record(pair: LoadedPair):
    """What tuned.json records as the drafter the settings were measured with: the drafter model's
    fingerprint, or the prompt-lookup drafter by name (:mod:`viasd_adapt.config.tuned`)."""
    if pair.draft is not None:
        return model_fingerprint(pair.draft)
    return PROMPT_LOOKUP_DRAFTER if pair.lookup is not None else None


def describe(result: TuneResult) -> list[str]:
    """The tuner's verdict in sentences."""
    lines = []
    measured = {p.family for p in result.points}
    best = {family: result.best(family) for family in FAMILIES if family in measured or ADAPTIVE_SUFFIX not in family}
    for family, point in best.items():
        if point is None:
            lines.append(f"{family}: no setting within the budget")
            continue
        lines.append(f"{family}: best within budget {point.full_equivalent:.3f} full-equivalent passes/token "
                     f"(LL drop {point.ll_drop:+.3f}, regret {point.regret if point.regret is not None else float('nan'):.3f}, "
                     f"overrule {point.overrule if point.overrule is not None else float('nan'):.3f}) "
                     f"with {_short(point.settings)}" + (f", mask {point.mask}" if point.mask else ""))
    chosen = result.point_estimate
    viasd, lenient = best["viasd"], best["lenient"]
    written = "that is what is written" if result.pooled is None else "the bootstrap below decides what is written"
    if chosen.family.endswith(ADAPTIVE_SUFFIX):
        fixed = best.get(chosen.family[: -len(ADAPTIVE_SUFFIX)])
        gain = 1 - chosen.full_equivalent / fixed.full_equivalent if fixed else None
        lines.append(f"VERDICT: the adaptive tier pays on this pair: {chosen.family} ({_short(chosen.settings)}) is the "
                     "cheapest setting within the budget; it runs the slim tier on the cycles where it pays"
                     + (f", {gain:.0%} fewer full-equivalent passes than the tier on every cycle" if gain is not None else "")
                     + f", and {written}")
    elif chosen.family == "viasd":
        gain = 1 - viasd.full_equivalent / lenient.full_equivalent if lenient else None
        lines.append("VERDICT: the slim tier pays on this pair: VIA-SD lossy is the cheapest setting within the budget"
                     + (f", {gain:.0%} fewer full-equivalent passes than the best lenient point" if gain is not None else ""))
    elif viasd is not None and viasd.full_equivalent < chosen.full_equivalent:
        gain = 1 - viasd.full_equivalent / chosen.full_equivalent
        lines.append(f"VERDICT: the slim tier does not pay on this pair at this budget: VIA-SD lossy is only {gain:.1%} "
                     f"cheaper than {chosen.family} ({_short(chosen.settings)}), within the {TIE_MARGIN:.0%} margin of "
                     f"timing noise, so the simpler {chosen.family} is preferred, and {written}")
    else:
        lines.append(f"VERDICT: the slim tier does not pay on this pair at this budget; the cheapest setting is "
                     f"{chosen.family} ({_short(chosen.settings)}), and {written}")
    lines.extend(_uncertainty_lines(result, lines))
    plain = ar_full_equivalent(result)
    if plain is not None and plain < chosen.full_equivalent:
        lines.append(f"NOTE: plain decoding (the target alone, one 1-token pass per token) costs {plain:.3f} full-equivalent "
                     f"passes/token here, less than the written setting ({chosen.full_equivalent:.3f}): speculative "
                     "decoding itself does not pay with this drafter on this machine; generate without a drafter")
    return lines


def _uncertainty_lines(result: TuneResult, lines: list[str]) -> list[str]:
    """The choice's bootstrap over calibration prompts, in a line; an undetermined choice also
    marks the VERDICT line (in place) and says that the simpler setting is what tuned.json records
    (:func:`judged`)."""
    uncertainty = choice_uncertainty(result)
    if uncertainty is None:
        return ["UNCERTAINTY: none can be stated (these points carry no per-prompt sums: an older tune file)"]
    if uncertainty.determined:
        return [f"UNCERTAINTY: the choice is {uncertainty.sentence()}"]
    from viasd_adapt.bench.uncertainty import prompts_words

    for i, line in enumerate(lines):
        if line.startswith("VERDICT: "):
            counted = prompts_words(uncertainty.prompts) + (" (distinct)" if uncertainty.copies else "")
            lines[i] = f"VERDICT (a preview, undetermined at {counted}): " + line[len("VERDICT: "):]
    advice = ""
    if result.pooled is not None:
        advice = (f"; tuned.json records the simpler {uncertainty.recommended}, not the pooled choice "
                  f"{uncertainty.stated}: measure on more calibration prompts (--prompts) to settle it")
    return [f"UNCERTAINTY: the choice is {uncertainty.sentence()}{advice}"]


def projected(result: TuneResult, model: CostModel, gamma: int) -> TuneResult:
    """The sweep's pass counts priced with a :class:`~viasd_adapt.bench.projection.CostModel` (another
    machine's forward costs), and the choice made again under them."""
    masks = {name: RoutingMask.from_bits(info["bits"]) for name, info in result.masks.items()}
    return result.repriced(project_costs_per_mask(model, {None: None, **masks}, gamma + 1))


def ar_full_equivalent(result: TuneResult) -> float | None:
    """What plain autoregressive decoding costs in the tune's own units: one 1-token target pass per
    token, priced by the forward costs measured in the same run (c_full / c_full_block)."""
    costs = result.costs.get("None") or next(iter(result.costs.values()), None)
    if not costs or not costs.get("c_full") or not costs.get("c_full_block"):
        return None
    return costs["c_full"] / costs["c_full_block"]


def _short(settings: TierSettings) -> str:
    mode = settings.mode
    adaptive = " adaptive" if settings.adapts else ""
    if mode is Mode.LENIENT:
        return f"lenient a={settings.lenience}"
    if mode is Mode.LOSSY:
        return f"lossy alpha1={settings.alpha1} alpha2={settings.alpha2} gates={settings.greedy_gates}{adaptive}"
    return mode.value + adaptive


def plot_frontiers(result: TuneResult, path: str | Path, title: str = "") -> Path:
    """Both Pareto frontiers (VIA-SD lossy and the lenient baseline) with every point and the budget:
    cost against the log-likelihood drop (left) and against the regret (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    styles = {"viasd": ("#d62728", "VIA-SD lossy"), "lenient": ("#ff7f0e", "lenient baseline"),
              "sd": ("#1f77b4", "untiered SD"), "lossless": ("#2ca02c", "lossless cascade"),
              "viasd" + ADAPTIVE_SUFFIX: ("#ff9896", "VIA-SD lossy, adaptive"),
              "lossless" + ADAPTIVE_SUFFIX: ("#98df8a", "lossless cascade, adaptive")}
    panels = ((axes[0], "ll_drop", result.budget.max_ll_drop, "target log-likelihood drop per token"),
              (axes[1], "regret", result.budget.max_regret, "regret per token (nats, teacher-forced)"))
    for ax, key, limit, label in panels:
        for family, (colour, name) in styles.items():
            members = [p for p in result.points if p.family == family and getattr(p, key) is not None]
            if not members:
                continue
            ax.scatter([p.full_equivalent for p in members], [getattr(p, key) for p in members], color=colour,
                       alpha=0.35, s=18)
            front = pareto(members, key)
            ax.plot([p.full_equivalent for p in front], [getattr(p, key) for p in front], "-o", color=colour, label=name,
                    markersize=4)
        if limit is not None:
            ax.axhline(limit, color="black", linestyle="--", linewidth=0.8, label="fidelity budget")
        ax.scatter([result.chosen.full_equivalent], [getattr(result.chosen, key)], marker="*", s=250, color="gold",
                   edgecolor="black", zorder=5, label=f"chosen: {result.chosen.family}")
        ax.set_xlabel("full-equivalent passes per token (lower is cheaper)")
        ax.set_ylabel(f"{label} (lower is more faithful)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title or "viasd tune: cost vs fidelity (every setting measured; lines: Pareto frontiers)", fontsize=9)
    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


__all__ = ["Budget", "FAMILIES", "MEASURED_ON", "Point", "TIER_FAMILIES", "TuneGrid", "TuneResult", "artifact_of", "choice_uncertainty", "choose",
           "point_names", "describe", "load_result", "mask_costs", "pareto", "plot_frontiers", "portable_name", "tune"]
