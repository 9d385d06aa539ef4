"""Process-wide settings that a library function may set for its own run, and gives back.

torch's intra-op thread count and transformers' log verbosity and progress bars belong to the
program, not to viasd-adapt. A bench, a demo or an onboarding sets them for its own timing (one
thread unless asked) and its own quiet output; a program that calls it from Python gets them back
as they were when the call returns, so a later ``generate`` is neither slowed to one thread nor
deaf to transformers' notices. The command line's edge sets them for the whole process instead.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)


@contextmanager
def process_settings_restored() -> Iterator[None]:
    """Restores torch's thread count and transformers' verbosity and progress bars on exit, also
    when the body raises."""
    import torch
    from transformers.utils import logging as hf_logging

    threads = torch.get_num_threads()
    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        hf_logging.set_verbosity(verbosity)
        (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()


def leaves_process_settings(function: F) -> F:
    """Decorates a library entry point that sets threads or transformers' logging for its run."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with process_settings_restored():
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["leaves_process_settings", "process_settings_restored"]
