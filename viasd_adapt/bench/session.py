"""One ``viasd bench`` invocation end to end: options -> context -> run -> table, JSON, plot.

Shared by the ``bench`` and ``demo`` commands so that both print exactly the same report.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from viasd_adapt.bench.context import build_context, read_prompts_file
from viasd_adapt.bench.goals import check_goals
from viasd_adapt.bench.report import format_costs, format_goals, format_table, result_json, write_json
from viasd_adapt.bench.run import BenchConfig, run_bench
from viasd_adapt.sampling import SamplingConfig

# Benchmarks share the machine; one thread keeps timings comparable and polite. Override with
# the environment variable VIASD_BENCH_THREADS.
DEFAULT_THREADS = 1


def _split(value: str | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(value, tuple):
        return value
    return tuple(part.strip() for part in value.split(",") if part.strip())


def default_prompts(n: int, seed: int = 0) -> list[str]:
    """Held-out stdlib snippets (never seen in training by the project's own pairs)."""
    from viasd_adapt.models.corpus import heldout_prompts

    return heldout_prompts(n, seed=seed, min_chars=200, max_chars=400)


def set_threads() -> int:
    import os

    threads = int(os.environ.get("VIASD_BENCH_THREADS", DEFAULT_THREADS))
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


def plot_title(target_path, settings, preset: str, prompts: int, tokens: int, repeats: int) -> str:
    """Names the pair (the directory holding target/) and the settings that matter."""
    target = Path(str(target_path))
    pair = target.parent.name if target.name == "target" else target.name
    return (
        f"pair {pair}: preset {preset} (alpha1={settings.alpha1}, alpha2={settings.alpha2}, gamma={settings.gamma}), "
        f"{prompts} prompts x {tokens} tokens x {repeats} repeats"
    )


def quiet_transformers() -> None:
    """No weight-loading progress bars or deprecation chatter between the table lines."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


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
    modes: str | tuple[str, ...] = "none,lossless,lossy,audit",
    repeats: int = 3,
    seed: int = 0,
    temperature: float = 0.0,
    preset: str = "default",
    alpha1: float | None = None,
    alpha2: float | None = None,
    gamma: int | None = None,
    device: str = "auto",
    json_path: Path | str | None = None,
    plot_path: Path | str | None = None,
    echo: Callable[[str], None] = print,
    label: str = "",
    context=None,
    cost_repeats: int = 15,
) -> dict[str, Any]:
    """Runs the bench and reports it through ``echo``; returns the JSON document."""
    from viasd_adapt.cli.bench import tier_settings_from_options

    threads = set_threads()
    quiet_transformers()
    settings = tier_settings_from_options(preset, alpha1, alpha2, gamma)
    sampling = SamplingConfig(do_sample=temperature > 0, temperature=temperature if temperature > 0 else 1.0)
    config = BenchConfig(
        frameworks=_split(frameworks), modes=_split(modes), max_new_tokens=max_new_tokens, repeats=repeats,
        seed=seed, cost_repeats=cost_repeats,
    )
    if prompts is None:
        prompts = read_prompts_file(prompts_file) if prompts_file else default_prompts(num_prompts, seed)
    need_mask = any(m != "none" for m in config.modes)
    ctx = context or build_context(
        target_path, draft_path, settings, sampling, mask_path=mask_path, need_mask=need_mask, device=device,
        eagle_head=str(eagle_head) if eagle_head else None,
    )
    if ctx.mask is not None:
        note = "  <-- FALLBACK, not searched" if ctx.mask.is_fallback else ""
        echo(f"mask: skipped layers {list(ctx.mask.mask.skipped)} from {ctx.mask.source}{note}")
    echo(
        f"settings: {settings.to_dict()} | sampling: {'greedy' if sampling.greedy else f'T={temperature}'} | "
        f"{len(prompts)} prompts x {max_new_tokens} tokens x {repeats} repeats | device {ctx.device}, {threads} thread(s)"
    )
    result = run_bench(ctx, prompts, config, progress=lambda m: echo(f"  .. {m}"))
    checks = check_goals(result.rows, preset)
    for name, description in result.descriptions.items():
        echo(f"{name}: {description}")
    for name, reason in result.skipped.items():
        echo(f"{name}: SKIPPED ({reason})")
    echo("")
    echo(format_table(result.rows))
    echo("")
    echo(format_costs(result))
    echo(f"peak memory: {result.memory_source}")
    echo("goals:")
    echo(format_goals(checks))
    echo(f"bench wall time {result.wall_seconds:.1f}s")
    run_info = {
        "command": " ".join(shlex.quote(a) for a in sys.argv) if sys.argv else "",
        "label": label,
        "target": str(target_path),
        "draft": str(draft_path),
        "eagle_head": str(eagle_head) if eagle_head else None,
        "mask": ctx.mask.to_dict() if ctx.mask is not None else None,
        "settings": settings.to_dict(),
        "preset": preset,
        "sampling": {"greedy": sampling.greedy, "temperature": temperature},
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "seed": seed,
        "threads": threads,
    }
    data = result_json(result, checks, run_info)
    if json_path:
        echo(f"wrote {write_json(json_path, data)}")
    if plot_path:
        from viasd_adapt.bench.plot import plot_rows

        title = label or plot_title(target_path, settings, preset, len(prompts), max_new_tokens, repeats)
        echo(f"wrote {plot_rows(result.rows, plot_path, title=title)}")
    return data
