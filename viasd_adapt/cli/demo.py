"""``viasd demo``: the README's first command (shipped pair, tier-coloured completions, a bench)."""

from __future__ import annotations

from pathlib import Path

import click

from viasd_adapt.cli.options import chat_option


@click.command()
@click.option("--pair", default=None, help="A pair name or directory instead of the shipped demo pair.")
@click.option("--quick", is_flag=True, help="Smoke-test sizes (same as VIASD_DEMO_BUDGET=tiny).")
@click.option("--frameworks", default=None, help="Frameworks in the small bench [default: hf,pearl, plus eagle when the pair ships an EAGLE head].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the bench rows as JSON.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the bench plot (PNG).")
@chat_option
def demo(pair, quick, frameworks, json_path, plot_path, chat) -> None:
    """Show the three tiers at work on the shipped demo pair, then run a small bench (about 2 min)."""
    import sys

    from viasd_adapt.bench.demo import budget_from_env, run_demo

    run_demo(pair=pair, budget=budget_from_env(quick), echo=click.echo, colour=sys.stdout.isatty(),
             json_path=json_path, plot_path=plot_path, frameworks=frameworks, chat=chat)
