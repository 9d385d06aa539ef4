"""One ``viasd bench`` invocation end to end, as a chain of small steps.

options -> pair -> run -> tables, verdict, JSON, plot:

1. :class:`BenchConfig`: every option of the invocation, checked once, when it is built (before
   any model loads); ``viasd bench`` and ``viasd demo`` build one;
2. :func:`read_text_prompts`, :func:`plan_bench` (the planner: the settings of the rows and the
   mask, the pair, the settings checked once against it), and for Spec-Bench :func:`spec_bench_set`
   (its second turns need the loaded pair);
3. :func:`viasd_adapt.bench.run.run_bench` with :attr:`BenchConfig.plan`;
4. :func:`setup_lines`, :func:`result_lines`, :func:`projection_report` and :func:`run_info`: what
   is printed and recorded, as pure functions of the values above;
5. :func:`write_outputs`: the JSON file and the plot.

Only :func:`run_bench_session` loads, runs, prints and writes; the steps that decide or word
something take values and return values or lines. Shared by the ``bench`` and ``demo`` commands so
that both print exactly the same report.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from viasd_adapt.process_settings import leaves_process_settings
from viasd_adapt.bench.costs import ForwardCosts
from viasd_adapt.bench.prices import PriceList
from viasd_adapt.bench.projection import PROJECTION_COLUMNS, CostModel, load_cost_model, project_rows, projection_difference
from viasd_adapt.bench.prompt_sets import BenchPrompt, spec_bench_prompts
from viasd_adapt.bench.report import (FIDELITY_COLUMNS, SPEED_COLUMNS, format_costs, format_group_tables, format_table, plot_rows,
                                      result_json, save_json)
from viasd_adapt.bench.run import DEFAULT_MODES, BenchResult, RunPlan, run_bench
from viasd_adapt.bench.verdict import decisions, verdict
from viasd_adapt.config.advice import delta_message
from viasd_adapt.config.budget import DEFAULT_MAX_LL_DROP, DEFAULT_MAX_REGRET, Budget
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.config.resolve import UNREAD, RunSpec
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings, label_settings
from viasd_adapt.engine.prompt_lookup import DRAFT_NAME as PROMPT_LOOKUP
from viasd_adapt.frameworks import planning
from viasd_adapt.frameworks.planning import ChosenPaths, PlannedRun, RunOptions
from viasd_adapt.errors import ConfigError
from viasd_adapt.io import ensure_writable, relative_name
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.prompts.files import read_prompts_file
from viasd_adapt.prompts.splits import bench_snippets
from viasd_adapt.prompts.spec_bench import is_spec_bench

DEFAULT_FRAMEWORKS = ("hf", "pearl")
DEFAULT_PER_CATEGORY = 2  # Spec-Bench questions per task when --per-category is not given

# Benchmarks share the machine; one thread keeps timings comparable and polite. Override with
# the environment variable VIASD_BENCH_THREADS.
DEFAULT_THREADS = 1
# Seed of the next-line task's held-out draw; the prompt splits draw with seeds of their own
# (viasd_adapt.prompts.splits), so tuning never sees what the bench measures.
TASK_SEED = 1


def split_list(value: str | Sequence[str]) -> tuple[str, ...]:
    """A comma-separated option (``"hf,pearl"``) as a tuple; a sequence is kept as it is."""
    if not isinstance(value, str):
        return tuple(value)
    return tuple(part.strip() for part in value.split(",") if part.strip())


# ============================================================================ 1. the options


@dataclass(frozen=True)
class BenchConfig:
    """Every option of one bench invocation, checked once, here, before any model loads.

    The field names are the ``viasd bench`` option names, so the command builds one with
    ``BenchConfig(target, draft, **options)``; ``frameworks`` and ``modes`` may be given as
    comma-separated strings. Three values are derived at construction, and their own checks run
    then: :attr:`plan` (what :func:`~viasd_adapt.bench.run.run_bench` runs: known frameworks and
    modes, a positive budget and repeat count), :attr:`budget` (the verdict's fidelity budget,
    :class:`~viasd_adapt.config.budget.Budget`, also ``viasd tune``'s) and :attr:`sampling`.

    ``prompts_file`` may be ``spec-bench[:names]``: Spec-Bench's bench split, ``per_category``
    questions per task (default 2), every row stopping at EOS as Spec-Bench does, and a table per
    task after the overall ones. The tier settings come from
    :func:`viasd_adapt.config.resolve.resolve_settings` (defaults, the tuned.json beside the mask,
    the tuner's best points for the lenient and tiered rows, ``preset``, the threshold flags);
    with ``pair_mask`` and no ``mask_path`` it also picks the mask, as ``--pair`` does.
    """

    target: Path | str
    draft: Path | str
    eagle_head: Path | str | None = None
    # --- the mask and the tier settings
    mask_path: Path | str | None = None
    pair_mask: Path | str | None = None  # the pair's own mask.json (--pair), used when mask_path is None
    preset: str = "default"
    alpha1: float | None = None
    alpha2: float | None = None
    lenience: float | None = None
    gamma: int | None = None
    # --- the prompts
    prompts_file: Path | str | None = None
    num_prompts: int = 8
    per_category: int | None = None
    chat: str = "auto"
    task_prompts: int = 32
    # --- what runs
    frameworks: tuple[str, ...] = DEFAULT_FRAMEWORKS
    modes: tuple[str, ...] = DEFAULT_MODES
    adaptive: bool = True  # lossless and lossy run the adaptive tier (False: the tier on every cycle, as generate)
    fixed_twins: bool = True  # each adaptive lossless and lossy row gets its fixed-tier twin (viasd_adapt.bench.run)
    max_new_tokens: int = 64
    repeats: int = 3
    seed: int = 0
    temperature: float = 0.0
    cost_repeats: int = 15
    device: str = "auto"
    device_map: str | None = None  # a target spread over devices by accelerate (viasd_adapt.models.placement)
    threads: int | None = None  # torch CPU threads (None: $VIASD_BENCH_THREADS, else 1)
    dtype: str | None = None  # the weights' dtype (a --pair's pair.json; None: float32 on the CPU)
    # --- the verdict
    max_ll_drop: float = DEFAULT_MAX_LL_DROP
    max_regret: float = DEFAULT_MAX_REGRET
    max_overrule: float | None = None
    costs: str | Path | None = None  # another machine's forward costs: a projected verdict as well
    # --- the outputs
    json_path: Path | str | None = None
    plot_path: Path | str | None = None
    label: str = ""
    # --- derived at construction
    plan: RunPlan = field(init=False, repr=False, compare=False)
    budget: Budget = field(init=False, repr=False, compare=False)
    sampling: SamplingConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "frameworks", split_list(self.frameworks))
        object.__setattr__(self, "modes", split_list(self.modes))
        if self.num_prompts < 1:
            raise ConfigError(f"num_prompts must be >= 1, got {self.num_prompts}")
        if self.task_prompts < 0:
            raise ConfigError(f"task_prompts must be >= 0, got {self.task_prompts}")
        if self.per_category is not None and not self.spec_bench:
            raise ConfigError("--per-category is for --prompts spec-bench[:TASK,...]")
        object.__setattr__(self, "plan", RunPlan(
            frameworks=self.frameworks, modes=self.modes, max_new_tokens=self.max_new_tokens, repeats=self.repeats,
            seed=self.seed, cost_repeats=self.cost_repeats, stop_at_eos=self.spec_bench, adaptive=self.adaptive,
            fixed_twins=self.fixed_twins))
        object.__setattr__(self, "budget", Budget(self.max_ll_drop, self.max_overrule, self.max_regret))
        object.__setattr__(self, "sampling", SamplingConfig.from_temperature(self.temperature))

    @property
    def spec_bench(self) -> bool:
        """Whether the prompts are Spec-Bench questions (``--prompts spec-bench[:names]``)."""
        return is_spec_bench(self.prompts_file)

    @property
    def questions_per_task(self) -> int | None:
        """Spec-Bench questions per task (None for other prompts)."""
        return (self.per_category or DEFAULT_PER_CATEGORY) if self.spec_bench else None

    @property
    def task_examples(self) -> int:
        """Held-out next-line examples to score: none for Spec-Bench, whose rows are scored by their
        fidelity columns (the next-line task is stdlib code)."""
        return 0 if self.spec_bench else self.task_prompts

    @property
    def needs_mask(self) -> bool:
        """Whether a requested mode runs the slim verifier."""
        return any(label_settings(mode)["mode"].uses_slim for mode in self.modes)

    @property
    def threshold_flags(self) -> dict[str, Any]:
        """The tier settings given as options (None: not given), for the resolver's flag layer."""
        return {"alpha1": self.alpha1, "alpha2": self.alpha2, "lenience": self.lenience, "gamma": self.gamma}

    @property
    def prompts_source(self) -> str:
        """Where the prompts come from, in words (the JSON's ``prompts_source``)."""
        return str(self.prompts_file) if self.prompts_file else "held-out stdlib snippets"


# ============================================================================ 2. settings, prompts, pair


def set_threads(threads: int | None = None) -> int:
    threads = threads or int(os.environ.get("VIASD_BENCH_THREADS", DEFAULT_THREADS))
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


def quiet_transformers() -> None:
    """No weight-loading progress bars or deprecation chatter between the table lines."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def check_outputs(config: BenchConfig) -> None:
    """``--json`` and ``--plot`` must be writable: checked before the first forward, not after the run."""
    for output, option in ((config.json_path, "--json"), (config.plot_path, "--plot")):
        if output:
            ensure_writable(output, option)


def bench_options(config: BenchConfig) -> RunOptions:
    """The bench's flags as the planner takes them: its tier settings (the rows' mode is each row's
    own), the tuner's best points for the rows, the mask when any row needs one, placement and sampling."""
    return RunOptions(alpha1=config.alpha1, alpha2=config.alpha2, lenience=config.lenience, gamma=config.gamma,
                      preset=config.preset, mask=Path(config.mask_path) if config.mask_path else None,
                      device=config.device, dtype=config.dtype, device_map=config.device_map, seed=config.seed,
                      sampling=config.sampling, best_points=True, need_mask=config.needs_mask)


def plan_bench(config: BenchConfig, *, pair: LoadedPair | None = None, tuned: Any = UNREAD) -> PlannedRun:
    """The bench's run, set up by the planner (:func:`~viasd_adapt.frameworks.planning.plan_run`):
    the rows' settings and mask (``--mask``, else the one the pair's tuned choice names), the pair
    (``pair``: already loaded), the settings checked once against what the rows draft with, the
    notices given once. ``tuned``: the tuned file beside the mask when the caller has read it."""
    choice = ChosenPaths(config.target, config.draft, config.eagle_head, config.pair_mask)
    return planning.plan_run(choice, bench_options(config), config.frameworks, loaded=pair, tuned=tuned)


def task_examples(n: int, seed: int = TASK_SEED) -> list[tuple[str, str]]:
    """``n`` held-out (code prefix, next line) pairs of the next-line task."""
    from viasd_adapt.prompts.stdlib import heldout_next_lines

    return heldout_next_lines(n, seed=seed) if n else []


def read_text_prompts(config: BenchConfig) -> list[str] | None:
    """The prompt texts: the prompts file, else held-out snippets. None for Spec-Bench
    (:func:`spec_bench_set`, after the pair is loaded)."""
    if config.spec_bench:
        return None
    return read_prompts_file(config.prompts_file) if config.prompts_file else bench_snippets(config.num_prompts)


def spec_bench_note(config: BenchConfig) -> str:
    return (f"  .. Spec-Bench prompts ({config.prompts_file}, {config.questions_per_task} per task, bench split; "
            f"chat {config.chat}): writing the target's first answers for MT-bench second turns")


def spec_bench_set(config: BenchConfig, pair: LoadedPair) -> list[BenchPrompt]:
    """Spec-Bench's questions as prompts; MT-bench's second turns follow the target's own first answers."""
    return spec_bench_prompts(pair, str(config.prompts_file), config.questions_per_task, config.chat,
                              config.max_new_tokens)


# ============================================================================ 4. what is printed and recorded


def setup_lines(config: BenchConfig, spec: RunSpec, pair: LoadedPair, prompts: int, threads: int) -> list[str]:
    """What the bench runs, before it runs: the tuned file, the resolver's notes, the mask (with the
    Delta advice of its search) and the settings line."""
    lines = []
    if spec.tuned is not None and spec.not_applied:
        lines.append(f"tuned settings ({spec.tuned.choice}) beside the mask NOT applied: {spec.not_applied}")
    elif spec.tuned is not None:
        lines.append(f"tuned settings ({spec.tuned.choice}) from beside the mask: {spec.tuned.settings.to_dict()}")
    lines.extend(spec.notes)
    if pair.mask is not None:
        mask = pair.mask
        note = "  <-- FALLBACK, not searched" if mask.is_fallback else ""
        lines.append(f"mask: skipped layers {list(mask.mask.skipped)} (s1 = {mask.mask.first_skipped}) from {mask.source}{note}")
        advice = delta_message(mask.artifact.delta, mask.artifact.search) if mask.artifact is not None else None
        if advice:
            lines.append(f"NOTE: {advice}")
    sampling = "greedy" if config.sampling.greedy else f"T={config.temperature}"
    lines.append(f"settings: {spec.settings.to_dict()} | sampling: {sampling} | {prompts} prompts x {config.max_new_tokens} "
                 f"tokens x {config.repeats} repeats | device {pair.device}, {threads} thread(s)")
    return lines


def result_lines(result: BenchResult, judgement: list[str]) -> list[str]:
    """The measured report: what each framework is, what was skipped, the speed and fidelity tables
    (and one per Spec-Bench task), the forward costs, the memory source and the verdict."""
    lines = [f"{name}: {description}" for name, description in result.descriptions.items()]
    lines += [f"{name}: SKIPPED ({reason})" for name, reason in result.skipped.items()]
    lines += ["\nspeed (cost):", format_table(result.rows, SPEED_COLUMNS),
              ("\nfidelity (LL_drop = target log-likelihood per token below the target's own output; "
               f"next_line = exact match on {result.task_prompts} held-out next lines):"),
              format_table(result.rows, FIDELITY_COLUMNS)]
    if result.groups:
        lines += ["\nper Spec-Bench task (tau = committed tokens per target forward; x_ar = tokens/s over AR, same run):",
                  format_group_tables(result)]
    lines += [f"{r['framework']}/{r['mode']}: no feq/tok: {r['cost_note']}" for r in result.rows if r.get("cost_note")]
    lines += ["", format_costs(result), f"peak memory: {result.memory_source}"]
    if judgement:
        lines += ["verdict:", *(f"  {line}" for line in judgement)]
    return lines


def projection_report(rows: list[dict], cost_model: CostModel, routing: RoutingMask | None, block_length: int,
                      budget: Budget, measured: ForwardCosts | None = None,
                      prices: PriceList | None = None) -> tuple[list[str], dict[str, Any]]:
    """The measured pass counts priced with another machine's forward costs: the lines to print and
    the JSON's ``projection`` record (the projected rows' costs and the projected verdict). With the
    run's ``measured`` costs, a framework whose projected row differs from the measured one gets one
    sentence naming the pass price that makes the difference."""
    projected = project_rows(rows, cost_model, routing, block_length)
    projected_verdict = verdict(projected, budget=budget)
    if measured is not None:
        measured_use = {f: use for f, (_, _, use) in decisions(rows, budget, prices).items()}
        projected_costs = cost_model.forward_costs(routing, block_length)
        for i, line in enumerate(projected_verdict):
            framework = line.split(":", 1)[0]
            chosen = decisions(projected, budget).get(framework)
            before = measured_use.get(framework)
            if chosen is None or before is None or (chosen[2]["framework"], chosen[2]["mode"]) == (before["framework"], before["mode"]):
                continue
            why = projection_difference(before, chosen[2], measured, projected_costs)
            if why:
                projected_verdict[i] = f"{line} {why}"
    lines = [(f"\nPROJECTION, not a measurement: the pass counts measured above, priced with the forward costs of "
              f"{cost_model.label} ({cost_model.source or 'cost file'}):"),
             format_table(projected, PROJECTION_COLUMNS),
             *(f"  projected: {line}" for line in projected_verdict)]
    record = {"cost_model": cost_model.__dict__, "rows": [
        {k: r.get(k) for k in ("framework", "mode", "full_equivalent_per_token", "projected_speedup_vs_ar")} for r in projected],
        "verdict": projected_verdict}
    return lines, record


def command_line(argv: Sequence[str]) -> str:
    """The command as typed, argv[0] by name only: a results file must not carry the path of the
    machine that ran it."""
    return " ".join(shlex.quote(a) for a in [Path(argv[0]).name, *argv[1:]]) if argv else ""


def run_info(config: BenchConfig, spec: RunSpec, pair: LoadedPair, prompts: int, threads: int, judgement: list[str],
             projection: dict[str, Any] | None, argv: Sequence[str], cwd: Path) -> dict[str, Any]:
    """The JSON's ``run`` record: what ran, with which settings, and the verdicts. Model paths are named
    relative to ``cwd`` (else by their last component): results travel, machine paths don't."""
    return {
        "command": command_line(argv),
        "label": config.label,
        "target": relative_name(config.target, cwd),
        "draft": str(config.draft) if str(config.draft) == PROMPT_LOOKUP else relative_name(config.draft, cwd),
        "eagle_head": relative_name(config.eagle_head, cwd) if config.eagle_head else None,
        "mask": pair.mask.to_dict() if pair.mask is not None else None,
        "tuned": spec.tuned.to_json() if spec.tuned is not None else None,
        "settings": spec.settings.to_dict(),
        "preset": config.preset,
        "sampling": {"greedy": config.sampling.greedy, "temperature": config.temperature},
        "prompts": prompts,
        "prompts_source": config.prompts_source,
        "per_category": config.questions_per_task,
        "chat": config.chat,
        "max_new_tokens": config.max_new_tokens,
        "repeats": config.repeats,
        "adaptive_rows": config.adaptive,
        "fixed_twins": config.fixed_twins,
        "seed": config.seed,
        "threads": threads,
        "max_ll_drop": config.max_ll_drop,
        "max_regret": config.max_regret,
        **({"max_overrule": config.max_overrule} if config.max_overrule is not None else {}),
        "verdict": judgement,
        "projection": projection,
    }


def plot_title(target_path, settings: TierSettings, prompts: int, tokens: int, repeats: int) -> str:
    target = Path(str(target_path))
    pair = target.parent.name if target.name == "target" else target.name
    return (f"pair {pair}: alpha1={settings.alpha1}, alpha2={settings.alpha2}, lenience={settings.lenience}, "
            f"gamma={settings.gamma}; {prompts} prompts x {tokens} tokens x {repeats} repeats")


# ============================================================================ 5. the files


def write_outputs(config: BenchConfig, data: dict[str, Any], rows: list[dict], settings: TierSettings,
                  prompts: int) -> list[str]:
    """Writes ``--json`` and ``--plot`` (when given); returns a ``wrote PATH`` line for each."""
    lines = []
    if config.json_path:
        lines.append(f"wrote {save_json(config.json_path, data)}")
    if config.plot_path:
        title = config.label or plot_title(config.target, settings, prompts, config.max_new_tokens, config.repeats)
        lines.append(f"wrote {plot_rows(rows, config.plot_path, title=title)}")
    return lines


# ============================================================================ the invocation


@leaves_process_settings
def run_bench_session(config: BenchConfig, *, echo: Callable[[str], None] = print, pair: LoadedPair | None = None,
                      tuned: Any = UNREAD) -> dict[str, Any]:
    """Runs the bench ``config`` describes and reports it through ``echo``; returns the JSON document.

    ``pair``: the pair, when the caller has already loaded it (``viasd demo``); ``tuned``: the tuned
    file beside the mask, when the caller has already read it."""
    check_outputs(config)
    threads = set_threads(config.threads)
    quiet_transformers()
    cost_model = load_cost_model(config.costs) if config.costs else None  # a bad file fails before any model loads
    prompts = read_text_prompts(config)
    planned = plan_bench(config, pair=pair, tuned=tuned)
    pair, spec = planned.pair, planned.spec
    if config.spec_bench:
        echo(spec_bench_note(config))
        prompts = spec_bench_set(config, pair)
    for line in setup_lines(config, spec, pair, len(prompts), threads):
        echo(line)
    # each tiered request's context comes from the plan: the tuned evidence its one drafter check kept
    result = run_bench(pair, spec.settings, config.sampling, prompts, config.plan, task_examples(config.task_examples),
                       progress=lambda m: echo(f"  .. {m}"), chat=config.chat, contexts=planned.context)
    judgement = verdict(result.rows, budget=config.budget, prices=result.prices)
    for line in result_lines(result, judgement):
        echo(line)
    projection = None
    if cost_model is not None:
        lines, projection = projection_report(result.rows, cost_model, pair.routing, spec.settings.gamma + 1, config.budget,
                                              result.costs, result.prices)
        for line in lines:
            echo(line)
    echo(f"bench wall time {result.wall_seconds:.1f}s")
    info = run_info(config, spec, pair, len(prompts), threads, judgement, projection, sys.argv, Path.cwd())
    data = result_json(result, info)
    for line in write_outputs(config, data, result.rows, spec.settings, len(prompts)):
        echo(line)
    return data


__all__ = ["BenchConfig", "run_bench_session"]
