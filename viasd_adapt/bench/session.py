"""One ``viasd bench`` invocation end to end: options -> pair -> run -> tables, verdict, JSON, plot.

Shared by the ``bench`` and ``demo`` commands so that both print exactly the same report.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from viasd_adapt.config.budget import DEFAULT_MAX_LL_DROP, DEFAULT_MAX_REGRET, Budget
from viasd_adapt.config.advice import delta_message
from viasd_adapt.bench.verdict import verdict
from viasd_adapt.bench.projection import PROJECTION_COLUMNS, load_cost_model, project_rows
from viasd_adapt.bench.prompt_sets import spec_bench_prompts
from viasd_adapt.bench.report import (FIDELITY_COLUMNS, SPEED_COLUMNS, format_costs, format_group_tables, format_table, plot_rows,
                                      result_json, save_json)
from viasd_adapt.bench.run import DEFAULT_MODES, BenchConfig, run_bench
from viasd_adapt.io import relative_name
from viasd_adapt.engine.prompt_lookup import DRAFT_NAME as PROMPT_LOOKUP
from viasd_adapt.prompts.files import read_prompts_file
from viasd_adapt.prompts.splits import bench_snippets
from viasd_adapt.models.pair import LoadedPair, load_pair
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.config.resolve import UNREAD, resolve_settings
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.errors import ConfigError
from viasd_adapt.prompts.spec_bench import is_spec_bench
from viasd_adapt.engine.tier import check_spec_model

DEFAULT_PER_CATEGORY = 2  # Spec-Bench questions per task when --per-category is not given

# Benchmarks share the machine; one thread keeps timings comparable and polite. Override with
# the environment variable VIASD_BENCH_THREADS.
DEFAULT_THREADS = 1
# Seed of the next-line task's held-out draw; the prompt splits draw with seeds of their own
# (viasd_adapt.prompts.splits), so tuning never sees what the bench measures.
TASK_SEED = 1


def split_list(value: str | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, tuple):
        return value
    return tuple(part.strip() for part in value.split(",") if part.strip())


def task_examples(n: int, seed: int = TASK_SEED) -> list[tuple[str, str]]:
    from viasd_adapt.models.corpus import heldout_next_lines

    return heldout_next_lines(n, seed=seed) if n else []


def set_threads() -> int:
    threads = int(os.environ.get("VIASD_BENCH_THREADS", DEFAULT_THREADS))
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


def quiet_transformers() -> None:
    """No weight-loading progress bars or deprecation chatter between the table lines."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def plot_title(target_path, settings: TierSettings, prompts: int, tokens: int, repeats: int) -> str:
    target = Path(str(target_path))
    pair = target.parent.name if target.name == "target" else target.name
    return (f"pair {pair}: alpha1={settings.alpha1}, alpha2={settings.alpha2}, lenience={settings.lenience}, "
            f"gamma={settings.gamma}; {prompts} prompts x {tokens} tokens x {repeats} repeats")


def run_bench_session(
    target_path: Path | str,
    draft_path: Path | str,
    *,
    eagle_head: Path | str | None = None,
    mask_path: Path | str | None = None,
    prompts_file: Path | str | None = None,
    prompts: list[str] | None = None,
    num_prompts: int = 8,
    max_new_tokens: int = 64,
    frameworks: str | tuple[str, ...] = "hf,pearl",
    modes: str | tuple[str, ...] = DEFAULT_MODES,
    repeats: int = 3,
    seed: int = 0,
    temperature: float = 0.0,
    preset: str = "default",
    alpha1: float | None = None,
    alpha2: float | None = None,
    lenience: float | None = None,
    gamma: int | None = None,
    task_prompts: int = 32,
    max_ll_drop: float = DEFAULT_MAX_LL_DROP,
    max_regret: float = DEFAULT_MAX_REGRET,
    device: str = "auto",
    json_path: Path | str | None = None,
    plot_path: Path | str | None = None,
    echo: Callable[[str], None] = print,
    label: str = "",
    pair: LoadedPair | None = None,
    cost_repeats: int = 15,
    per_category: int | None = None,
    chat: str = "auto",
    costs: str | Path | None = None,
    max_overrule: float | None = None,
    pair_mask: Path | str | None = None,
    tuned: Any = UNREAD,
) -> dict[str, Any]:
    """Runs the bench and reports it through ``echo``; returns the JSON document.

    ``prompts_file`` may be ``spec-bench[:names]``: Spec-Bench's bench split, ``per_category``
    questions per task (default 2), every row stopping at EOS as Spec-Bench does, and a table per
    task after the overall ones.

    The settings come from :func:`viasd_adapt.config.resolve.resolve_settings` (defaults, the tuned.json
    beside the mask, the tuner's best points for the lenient and tiered rows, ``preset``, the
    options); with ``pair_mask`` and no ``mask_path`` it also picks the mask, as ``--pair`` does.
    ``tuned``: the tuned file beside the mask when the caller has already read it."""
    from viasd_adapt.io import ensure_writable

    for output, option in ((json_path, "--json"), (plot_path, "--plot")):  # before the first forward, not after the run
        if output:
            ensure_writable(output, option)
    threads = set_threads()
    quiet_transformers()
    budget = Budget(max_ll_drop, max_overrule, max_regret)  # the one budget rule, also viasd tune's
    spec = resolve_settings(mask_path, pair_mask=pair_mask if mask_path is None else None, best_points=True, preset=preset,
                            flags=dict(alpha1=alpha1, alpha2=alpha2, lenience=lenience, gamma=gamma), tuned=tuned)
    mask_path, settings, tuned = spec.mask_path, spec.settings, spec.tuned
    sampling = SamplingConfig.from_temperature(temperature)
    cost_model = load_cost_model(costs) if costs else None  # a bad file fails before any model loads
    spec_bench = is_spec_bench(prompts_file)
    if per_category is not None and not spec_bench:
        raise ConfigError("--per-category is for --prompts spec-bench[:TASK,...]")
    config = BenchConfig(frameworks=split_list(frameworks), modes=split_list(modes), max_new_tokens=max_new_tokens,
                         repeats=repeats, seed=seed, cost_repeats=cost_repeats, stop_at_eos=spec_bench)
    if prompts is None and not spec_bench:
        prompts = read_prompts_file(prompts_file) if prompts_file else bench_snippets(num_prompts)
    need_mask = any(m in ("lossless", "lossy", "audit") for m in config.modes)
    pair = pair or load_pair(target_path, draft_path, mask_path, need_mask=need_mask, device=device,
                             eagle_head=eagle_head, ratio=settings.ratio, read_masks=spec.masks)
    if spec_bench:  # needs the loaded pair: MT-bench's second turns follow the target's own first answers
        echo(f"  .. Spec-Bench prompts ({prompts_file}, {per_category or DEFAULT_PER_CATEGORY} per task, bench split; "
             f"chat {chat}): writing the target's first answers for MT-bench second turns")
        prompts = spec_bench_prompts(pair, str(prompts_file), per_category or DEFAULT_PER_CATEGORY, chat, max_new_tokens)
        task_prompts = 0  # the next-line task is stdlib code; Spec-Bench rows are scored by their fidelity columns
    check_spec_model(spec, pair.target)
    if tuned is not None:
        echo(f"tuned settings ({tuned.choice}) from beside the mask: {tuned.settings.to_dict()}")
    for note in spec.notes:
        echo(note)
    if pair.mask is not None:
        mask = pair.mask
        note = "  <-- FALLBACK, not searched" if mask.is_fallback else ""
        echo(f"mask: skipped layers {list(mask.mask.skipped)} (s1 = {mask.mask.first_skipped}) from {mask.source}{note}")
        advice = delta_message(mask.artifact.delta, mask.artifact.search) if mask.artifact is not None else None
        if advice:
            echo(f"NOTE: {advice}")
    echo(f"settings: {settings.to_dict()} | sampling: {'greedy' if sampling.greedy else f'T={temperature}'} | "
         f"{len(prompts)} prompts x {max_new_tokens} tokens x {repeats} repeats | device {pair.device}, {threads} thread(s)")
    task = task_examples(task_prompts)
    result = run_bench(pair, settings, sampling, prompts, config, task, progress=lambda m: echo(f"  .. {m}"), chat=chat)
    for name, description in result.descriptions.items():
        echo(f"{name}: {description}")
    for name, reason in result.skipped.items():
        echo(f"{name}: SKIPPED ({reason})")
    echo("\nspeed (cost):")
    echo(format_table(result.rows, SPEED_COLUMNS))
    echo("\nfidelity (LL_drop = target log-likelihood per token below the target's own output; "
         f"next_line = exact match on {result.task_prompts} held-out next lines):")
    echo(format_table(result.rows, FIDELITY_COLUMNS))
    if result.groups:
        echo("\nper Spec-Bench task (tau = committed tokens per target forward; x_ar = tokens/s over AR, same run):")
        echo(format_group_tables(result))
    echo("")
    echo(format_costs(result))
    echo(f"peak memory: {result.memory_source}")
    judgement = verdict(result.rows, budget=budget)
    if judgement:
        echo("verdict:")
        for line in judgement:
            echo(f"  {line}")
    projection = None
    if cost_model is not None:
        projected = project_rows(result.rows, cost_model, pair.routing, settings.gamma + 1)
        echo(f"\nPROJECTION, not a measurement: the pass counts measured above, priced with the forward costs of "
             f"{cost_model.label} ({cost_model.source or 'cost file'}):")
        echo(format_table(projected, PROJECTION_COLUMNS))
        projected_verdict = verdict(projected, budget=budget)
        for line in projected_verdict:
            echo(f"  projected: {line}")
        projection = {"cost_model": cost_model.__dict__, "rows": [
            {k: r.get(k) for k in ("framework", "mode", "full_equivalent_per_token", "projected_speedup_vs_ar")} for r in projected],
            "verdict": projected_verdict}
    echo(f"bench wall time {result.wall_seconds:.1f}s")
    run_info = {
        # argv[0] by name only: a results file must not carry the path of the machine that ran it
        "command": " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
        "label": label,
        # names relative to the working folder (else the last component): results travel, machine paths don't
        "target": relative_name(target_path, Path.cwd()),
        "draft": str(draft_path) if str(draft_path) == PROMPT_LOOKUP else relative_name(draft_path, Path.cwd()),
        "eagle_head": relative_name(eagle_head, Path.cwd()) if eagle_head else None,
        "mask": pair.mask.to_dict() if pair.mask is not None else None,
        "tuned": tuned.to_json() if tuned is not None else None,
        "settings": settings.to_dict(),
        "preset": preset,
        "sampling": {"greedy": sampling.greedy, "temperature": temperature},
        "prompts": len(prompts),
        "prompts_source": str(prompts_file) if prompts_file else "held-out stdlib snippets",
        "per_category": (per_category or DEFAULT_PER_CATEGORY) if spec_bench else None,
        "chat": chat,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "seed": seed,
        "threads": threads,
        "max_ll_drop": max_ll_drop,
        "max_regret": max_regret,
        **({"max_overrule": max_overrule} if max_overrule is not None else {}),
        "verdict": judgement,
        "projection": projection,
    }
    data = result_json(result, run_info)
    if json_path:
        echo(f"wrote {save_json(json_path, data)}")
    if plot_path:
        title = label or plot_title(target_path, settings, len(prompts), max_new_tokens, repeats)
        echo(f"wrote {plot_rows(result.rows, plot_path, title=title)}")
    return data
