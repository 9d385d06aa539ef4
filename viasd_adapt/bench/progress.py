"""Progress bars on stderr for the long steps of ``viasd demo`` (loading, the bench's runs, the
forward-cost probes), so that a user sees the run moving and the answer text on stdout stays clean.

Two kinds: :func:`counted` for steps whose size is known (one tick per generation), and
:func:`waiting` for one call that takes a while and reports nothing (loading a GGUF file,
timing forwards): a bar that shows the time elapsed, refreshed by a thread of its own until the call
returns. ``enabled=False`` shows nothing (tests, ``--no-progress``).
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from tqdm import tqdm

#: How often a :func:`waiting` bar redraws its elapsed time (seconds).
REFRESH_SECONDS = 0.5


def counted(total: int, description: str, unit: str = "run", enabled: bool = True) -> tqdm:
    """A bar of ``total`` steps on stderr; ``update(1)`` per step, ``close()`` at the end."""
    return tqdm(total=total, desc=description, unit=unit, file=sys.stderr, disable=not enabled, leave=False,
                dynamic_ncols=True)


@contextmanager
def waiting(description: str, enabled: bool = True) -> Iterator[None]:
    """A bar showing the seconds spent in the ``with`` block (for a call that reports nothing)."""
    if not enabled:
        yield
        return
    bar = tqdm(total=None, desc=description, file=sys.stderr, leave=False, dynamic_ncols=True,
               bar_format="{desc}: {elapsed}")
    done = threading.Event()

    def redraw() -> None:
        while not done.wait(REFRESH_SECONDS):
            bar.refresh()

    thread = threading.Thread(target=redraw, name="viasd-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        bar.close()


__all__ = ["REFRESH_SECONDS", "counted", "waiting"]
