"""``viasd bench``: the autoregressive target, each framework untiered, and each tier mode, on
the same prompts and seeds, interleaved and repeated; a table, JSON, a plot and the goal checks.

Heavy imports happen inside the command so ``viasd --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

DEFAULT_FRAMEWORKS = "hf,pearl"
DEFAULT_MODES = "none,lossless,lossy,audit"


def tier_settings_from_options(preset: str, alpha1: float | None, alpha2: float | None, gamma: int | None):
    """TierSettings from ``--preset`` then explicit overrides (validated by TierSettings)."""
    from viasd_adapt.settings import CONSERVATIVE, TierSettings

    values: dict = dict(CONSERVATIVE) if preset == "conservative" else {}
    if alpha1 is not None:
        values["alpha1"] = alpha1
    if alpha2 is not None:
        values["alpha2"] = alpha2
    if gamma is not None:
        values["gamma"] = gamma
    return TierSettings(**values)


def bench_options(function):
    """Options shared by ``viasd bench`` (and reused by scripts)."""
    options = [
        click.option("--mask", "mask_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="DIMR mask artifact [default: mask.json beside the target directory, else a labelled fallback mask]."),
        click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="JSON list of prompt strings, or one prompt per line [default: held-out stdlib snippets]."),
        click.option("--num-prompts", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Number of held-out prompts when --prompts is not given."),
        click.option("--max-new-tokens", type=int, default=64, show_default=True, help="Tokens generated per prompt (EOS does not stop)."),
        click.option("--frameworks", default=DEFAULT_FRAMEWORKS, show_default=True, help="Comma-separated: hf, pearl, eagle, engine (the classic SD loop of viasd_adapt.engine)."),
        click.option("--modes", default=DEFAULT_MODES, show_default=True, help="Comma-separated tier modes (none is always run)."),
        click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Interleaved repeats; medians are reported."),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--temperature", type=click.FloatRange(min=0.0), default=0.0, show_default=True, help="0 = greedy."),
        click.option("--preset", type=click.Choice(["default", "conservative"]), default="default", show_default=True,
                     help="Tier thresholds: the paper's (alpha1=0.5, alpha2=0.3) or CONSERVATIVE (alpha1=0.2, alpha2=0.1)."),
        click.option("--alpha1", type=float, default=None, help="Override gate-1 tolerance."),
        click.option("--alpha2", type=float, default=None, help="Override gate-2 tolerance."),
        click.option("--gamma", type=int, default=None, help="Draft block length [default 5]."),
        click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda."),
        click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the rows as JSON."),
        click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a PNG (speedup and rejection rate by row)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


@click.command()
@click.option("--target", "target_path", type=click.Path(file_okay=False, path_type=Path), default=None, help="Target model directory.")
@click.option("--draft", "draft_path", type=click.Path(file_okay=False, path_type=Path), default=None, help="Drafter model directory.")
@click.option("--pair", default=None, help="Instead of --target/--draft: a pair name (e.g. demo, tiny) or pair directory; "
              "its mask.json and eagle_head/ are used unless --mask/--eagle-head are given.")
@click.option("--eagle-head", type=click.Path(path_type=Path), default=None, help="EAGLE draft head (for the eagle rows).")
@bench_options
def bench(target_path, draft_path, pair, eagle_head, **options) -> None:
    """Benchmark the autoregressive target, each framework untiered, and each tier mode."""
    from viasd_adapt.bench.session import run_bench_session
    from viasd_adapt.errors import ConfigError

    if pair is not None:
        if target_path or draft_path:
            raise ConfigError("give either --pair or --target/--draft, not both")
        from viasd_adapt.models.registry import resolve_pair

        paths = resolve_pair(pair)
        target_path, draft_path = paths.target, paths.draft
        eagle_head = eagle_head or paths.eagle_head
        options["mask_path"] = options["mask_path"] or paths.mask
    elif not (target_path and draft_path):
        raise ConfigError("give --target and --draft (model directories), or --pair NAME")
    run_bench_session(target_path, draft_path, eagle_head=eagle_head, echo=click.echo, **options)
