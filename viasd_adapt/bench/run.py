"""Runs every row interleaved and repeated, and reduces each to one median row.

Rows: ``ar`` (the target alone), and per framework ``plain`` (no viasd-adapt, where such a path
exists), ``none`` (the tier installed but off: untiered lossless SD), ``lenient`` (the simple
lossy baseline) and each VIA-SD mode. One process, the same prompts, pair and seeds for every row.
The VIA-SD rows ``lossless`` and ``lossy`` run what a default run of that mode runs: the adaptive
tier (:mod:`viasd_adapt.core.adaptive`); beside each, ``lossless-fixed`` and ``lossy-fixed`` run the
same mode with the tier on every cycle (``adaptive=False``), unless ``RunPlan.fixed_twins`` is off
(``viasd bench --no-fixed-twins``). ``RunPlan.adaptive`` off (``viasd bench --no-adaptive``, the flag's
meaning in every command) runs only the fixed rows. Reports written before (version 2) named the fixed rows
``lossless``/``lossy`` and the adaptive ones ``-adaptive``; they read under today's names.

Schedule: for each repeat, for each prompt, every row runs once, in an order rotated by
``repeat + prompt index`` so that no row always runs first (warm caches) or last (drift); one
untimed warm-up generation per row comes first. Per (row, repeat) the prompts are pooled (tokens /
total seconds, summed counters); each reported field is the median over repeats. Speedups are
medians over repeats of the ratio of two rows' pooled tokens/s in the same repeat, so load from
other processes (bursty on a shared machine) hits the rows alike. Each row also keeps its sums per
prompt, repeats pooled (``per_prompt``: tokens, priced and raw passes, log-likelihood, regret,
overrules), which the verdict resamples to state its uncertainty (:mod:`viasd_adapt.bench.uncertainty`).

Every row generates exactly ``max_new_tokens`` (EOS does not stop a benchmark run), so all rows do
the same work and agreement is compared position by position; ``RunPlan.stop_at_eos`` stops
every row at EOS instead, as Spec-Bench does (a chat model's text after its end-of-turn token is
not an answer).

Prompts may carry a group (a Spec-Bench task, :mod:`viasd_adapt.bench.prompt_sets`): then every
row is also summarised per group, from the same runs (``BenchResult.groups``). Cost columns are explained in
:mod:`viasd_adapt.bench.costs`, fidelity columns in :mod:`viasd_adapt.bench.fidelity`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import torch

from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.bench.costs import ForwardCosts, PassCounts, analytic_bound, full_equivalent, probe_context
from viasd_adapt.bench.prices import PASS_KINDS, PriceList, measure_prices
from viasd_adapt.bench.fidelity import next_line_match, positional_agreement, score_output
from viasd_adapt.bench.measure import RunMeter, memory_source
from viasd_adapt.bench.prompt_sets import UNGROUPED, BenchPrompt, text_prompts
from viasd_adapt.bench.uncertainty import prompt_key
from viasd_adapt.checks import check_max_new_tokens
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import model_kind
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.routing.hardware import hardware_stamp
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import ADAPTIVE_MODES, ADAPTIVE_SUFFIX, FIXED_SUFFIX, TierSettings, label_settings

AR = "ar"
#: The price list's name for the bench's one mask.
MASK_PRICE_KEY = "mask"
TIER_MODES = frameworks.TIER_MODES
#: every row a plan may name: the tier modes (lossless and lossy adaptive, as a default run), and
#: lossless and lossy with the tier on every cycle (``-fixed``)
ROW_MODES = TIER_MODES + tuple(mode.value + FIXED_SUFFIX for mode in ADAPTIVE_MODES)
#: the rows' older names, still accepted: ``lossless-adaptive`` is now ``lossless``
OLD_ROW_MODES = tuple(mode.value + ADAPTIVE_SUFFIX for mode in ADAPTIVE_MODES)
DEFAULT_MODES = ("none", "lenient", "lossless", "lossy", "audit")
# The next-line task keeps the last this-many tokens of each prefix: enough code context, and
# room for EAGLE's tree in small models' position tables.
TASK_CONTEXT_TOKENS = 192

ROW_FIELDS = (
    "framework", "mode", "rejection_rate", "mean_accepted_length", "tau", "full_passes_per_token", "single_passes_per_token",
    "resumed_passes_per_token", "slim_passes_per_token", "tier_share", "draft_passes_per_token", "full_equivalent_per_token",
    "tokens_per_s", "speedup_vs_ar",
    "speedup_vs_untiered", "target_ll", "ll_drop", "regret", "greedy_agreement", "identical_outputs", "target_argmax_agreement",
    "overrule_rate",
    "overrule_tier1", "overrule_tier2", "overrule_tier3", "tv_distance", "next_line_match", "peak_mem_mb",
    "analytic_bound", "fraction_of_bound", "cost_note",
)


@dataclass(frozen=True)
class RunPlan:
    """What :func:`run_bench` runs (the rows, their budget and repeats); the prompts are passed
    separately. A bench invocation builds one from its options
    (:attr:`viasd_adapt.bench.session.BenchConfig.plan`)."""

    frameworks: tuple[str, ...] = ("hf", "pearl")
    modes: tuple[str, ...] = DEFAULT_MODES
    max_new_tokens: int = 64
    repeats: int = 3
    seed: int = 0
    cost_repeats: int = 15
    task_tokens: int = 24  # tokens generated per next-line example
    stop_at_eos: bool = False
    plain_rows: bool = True  # the frameworks' stock (viasd-adapt-free) rows; ``viasd demo`` leaves them out
    # lossless and lossy run the adaptive tier (False: the tier on every cycle, their -fixed rows
    # only: one meaning of "not adaptive" in every command)
    adaptive: bool = True
    fixed_twins: bool = True  # each adaptive lossless and lossy row gets its fixed-tier twin (module docstring)

    def __post_init__(self) -> None:
        check_max_new_tokens(self.max_new_tokens)
        # the older names of the adaptive rows (lossless-adaptive) name the bare rows now
        object.__setattr__(self, "modes", tuple(dict.fromkeys(
            mode[: -len(ADAPTIVE_SUFFIX)] if mode in OLD_ROW_MODES else mode for mode in self.modes)))
        if self.repeats < 1:
            raise ConfigError(f"repeats must be >= 1, got {self.repeats}")
        unknown = [m for m in self.modes if m not in ROW_MODES]
        if unknown:
            raise ConfigError(f"unknown mode(s) {unknown}; choose from {', '.join(ROW_MODES)}")
        for name in self.frameworks:
            frameworks.get(name)
        if not self.frameworks:
            raise ConfigError("nothing to run: give at least one framework")

    @property
    def row_modes(self) -> list[str]:
        """The tier rows of each framework, in order: ``modes``, each lossless and lossy row (the
        adaptive tier, as a default run) followed by its fixed-tier twin when ``fixed_twins`` is on;
        with ``adaptive`` off, each lossless and lossy row is its fixed twin instead."""
        rows: list[str] = []
        for mode in self.modes:
            twin = mode + FIXED_SUFFIX
            if twin not in ROW_MODES:
                rows.append(mode)
            elif not self.adaptive:
                rows.append(twin)
            else:
                rows += [mode] + ([twin] if self.fixed_twins and twin not in self.modes else [])
        return list(dict.fromkeys(rows))


#: The ``mode`` column of the ``ar`` row (plain target decoding has no mode); kept as written in
#: every table and JSON file.
AR_ROW_MODE = "-"


@dataclass
class PlannedRow:
    framework: str
    mode: str  # AR_ROW_MODE for ar, "plain" (the stock framework), or a tier mode
    bound_kind: str = "sequential"

    @property
    def is_ar(self) -> bool:
        """The target alone (no drafter, no tier)."""
        return self.mode == AR_ROW_MODE

    @property
    def stock(self) -> bool:
        """The framework as shipped, without viasd-adapt."""
        return self.mode == frameworks.PLAIN

    @property
    def key(self) -> tuple[str, str]:
        return (self.framework, self.mode)

    @property
    def label(self) -> str:
        return self.framework if self.is_ar else f"{self.framework}/{self.mode}"


@dataclass
class RepeatStats:
    """One row, one repeat, all prompts pooled."""

    tokens: int = 0
    seconds: float = 0.0
    meter_full: int = 0
    meter_single: int = 0  # of meter_full, the target forwards that fed one new token
    meter_draft: int = 0
    peak_mem_mb: float = 0.0
    agree: int = 0
    identical: int = 0  # prompts whose output is the greedy reference, token for token
    outputs: int = 0
    argmax_agree: int = 0
    log_likelihood: float = 0.0
    regret: float = 0.0
    metrics: TierMetrics | None = None
    per_prompt_tps: list[float] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def add(self, output, seconds: float, measure, memory_mb: float, agree: int, score, reference: list[int]) -> None:
        """Pools one timed generation (its output, meter reading and fidelity score) into this repeat."""
        tokens = output.tokens
        self.tokens += len(tokens)
        self.seconds += seconds
        self.per_prompt_tps.append(len(tokens) / seconds if seconds > 0 else 0.0)
        self.meter_full += measure.full_passes
        self.meter_single += measure.single_passes
        self.meter_draft += measure.draft_passes
        self.peak_mem_mb = max(self.peak_mem_mb, memory_mb)
        self.agree += agree
        self.identical += agree == len(tokens) == len(reference)
        self.outputs += 1
        self.argmax_agree += score.argmax_matches
        self.log_likelihood += score.log_likelihood
        self.regret += score.regret
        if output.metrics is not None:
            self.metrics = output.metrics if self.metrics is None else self.metrics.merge(output.metrics)


@dataclass
class BenchResult:
    rows: list[dict]
    costs: ForwardCosts
    skipped: dict[str, str]
    memory_source: str
    descriptions: dict[str, str]
    wall_seconds: float
    prompt_lengths: list[int]
    task_prompts: int = 0
    groups: dict[str, list[dict]] = field(default_factory=dict)  # group -> rows summarised on its prompts only
    group_sizes: dict[str, int] = field(default_factory=dict)  # group -> number of prompts
    prices: PriceList | None = None  # the run's one price list; ``costs`` are its medians
    hardware: HardwareStamp | None = None  # where the rows were measured (the target's device and dtype)


def plan_rows(pair: LoadedPair, plan: RunPlan) -> tuple[list[PlannedRow], dict[str, str], dict[str, str]]:
    """The ``ar`` row plus, per available framework, ``plain`` (if it has one), ``none`` and the
    requested modes. Returns (rows, skipped framework -> reason, framework -> description)."""
    rows = [PlannedRow(AR, AR_ROW_MODE, "ar")]
    skipped: dict[str, str] = {}
    descriptions = {AR: frameworks.get(AR).description}
    for name in plan.frameworks:
        framework = frameworks.get(name)
        reason = framework.unavailable(pair)
        if reason:
            skipped[name] = reason
            continue
        descriptions[name] = framework.description
        if not framework.has_tier:  # a baseline (stock prompt lookup): one row, as shipped
            rows.append(PlannedRow(name, frameworks.PLAIN, framework.bound_kind))
            continue
        modes = ["none"] + [m for m in plan.row_modes if m != "none"]
        if framework.has_plain and plan.plain_rows:
            modes.insert(0, frameworks.PLAIN)
        for mode in modes:
            if mode not in (frameworks.PLAIN,) and label_settings(mode)["mode"].uses_slim and pair.routing is None:
                raise ConfigError(f"mode {mode!r} needs a routing mask; pass --mask")
            rows.append(PlannedRow(name, mode, framework.bound_kind))
    return rows, skipped, descriptions


def _request(row: PlannedRow, settings: TierSettings, sampling: SamplingConfig, ids: list[int], n: int, seed: int,
             stop_at_eos: bool = False, contexts: Callable[..., Any] | None = None) -> RunRequest:
    """The row's request; a tiered one carries ``contexts(settings, plugins)`` when given (the plan's)."""
    options = dict(sampling=sampling, seed=seed, stop_at_eos=stop_at_eos)
    if row.stock:
        return RunRequest.stock_run(ids, n, settings, **options)
    # the ar row runs the target alone: untiered; a tier row its mode, adaptive or not as its name says
    request = RunRequest.tiered(ids, n, settings.with_(mode="none") if row.is_ar else settings.with_(**label_settings(row.mode)),
                                **options)
    if contexts is None or not frameworks.get(row.framework).has_tier:
        return request
    return replace(request, context=contexts(request.settings, request.stream_plugins))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_bench(
    pair: LoadedPair,
    settings: TierSettings,
    sampling: SamplingConfig,
    prompts: Sequence[str | BenchPrompt],
    plan: RunPlan,
    task: list[tuple[str, str]] = (),
    progress: Callable[[str], None] | None = None,
    chat: str = "auto",
    on_run: Callable[[str], None] | None = None,
    contexts: Callable[..., Any] | None = None,
) -> BenchResult:
    """Runs every row on every prompt ``plan.repeats`` times and returns the median rows (overall,
    and per group when the prompts carry groups). Text prompts go through the chat template per ``chat``.
    ``on_run`` is called after every generation with its row's label (a progress bar's tick): the
    greedy references first (one per prompt), then one warm-up per row, then the timed runs (and the
    next-line task's, when asked). ``contexts``: a tiered request's context (the planner's
    :meth:`~viasd_adapt.frameworks.planning.PlannedRun.context`); None: each runner asks the pair."""
    say = progress or (lambda message: None)
    tick = on_run or (lambda label: None)
    started = time.perf_counter()
    prompts = [p if isinstance(p, BenchPrompt) else text_prompts(pair.tokenizer, [p], chat)[0] for p in prompts]
    prompt_ids = [p.ids for p in prompts]
    if not prompt_ids or any(len(ids) == 0 for ids in prompt_ids):
        raise ConfigError("every prompt must tokenize to at least one token")
    groups = list(dict.fromkeys(p.group for p in prompts if p.group != UNGROUPED))  # in first-seen order
    rows, skipped, descriptions = plan_rows(pair, plan)
    for name, reason in skipped.items():
        say(f"skipping framework {name}: {reason}")
    n = plan.max_new_tokens
    kind = model_kind(pair.target)  # an encoder-decoder target runs each framework's seq2seq runner
    runners = {row.key: frameworks.get(row.framework).load(kind) for row in rows}

    def generate(row: PlannedRow, ids: list[int], tokens: int, seed: int, run_sampling: SamplingConfig = sampling):
        output = runners[row.key](pair, _request(row, settings, run_sampling, ids, tokens, seed, plan.stop_at_eos, contexts))
        tick(row.label)
        return output

    say(f"greedy reference: {len(prompt_ids)} prompt(s) x {n} tokens")
    references = [generate(rows[0], ids, n, plan.seed, SamplingConfig()).tokens for ids in prompt_ids]
    say("timing single forwards of drafter, slim verifier, resumed and full target, interleaved: the run's one price list")
    slims = {MASK_PRICE_KEY: SlimVerifier(pair.target, pair.routing)} if pair.routing is not None else {}
    cost_context, source = probe_context(pair.target, prompt_ids[0], references[0][: n // 2])
    prices = measure_prices(pair.target, pair.draft, slims, cost_context, settings.gamma, plan.cost_repeats, source)
    costs = prices.costs(MASK_PRICE_KEY if slims else None)  # every row is priced from these medians

    stats: dict[tuple[str, str], list[RepeatStats]] = {row.key: [] for row in rows}
    # per row, per prompt, all repeats pooled: what the verdict's bootstrap over prompts resamples
    by_prompt = {row.key: [RepeatStats() for _ in prompt_ids] for row in rows}
    group_stats = {group: {row.key: [] for row in rows} for group in groups}
    with RunMeter(pair.target, pair.draft) as meter:
        say("warm-up: one untimed generation per row")
        for row in rows:
            generate(row, prompt_ids[0], min(n, 8), plan.seed)
        for repeat in range(plan.repeats):
            say(f"repeat {repeat + 1}/{plan.repeats}: {len(rows)} rows x {len(prompt_ids)} prompts")
            current = {row.key: RepeatStats() for row in rows}
            by_group = {group: {row.key: RepeatStats() for row in rows} for group in groups}
            for index, ids in enumerate(prompt_ids):
                shift = (repeat + index) % len(rows)
                seed = plan.seed + 1009 * repeat + index
                group = by_group.get(prompts[index].group)
                for row in rows[shift:] + rows[:shift]:
                    accumulators = [current[row.key], by_prompt[row.key][index]] + ([group[row.key]] if group is not None else [])
                    _run_timed(pair, meter, lambda: generate(row, ids, n, seed), ids, accumulators, references[index])
            for key, value in current.items():
                stats[key].append(value)
            for group, values in by_group.items():
                for key, value in values.items():
                    group_stats[group][key].append(value)
    task_scores = _task_scores(pair, rows, task, plan, generate, say) if task else {}
    drafter_model = pair.draft is not None and pair.lookup is None  # a stock row drafts with this model
    summary = _summarise(rows, stats, costs, task_scores, by_prompt, [prompt_key(ids) for ids in prompt_ids], drafter_model)
    per_group = {group: _summarise(rows, group_stats[group], costs, {}, drafter_model=drafter_model) for group in groups}
    return BenchResult(summary, costs, skipped, memory_source(pair.device), descriptions,
                       time.perf_counter() - started, [len(ids) for ids in prompt_ids], len(task), per_group,
                       {group: sum(p.group == group for p in prompts) for group in groups}, prices,
                       hardware_stamp(pair.target))


def _run_timed(pair: LoadedPair, meter: RunMeter, run, ids: list[int], accumulators: list[RepeatStats],
               reference: list[int]) -> None:
    """Runs and times one generation; adds it to every accumulator (the row's, and its group's)."""
    device = pair.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    measure = meter.start()
    try:
        _sync(device)
        start = time.perf_counter()
        output = run()
        _sync(device)
        seconds = time.perf_counter() - start
    finally:
        meter.stop()
    memory = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else measure.memory_mb(output.extra_bytes)
    score = score_output(pair.target, ids, output.tokens)
    agree = positional_agreement(output.tokens, reference)
    for acc in accumulators:
        acc.add(output, seconds, measure, memory, agree, score, reference)


def _task_scores(pair, rows, task, plan, generate, say) -> dict[tuple[str, str], float]:
    """Next-line exact match of every row (untimed), on held-out code the bench prompts never show."""
    say(f"next-line task: {len(task)} held-out prefixes x {len(rows)} rows")
    scores = {}
    for row in rows:
        if row.stock:
            continue
        hits = 0
        for index, (prefix, line) in enumerate(task):
            ids = list(pair.tokenizer(prefix).input_ids)[-TASK_CONTEXT_TOKENS:]
            hits += next_line_match(pair.tokenizer, generate(row, ids, plan.task_tokens, plan.seed + index).tokens, line)
        scores[row.key] = hits / len(task)
    return scores


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def paired_speedup(runs: list[RepeatStats], reference: list[RepeatStats]) -> float | None:
    """Median over repeats of (pooled tokens/s of ``runs``) / (pooled tokens/s of ``reference``)."""
    return _median([run.tokens_per_s / ref.tokens_per_s if ref.tokens_per_s else None for run, ref in zip(runs, reference)])


def _passes(row: PlannedRow, run: RepeatStats) -> PassCounts:
    """The row's passes per token, each priced by what it ran (:mod:`viasd_adapt.bench.costs`): the
    meter's one-token target forwards are one-token passes in every row kind."""
    if not run.tokens:
        return PassCounts()
    if run.metrics is not None and row.bound_kind != "ar":
        return PassCounts.of_metrics(run.metrics, run.tokens, run.meter_single)
    return PassCounts.of_forwards(run.meter_full, run.meter_single, run.meter_draft, run.tokens)


def prompt_sums(row: PlannedRow, per_prompt: list[RepeatStats], costs: ForwardCosts,
                keys: Sequence[str] | None = None) -> dict | None:
    """One row's sums per prompt (repeats pooled), as the bench JSON keeps them (``per_prompt``):
    tokens, full-equivalent passes (``cost``), the raw pass counts (``passes``, so that a projection
    can price them again), log-likelihood, regret and, where every prompt was audited, the summed
    overrule probabilities and audited tokens; ``keys``, each prompt's
    :func:`~viasd_adapt.bench.uncertainty.prompt_key`, so that the verdict counts copies of a
    prompt once. None for a row without pass counts."""
    if not per_prompt or not sum(s.tokens for s in per_prompt):
        return None
    if row.bound_kind != "ar" and not any(s.metrics is not None or s.meter_full for s in per_prompt):
        return None
    counts = [_passes(row, s) for s in per_prompt]
    audited = all(s.metrics is not None and s.metrics.audited for s in per_prompt)
    return {
        "tokens": [s.tokens for s in per_prompt],
        "cost": [full_equivalent(costs, p) * s.tokens for p, s in zip(counts, per_prompt)],
        "passes": {kind: [getattr(p, kind) * s.tokens for p, s in zip(counts, per_prompt)]
                   for kind in ("draft", "slim", "full", "resumed", "single")},
        "log_likelihood": [s.log_likelihood for s in per_prompt],
        "regret": [s.regret for s in per_prompt],
        "overruled": [float(sum(s.metrics.audit_overrule)) for s in per_prompt] if audited else None,
        "audited": [s.metrics.audited for s in per_prompt] if audited else None,
    } | ({"keys": list(keys)} if keys is not None else {})


def uncounted_reason(row: PlannedRow, runs: list[RepeatStats], drafter_model: bool) -> str | None:
    """Why a row's passes cannot all be counted (None: they can). A stock row that drafts with a
    model keeps no metrics of its own; if the meter saw none of its drafter's forwards, pricing its
    target passes alone would make it look cheaper than it ran, so it gets no cost at all."""
    if not (row.stock and drafter_model) or frameworks.get(row.framework).is_baseline or any(r.metrics is not None for r in runs):
        return None
    if any(r.meter_draft for r in runs) or not any(r.tokens for r in runs):
        return None
    return "its drafter's forwards were not seen by the bench's meter: no full-equivalent cost is stated"


def _summarise(rows: list[PlannedRow], stats, costs: ForwardCosts, task_scores: dict,
               by_prompt: dict[tuple[str, str], list[RepeatStats]] | None = None,
               keys: Sequence[str] | None = None, drafter_model: bool = False) -> list[dict]:
    ar_runs = stats[(AR, AR_ROW_MODE)]
    ar_ll = _median([r.log_likelihood / r.tokens if r.tokens else None for r in ar_runs])
    out = []
    for row in rows:
        runs = stats[row.key]
        untiered = stats.get((row.framework, "none"))

        def med(fn):
            return _median([fn(r) for r in runs])

        def from_metrics(fn):
            return med(lambda r: fn(r.metrics) if r.metrics is not None else None)

        passes = [_passes(row, r) for r in runs]
        per_tier = [r.metrics.overrule_rate_by_tier if r.metrics is not None and r.metrics.audited else None for r in runs]
        ll = med(lambda r: r.log_likelihood / r.tokens if r.tokens else None)
        has_passes = row.bound_kind == "ar" or any(r.metrics is not None for r in runs) or any(r.meter_full for r in runs)
        note = uncounted_reason(row, runs, drafter_model)
        has_passes = has_passes and note is None
        record = {
            "framework": row.framework,
            "mode": row.mode,
            "rejection_rate": from_metrics(lambda m: m.rejection_rate) if row.bound_kind != "ar" else None,
            "mean_accepted_length": from_metrics(lambda m: m.mean_accepted_length) if row.bound_kind != "ar" else None,
            # Spec-Bench's "mean accepted tokens": committed tokens per target forward (1 for AR).
            "tau": _median([1.0 / (p.full + p.single) if p.full + p.single > 0 else None for p in passes]) if has_passes else None,
            "full_passes_per_token": _median([p.full + p.single for p in passes]) if has_passes else None,
            "single_passes_per_token": _median([p.single for p in passes]) if has_passes else None,
            "resumed_passes_per_token": _median([p.resumed for p in passes]) if has_passes else None,
            "slim_passes_per_token": _median([p.slim for p in passes]) if has_passes else None,
            # the share of cycles verified with the slim tier (every drafting cycle of a fixed tiered row)
            "tier_share": from_metrics(lambda m: m.tier_cycles / m.cycles if m.cycles else None),
            "draft_passes_per_token": _median([p.draft for p in passes]) if has_passes else None,
            "full_equivalent_per_token": _median([full_equivalent(costs, p) for p in passes]) if has_passes else None,
            "tokens_per_s": med(lambda r: r.tokens_per_s),
            "speedup_vs_ar": paired_speedup(runs, ar_runs),
            "speedup_vs_untiered": paired_speedup(runs, untiered) if untiered else None,
            "target_ll": ll,
            "ll_drop": (ar_ll - ll) if ll is not None and ar_ll is not None else None,
            "regret": med(lambda r: r.regret / r.tokens if r.tokens else None),
            "greedy_agreement": med(lambda r: r.agree / r.tokens if r.tokens else None),
            "identical_outputs": med(lambda r: r.identical / r.outputs if r.outputs else None),
            "target_argmax_agreement": med(lambda r: r.argmax_agree / r.tokens if r.tokens else None),
            "overrule_rate": from_metrics(lambda m: m.overrule_rate),
            "overrule_tier1": _median([t[1] if t else None for t in per_tier]),
            "overrule_tier2": _median([t[2] if t else None for t in per_tier]),
            "overrule_tier3": _median([t[3] if t else None for t in per_tier]),
            "tv_distance": from_metrics(lambda m: m.tv_distance),
            "next_line_match": task_scores.get(row.key),
            "peak_mem_mb": med(lambda r: r.peak_mem_mb),
        }
        if row.bound_kind == "ar":
            bound = 1.0
        elif row.bound_kind == "none" or not has_passes:
            bound = None
        else:
            bound = _median([analytic_bound(costs, p, row.bound_kind == "overlapped") for p in passes])
        record["analytic_bound"] = bound
        record["cost_note"] = note
        speedup = record["speedup_vs_ar"]
        record["fraction_of_bound"] = speedup / bound if bound and speedup is not None else None
        record["repeats"] = {
            "tokens_per_s": [r.tokens_per_s for r in runs],
            "tokens": [r.tokens for r in runs],
            "seconds": [r.seconds for r in runs],
            "per_prompt_tokens_per_s": [r.per_prompt_tps for r in runs],
            # each repeat priced from the run's one price list: the same passes, the same cost
            "full_equivalent_per_token": [full_equivalent(costs, p) for p in passes] if has_passes else None,
            "passes_per_token": [[getattr(p, kind) for kind in PASS_KINDS] for p in passes] if has_passes else None,
        }
        if by_prompt is not None:
            record["per_prompt"] = prompt_sums(row, by_prompt[row.key], costs, keys) if note is None else None
        out.append(record)
    return out


__all__ = ["AR", "DEFAULT_MODES", "ROW_FIELDS", "ROW_MODES", "BenchResult", "RunPlan", "PlannedRow", "paired_speedup",
           "plan_rows", "prompt_sums", "run_bench", "uncounted_reason"]
