"""Runs the rows interleaved and repeated, and reduces them to one median row each.

Schedule: for each repeat, for each prompt, every row runs once, in an order rotated by
``repeat + prompt index`` so that no row always runs first (warm caches) or last (thermal drift).
All rows get the same prompt and the same seed for a given (repeat, prompt). One untimed warm-up
generation per row precedes the timed ones.

Per (row, repeat) the prompts are pooled (tokens / total seconds, summed counters); the reported
value of each field is the median over repeats. Speedups are medians over repeats of the ratio of
the two rows' pooled tokens/s in the same repeat: every prompt's generations of all rows ran within
one rotation of each other, so load from other processes (bursty on a shared machine) hits the
rows alike. (Per-prompt ratios are kept in the JSON, ``repeats.per_prompt_tokens_per_s``; their
median weighs a fast, repetitive prompt as much as a slow one, so it is not reported as the
speedup.)

Agreement: ``greedy_agreement`` is the fraction of generated tokens equal to the target's greedy
output at the same position (both start right after the prompt; no re-alignment after a
divergence). ``target_argmax_agreement`` is the teacher-forced variant: the fraction of generated
tokens that are the target's argmax given the row's own preceding tokens, which does not punish
every token after a first divergence.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from viasd_adapt.bench.context import BenchContext
from viasd_adapt.bench.costs import ForwardCosts, analytic_bound, measure_forward_costs
from viasd_adapt.bench.measure import PassMeter, memory_source, peak_memory_mb
from viasd_adapt.bench.rows import AR, FRAMEWORKS, TIER_MODES, RowRunner, make_ar_runner
from viasd_adapt.errors import ConfigError
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import check_max_new_tokens

ROW_FIELDS = (
    "framework", "mode", "rejection_rate", "mean_accepted_length", "full_passes_per_token",
    "slim_passes_per_token", "draft_passes_per_token", "tokens_per_s", "speedup_vs_ar", "speedup_vs_untiered",
    "greedy_agreement", "target_argmax_agreement", "peak_mem_mb", "overrule_rate", "tv_distance",
    "analytic_bound", "fraction_of_bound",
)


@dataclass(frozen=True)
class BenchConfig:
    """What to run; prompts are passed separately."""

    frameworks: tuple[str, ...] = ("hf", "pearl")
    modes: tuple[str, ...] = TIER_MODES
    max_new_tokens: int = 64
    repeats: int = 3
    seed: int = 0
    warmup: bool = True
    cost_repeats: int = 15
    include_plain: bool = True

    def __post_init__(self) -> None:
        check_max_new_tokens(self.max_new_tokens)
        if self.repeats < 1:
            raise ConfigError(f"repeats must be >= 1, got {self.repeats}")
        unknown = [m for m in self.modes if m not in TIER_MODES]
        if unknown:
            raise ConfigError(f"unknown mode(s) {unknown}; choose from {', '.join(TIER_MODES)}")
        unknown = [f for f in self.frameworks if f not in FRAMEWORKS]
        if unknown:
            raise ConfigError(f"unknown framework(s) {unknown}; known: {', '.join(sorted(FRAMEWORKS))}")
        if not self.frameworks and not self.modes:
            raise ConfigError("nothing to run: give at least one framework")


@dataclass
class PlannedRow:
    framework: str
    mode: str
    runner: RowRunner
    bound_kind: str = "sequential"

    @property
    def key(self) -> tuple[str, str]:
        return (self.framework, self.mode)


@dataclass
class RepeatStats:
    """One row, one repeat, all prompts pooled."""

    tokens: int = 0
    seconds: float = 0.0
    full_passes: int = 0
    slim_passes: int = 0
    draft_passes: int = 0
    peak_mem_mb: float = 0.0
    agree: int = 0
    argmax_agree: int = 0
    metrics: TierMetrics | None = None
    outputs: list[list[int]] = field(default_factory=list)
    per_prompt_tps: list[float] = field(default_factory=list)  # tokens/s of each prompt, in prompt order

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class BenchResult:
    rows: list[dict]
    costs: ForwardCosts
    skipped: dict[str, str]
    memory_source: str
    descriptions: dict[str, str]
    wall_seconds: float
    prompt_lengths: list[int]


def plan_rows(ctx: BenchContext, config: BenchConfig) -> tuple[list[PlannedRow], dict[str, str], dict[str, str]]:
    """The ``ar`` row plus, per available framework, ``plain`` (if it has one), ``none`` and the
    requested tier modes. Returns (rows, skipped framework -> reason, framework -> description)."""
    rows = [PlannedRow(AR, "-", make_ar_runner(ctx))]
    skipped: dict[str, str] = {}
    descriptions = {AR: "autoregressive target decoding (HF generate, no assistant)"}
    for name in config.frameworks:
        framework = FRAMEWORKS[name]
        reason = framework.unavailable(ctx)
        if reason:
            skipped[name] = reason
            continue
        descriptions[name] = framework.description(ctx)
        modes = ["none"] + [m for m in config.modes if m != "none"]
        if config.include_plain and framework.has_plain(ctx):
            modes.insert(0, "plain")
        bound_kind = framework.bound_kind(ctx)
        for mode in modes:
            if mode not in ("plain", "none") and ctx.slim is None:
                raise ConfigError(f"mode {mode!r} needs a routing mask; pass --mask")
            rows.append(PlannedRow(name, mode, framework.make_runner(ctx, mode), bound_kind))
    return rows, skipped, descriptions


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _argmax_agreement(ctx: BenchContext, prompt_ids: list[int], tokens: list[int]) -> int:
    """How many of ``tokens`` are the target's argmax given the tokens before them (one forward)."""
    if not tokens:
        return 0
    ids = torch.tensor([prompt_ids + tokens], dtype=torch.long, device=ctx.device)
    with torch.no_grad():
        logits = ctx.target(input_ids=ids, use_cache=False).logits[0]
    predicted = logits[len(prompt_ids) - 1 : -1].argmax(dim=-1).tolist()
    return sum(int(p == t) for p, t in zip(predicted, tokens))


def positional_agreement(tokens: list[int], reference: list[int]) -> int:
    """Number of positions where ``tokens`` equals ``reference`` (prefix-aligned, no re-alignment)."""
    return sum(int(a == b) for a, b in zip(tokens, reference))


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def paired_speedup(runs: list["RepeatStats"], reference: list["RepeatStats"]) -> float | None:
    """Median over repeats of (pooled tokens/s of ``runs``) / (pooled tokens/s of ``reference``)
    in the same repeat."""
    return _median([_ratio(run.tokens_per_s, ref.tokens_per_s) for run, ref in zip(runs, reference)])


def run_bench(
    ctx: BenchContext,
    prompts: list[str],
    config: BenchConfig,
    progress: Callable[[str], None] | None = None,
) -> BenchResult:
    """Runs every row on every prompt ``config.repeats`` times and returns the median rows."""
    say = progress or (lambda message: None)
    started = time.perf_counter()
    prompt_ids = [ctx.tokenizer(p).input_ids for p in prompts]
    if not prompt_ids or any(len(ids) == 0 for ids in prompt_ids):
        raise ConfigError("every prompt must tokenize to at least one token")
    rows, skipped, descriptions = plan_rows(ctx, config)
    for name, reason in skipped.items():
        say(f"skipping framework {name}: {reason}")
    n = config.max_new_tokens

    say(f"greedy reference: {len(prompt_ids)} prompt(s) x {n} tokens")
    greedy_ctx = ctx if ctx.sampling.greedy else _with_sampling(ctx, SamplingConfig())
    reference_runner = make_ar_runner(greedy_ctx)
    references = [reference_runner(ids, n, config.seed).tokens for ids in prompt_ids]

    cost_context = prompt_ids[0] + references[0][: n // 2]
    say("timing single forwards of drafter, slim verifier and target")
    costs = measure_forward_costs(ctx.target, ctx.draft, ctx.slim, cost_context, ctx.settings.gamma, config.cost_repeats)

    stats: dict[tuple[str, str], list[RepeatStats]] = {row.key: [] for row in rows}
    with PassMeter(ctx.target, ctx.draft) as meter:
        ctx.rebuild_slim()  # the view now inherits the meter's hooks (its KV cache is measured)
        for row in rows:
            for module, role, name in getattr(row.runner, "metered", ()):
                meter.watch(module, role, name)
        if config.warmup:
            say("warm-up: one untimed generation per row")
            for row in rows:
                row.runner(prompt_ids[0], min(n, 8), config.seed)
        for repeat in range(config.repeats):
            say(f"repeat {repeat + 1}/{config.repeats}: {len(rows)} rows x {len(prompt_ids)} prompts")
            current = {row.key: RepeatStats() for row in rows}
            for index, ids in enumerate(prompt_ids):
                shift = (repeat + index) % len(rows)
                seed = config.seed + 1009 * repeat + index
                for row in rows[shift:] + rows[:shift]:
                    _run_one(ctx, row, ids, n, seed, meter, current[row.key], references[index])
            for key, value in current.items():
                stats[key].append(value)

    ctx.rebuild_slim()  # drop the view that inherited the (now removed) hooks
    summary = _summarise(rows, stats, costs)
    return BenchResult(
        rows=summary,
        costs=costs,
        skipped=skipped,
        memory_source=memory_source(ctx.device),
        descriptions=descriptions,
        wall_seconds=time.perf_counter() - started,
        prompt_lengths=[len(ids) for ids in prompt_ids],
    )


def _with_sampling(ctx: BenchContext, sampling: SamplingConfig) -> BenchContext:
    clone = BenchContext(
        target=ctx.target, draft=ctx.draft, tokenizer=ctx.tokenizer, settings=ctx.settings, sampling=sampling,
        mask=None, device=ctx.device,
    )
    return clone


def _run_one(ctx, row: PlannedRow, ids, n, seed, meter: PassMeter, acc: RepeatStats, reference) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    measure = meter.start()
    try:
        _sync(ctx.device)
        start = time.perf_counter()
        sample = row.runner(ids, n, seed)
        _sync(ctx.device)
        seconds = time.perf_counter() - start
    finally:
        meter.stop()
    cuda_peak = torch.cuda.max_memory_allocated(ctx.device) if ctx.device.type == "cuda" else None
    tokens = sample.tokens[:n]
    acc.tokens += len(tokens)
    acc.seconds += seconds
    acc.per_prompt_tps.append(len(tokens) / seconds if seconds > 0 else 0.0)
    acc.full_passes += measure.full_passes
    acc.slim_passes += measure.slim_passes
    acc.draft_passes += measure.draft_passes
    if sample.metrics is not None and measure.slim_passes == 0 and sample.metrics.slim_passes:
        acc.slim_passes += sample.metrics.slim_passes  # a slim view the hooks could not see
    acc.peak_mem_mb = max(acc.peak_mem_mb, peak_memory_mb(measure, ctx.device, cuda_peak, sample.extra_bytes))
    acc.agree += positional_agreement(tokens, reference)
    acc.argmax_agree += _argmax_agreement(ctx, ids, tokens)
    acc.outputs.append(tokens)
    if sample.metrics is not None:
        acc.metrics = sample.metrics if acc.metrics is None else acc.metrics.merge(sample.metrics)


def _summarise(rows: list[PlannedRow], stats, costs: ForwardCosts) -> list[dict]:
    ar_runs = stats[(AR, "-")]
    out = []
    for row in rows:
        runs = stats[row.key]
        untiered = stats.get((row.framework, "none"))

        def med(fn):
            return _median([fn(r) for r in runs])

        per_token = lambda attr: med(lambda r: getattr(r, attr) / r.tokens if r.tokens else None)  # noqa: E731
        record = {
            "framework": row.framework,
            "mode": row.mode,
            "rejection_rate": med(lambda r: r.metrics.rejection_rate if r.metrics else None),
            "mean_accepted_length": med(lambda r: r.metrics.mean_accepted_length if r.metrics else None),
            "full_passes_per_token": per_token("full_passes"),
            "slim_passes_per_token": per_token("slim_passes"),
            "draft_passes_per_token": per_token("draft_passes"),
            "tokens_per_s": med(lambda r: r.tokens_per_s),
            "speedup_vs_ar": paired_speedup(runs, ar_runs),
            "speedup_vs_untiered": paired_speedup(runs, untiered) if untiered else None,
            "greedy_agreement": med(lambda r: r.agree / r.tokens if r.tokens else None),
            "target_argmax_agreement": med(lambda r: r.argmax_agree / r.tokens if r.tokens else None),
            "peak_mem_mb": med(lambda r: r.peak_mem_mb),
            "overrule_rate": med(lambda r: r.metrics.overrule_rate if r.metrics else None) if row.mode == "audit" else None,
            "tv_distance": med(lambda r: r.metrics.tv_distance if r.metrics else None) if row.mode == "audit" else None,
        }
        if row.framework == AR:
            bound = 1.0
        elif row.bound_kind == "none":
            bound = None
        else:
            bound = analytic_bound(
                costs,
                record["draft_passes_per_token"] or 0.0,
                record["slim_passes_per_token"] or 0.0,
                record["full_passes_per_token"] or 0.0,
                row.bound_kind == "overlapped",
            )
        record["analytic_bound"] = bound
        record["fraction_of_bound"] = (
            record["speedup_vs_ar"] / bound if bound and record["speedup_vs_ar"] is not None else None
        )
        record["repeats"] = {
            "tokens_per_s": [r.tokens_per_s for r in runs],
            "tokens": [r.tokens for r in runs],
            "seconds": [r.seconds for r in runs],
            "per_prompt_tokens_per_s": [r.per_prompt_tps for r in runs],
        }
        out.append(record)
    return out
