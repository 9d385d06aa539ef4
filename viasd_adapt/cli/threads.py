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

threads_option = click.option(
    "--threads", type=click.IntRange(min=1), default=DEFAULT_THREADS, show_default=True,
    help="torch CPU threads (1 measured fastest on 2 shared cores; docs/results.md, Threads).")


def use_threads(threads: int) -> None:
    """Sets torch's CPU threads for the run (imports torch: call it inside a command)."""
    import torch

    torch.set_num_threads(threads)


__all__ = ["DEFAULT_THREADS", "threads_option", "use_threads"]
