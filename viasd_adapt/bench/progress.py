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
from tqdm import tqdm

#: How often a :func:`waiting` bar redraws its elapsed time (seconds).
REFRESH_SECONDS = 0.5


def counted(total: int, description: str, unit: str = "run", enabled: bool = True) -> tqdm:
    """A bar of ``total`` steps on stderr; ``update(1)`` per step, ``close()`` at the end."""
    return tqdm(total=total, desc=description, unit=unit, file=sys.stderr, disable=not enabled, leave=False,
                dynamic_ncols=True)


class Waiting:
    """A bar showing the seconds spent between :meth:`start` and :meth:`stop` (also a context
    manager), for a call that reports nothing; a thread redraws it until it stops."""

    def __init__(self, description: str, enabled: bool = True):
        self.description, self.enabled = description, enabled
        self._bar: tqdm | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "Waiting":
        if self.enabled and self._bar is None:
            self._bar = tqdm(total=None, desc=self.description, file=sys.stderr, leave=False, dynamic_ncols=True,
                             bar_format="{desc}: {elapsed}")
            self._thread = threading.Thread(target=self._redraw, name="viasd-progress", daemon=True)
            self._thread.start()
        return self

    def _redraw(self) -> None:
        while not self._done.wait(REFRESH_SECONDS):
            self._bar.refresh()

    def stop(self) -> None:
        if self._bar is not None:
            self._done.set()
            self._thread.join()
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Waiting":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def waiting(description: str, enabled: bool = True) -> Waiting:
    """A :class:`Waiting` bar, for ``with waiting("loading"): ...``."""
    return Waiting(description, enabled)


__all__ = ["REFRESH_SECONDS", "Waiting", "counted", "waiting"]
