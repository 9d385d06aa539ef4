"""A clock that advances by a fixed tick each time it is read: what a test hands to code that keeps
a time budget, so that every measured price, plan and early stop is the same on any machine."""

from __future__ import annotations


class TickClock:
    """Reads 0, tick, 2 tick, ...; ``jump(seconds)`` moves it on without a read (a stage that ran long)."""

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self.now = 0.0
        self.reads = 0

    def __call__(self) -> float:
        self.now += self.tick
        self.reads += 1
        return self.now

    def jump(self, seconds: float) -> None:
        self.now += seconds
