"""``viasd models add NAME --target X --draft Y|prompt-lookup``: the user's own pair, searched, tuned
and named in one command (:mod:`viasd_adapt.tuning.onboard`).

Heavy imports happen inside the command, so ``viasd --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from viasd_adapt.cli.options import DRAFT_HELP, TARGET_HELP, DraftPath, ModelPath, chat_option, finite, placement_options
from viasd_adapt.cli.threads import threads_option
from viasd_adapt.tuning.onboard import DEFAULT_MINUTES


@click.command(name="add")
@click.argument("name")
@click.option("--target", type=ModelPath(), required=True, help=TARGET_HELP)
@click.option("--draft", type=DraftPath(), required=True, help=DRAFT_HELP)
@click.option("--eagle-head", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="An EAGLE head folder for this target, recorded with the pair (viasd generate --framework eagle).")
@click.option("--calib", default=None,
              help="Calibration prompts: a file (one per line or a JSON list; a small file holds out what it can), "
                   "or spec-bench[:TASK,...] [default: Spec-Bench's calibration split for a chat model, else stdlib snippets].")
@click.option("--minutes", type=finite(min=0, min_open=True), default=DEFAULT_MINUTES, show_default=True,
              help="Budget after the first load: a probe prices each stage, the masks, skip ratios, settings and prompts "
                   "are sized to fit, each stage stops on time, and a budget too small for the smallest plan is refused "
                   "naming the minutes it needs.")
@placement_options
@threads_option
@chat_option
@click.option("--out", "root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where pairs live [default: $VIASD_CACHE or ~/.cache/viasd-adapt].")
@click.option("--restart", is_flag=True, help="Discard an interrupted run of this name (its hidden work folder) and start over.")
@click.option("--no-progress", is_flag=True, help="Hide the progress bars.")
def add(name, target, draft, eagle_head, calib, minutes, device, dtype, device_map, threads, chat, root, restart,
        no_progress) -> None:
    """Search the mask, tune, and save your target and drafter as the pair NAME.

    Checks the pair, states an estimate, searches the masks (skip ratio 0.45, and 0.3 and 0.2 when
    the budget allows) and tunes within --minutes, prints the verdict with its uncertainty and each
    ratio's agreement and cost, and writes NAME/ (pair.json naming your files where they are,
    the masks, tuned.json, report.json) for `--pair NAME` and load_pair("NAME"). Interrupted, it
    resumes where it stopped; killed at any point, it leaves no half-written pair. --dtype is
    recorded in pair.json (a .gguf target is cached in it: bfloat16 takes half the disk)."""
    from viasd_adapt.tuning.onboard import AddRequest, add_pair

    request = AddRequest(name=name, target=target, draft=draft, eagle_head=eagle_head, calib=calib, minutes=minutes,
                         threads=threads, dtype=dtype, chat=chat, root=root, device=device, device_map=device_map)
    # the report on stdout, progress on stderr (a closed or full stderr costs nothing: viasd_adapt.cli.output)
    add_pair(request, restart=restart, say=click.echo, note=lambda line: click.echo(line, err=True),
             progress=not no_progress)
