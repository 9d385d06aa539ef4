"""``--threads N`` of every command that runs models, and the default it takes.

The default is one thread: on the 2-core machines this project is measured on, a generate or a
search ran faster with one torch thread than with two whenever anything else ran beside it, and
never much slower alone (README, "Threads"; docs/results.md, "Threads"). torch's own default (every
core) was the slowest under load: 168 s against 21 s for the same 24 tokens.
"""

from __future__ import annotations

import click

#: The measured default (module docstring).
DEFAULT_THREADS = 1
#: The most threads ``--threads`` takes: far above any machine's cores, far below what makes torch
#: fail with a ``ValueError`` of its own (an int it cannot hold).
MAX_THREADS = 1024


def _note_above_cores(ctx: click.Context, param: click.Parameter, threads: int) -> int:
    """Says (on stderr, before any model loads) when ``--threads`` asks for more threads than the
    machine has cores: allowed, but the threads then share cores and a run is slower, not faster."""
    import os

    cores = os.cpu_count()
    if threads is not None and cores and threads > cores:
        click.echo(f"note: --threads {threads} is more than this machine's {cores} cores; the threads share them "
                   "(a run is slower, not faster, above the core count)", err=True)
    return threads


#: ``--threads`` of ``viasd models build``: its own help, the same domain and note.
threads_type = click.IntRange(min=1, max=MAX_THREADS)

threads_option = click.option(
    "--threads", type=threads_type, default=DEFAULT_THREADS, show_default=True, callback=_note_above_cores,
    help="torch CPU threads (1 measured fastest on 2 shared cores; docs/results.md, Threads).")


def use_threads(threads: int) -> None:
    """Sets torch's CPU threads for the run (imports torch: call it inside a command)."""
    import torch

    torch.set_num_threads(threads)


__all__ = ["DEFAULT_THREADS", "MAX_THREADS", "threads_option", "threads_type", "use_threads"]
