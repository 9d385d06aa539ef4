"""A cheap runtime check that lossy mode is not committing a junk drafter's tokens.

In lossy mode gate 1 commits a draft x when ``u(x) >= (1 - alpha1) p(x)``. A drafter that is
unrelated to the target but has the right vocabulary size (a wrong checkpoint, random weights, a
drafter for another tokenizer with the same size) spreads p thin, so ``(1 - alpha1) p(x)`` is tiny
and gate 1 lets many of its tokens through: the output degrades and nothing says so. The audit mode
would show it (q's overrule rate), but nothing suggests running it.

The monitor looks at evidence the cycle already computed, so it costs no forward pass (one
argmax and one entropy over the slim verifier's rows of committed drafts):

* **greedy**: how many of the drafts gate 1 committed are also the slim verifier's own argmax. On
  the shipped demo pair 80-100% per generation; with a random drafter of the same vocabulary 0-35%.
* **sampling**: a sampled token need not be the argmax, so instead the mean of
  ``log u(x) + H(u)`` over committed drafts: zero on average for tokens drawn from u itself, about
  -0.9 to +0.5 nats on the demo pair (temperature 0.8 and 1), -1.6 to -5.9 for a random drafter.

When, after at least ``min_committed`` committed drafts, the evidence crosses the threshold of its
kind, it warns once per generation with a :class:`ViasdQualityWarning` and suggests mode ``audit``.
Short generations (a 12-token budget commits fewer than 12 drafts) are judged on stronger evidence
instead: from ``min_committed_strong`` drafts on, greedy warns when even the upper 95% Wilson bound
of the agreement is below ``max_agreement`` (0 of 4 or more, 1 of 8 or more, ...; the demo pair's
80-100% never comes near), sampling when the mean surprise excess is twice as far below its
threshold.
It is a heuristic for an obvious failure, not a quality measurement: a drafter that passes it can
still cost quality, which only ``audit`` measures.

Wiring: the monitor is a plugin, :class:`DrafterMonitorPlugin`. It wraps the gate-1 hook (to see
u and the drafts) and observes each recorded cycle (to see which drafts were committed, after the
budget and EOS cut), and hands both to the :class:`DrafterQualityMonitor` of the verify step that
is deciding or recording in the calling thread (:class:`viasd_adapt.core.verify_step.VerifyStep` sets
it around each call). So one plugin manager can serve several runs, and threads, without their
evidence mixing, and no framework wires the monitor itself.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Iterator

import pluggy
import torch

from viasd_adapt.core.markers import hookimpl
from viasd_adapt.core.rules import gather_token_probs
from viasd_adapt.core.settings import Mode
from viasd_adapt.core.tiers import Tier


class ViasdQualityWarning(UserWarning):
    """Lossy mode appears to be committing tokens of a drafter that is unrelated to the target."""


@dataclass
class DrafterEvidence:
    """What one generation's gate-1 commits say about the drafter.

    Attributes:
        committed: drafts gate 1 committed (tier 1 tokens).
        agreeing: of those, how many were also the slim verifier's argmax at their position.
        u_mass: the sum over them of u(x), the probability the slim verifier gave the draft.
        surprise_excess: the sum over them of ``log u(x) + H(u)``.
    """

    committed: int = 0
    agreeing: int = 0
    u_mass: float = 0.0
    surprise_excess: float = 0.0

    @property
    def agreement(self) -> float:
        return self.agreeing / self.committed if self.committed else 1.0

    @property
    def mean_u(self) -> float:
        return self.u_mass / self.committed if self.committed else 1.0

    @property
    def mean_surprise_excess(self) -> float:
        """Mean of ``log u(x) + H(u)`` (nats): 0 for tokens drawn from u, very negative for junk."""
        return self.surprise_excess / self.committed if self.committed else 0.0


@dataclass(frozen=True)
class JunkThresholds:
    """When the evidence counts as junk: at least ``min_committed`` committed drafts, and (greedy)
    at most ``max_agreement`` of them were u's argmax, or (sampling) their mean surprise excess is
    at most ``max_surprise_excess`` nats. Chosen with wide margins on both sides of the figures in
    the module docstring."""

    min_committed: int = 12
    max_agreement: float = 0.5
    max_surprise_excess: float = -2.5
    min_committed_strong: int = 4


class DrafterQualityMonitor:
    """Collects :class:`DrafterEvidence` per generation and warns once when it says junk (lossy only)."""

    def __init__(self, mode: Mode, greedy: bool, framework: str = "", thresholds: JunkThresholds = JunkThresholds()):
        self.active = mode is Mode.LOSSY
        self.greedy = greedy
        self.framework = framework
        self.thresholds = thresholds
        self.evidence = DrafterEvidence()
        self.warned = False
        self._gate1: tuple[torch.Tensor, torch.Tensor] | None = None  # (drafts, u) of the open cycle

    def start(self) -> None:
        """A new generation: the evidence starts again from zero."""
        self.evidence, self.warned, self._gate1 = DrafterEvidence(), False, None

    def _saw_gate1(self, tokens: torch.Tensor, u: torch.Tensor) -> None:
        self._gate1 = (tokens, u)

    def _committed(self, tiers: list[int]) -> None:
        seen, self._gate1 = self._gate1, None
        n = 0
        while n < len(tiers) and tiers[n] == Tier.DRAFT:
            n += 1
        if seen is None or n == 0:
            return
        tokens, u = seen[0][:n], seen[1][:n]
        self.evidence.committed += n
        self.evidence.agreeing += int((u.argmax(dim=-1) == tokens).sum())
        u_x = gather_token_probs(u, tokens)
        self.evidence.u_mass += float(u_x.sum())
        log_u = u.clamp_min(1e-30).log()
        entropy = -(u * log_u).sum(dim=-1)
        self.evidence.surprise_excess += float((entropy + u_x.clamp_min(1e-30).log()).sum())
        if not self.warned and self.looks_like_junk():
            self.warned = True
            warnings.warn(self.message(), ViasdQualityWarning, stacklevel=_first_frame_outside_the_library())

    def looks_like_junk(self) -> bool:
        e, t = self.evidence, self.thresholds
        if e.committed >= t.min_committed:
            if self.greedy:
                return e.agreement <= t.max_agreement
            return e.mean_surprise_excess <= t.max_surprise_excess
        if e.committed < t.min_committed_strong:
            return False
        if self.greedy:
            return wilson_upper(e.agreeing, e.committed) < t.max_agreement
        return e.mean_surprise_excess <= 2 * t.max_surprise_excess

    def message(self) -> str:
        e = self.evidence
        where = f" ({self.framework})" if self.framework else ""
        if self.greedy:
            evidence = f"the slim verifier's own top choice agreed with only {e.agreement:.0%} of them"
        else:
            evidence = (f"the slim verifier found them {-e.mean_surprise_excess:.1f} nats more surprising than its "
                        "own samples on average")
        return (
            f"viasd-adapt{where}: lossy mode committed {e.committed} draft tokens through gate 1, but {evidence} "
            f"(mean u(x) = {e.mean_u:.3f}): the drafter looks unrelated to the target, and its tokens are being "
            "accepted. Measure the damage with mode='audit' (how often the target would overrule), or use "
            "mode='lossless'."
        )


#: Where the warning should not point: the library's own frames, and those of the hook and model
#: plumbing between them (the monitor runs inside pluggy, called from a framework's loop).
_LIBRARY_PARTS = (os.sep + "viasd_adapt" + os.sep, os.sep + "adapters" + os.sep, os.sep + "pluggy" + os.sep,
                  os.sep + "torch" + os.sep, os.sep + "transformers" + os.sep, os.sep + "eagle" + os.sep,
                  os.sep + "contextlib.py", os.sep + "threading.py", os.sep + "concurrent" + os.sep)


def _first_frame_outside_the_library() -> int:
    """The ``stacklevel`` of the first caller outside viasd-adapt and the plumbing it runs in, so
    the warning names the user's line (``generate(...)``), not the plugin that noticed."""
    frame, level = sys._getframe(1), 1
    while frame is not None and any(part in frame.f_code.co_filename for part in _LIBRARY_PARTS):
        frame, level = frame.f_back, level + 1
    return level


def wilson_upper(successes: int, trials: int, z: float = 1.96) -> float:
    """The upper end of the Wilson score interval of a proportion (95% for z = 1.96): how high the
    true agreement rate could plausibly be, given few observations."""
    if trials <= 0:
        return 1.0
    share = successes / trials
    centre = share + z * z / (2 * trials)
    spread = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    return (centre + spread) / (1 + z * z / trials)


class DrafterMonitorPlugin:
    """The monitor as a pluggy plugin (registered once per plugin manager, by the verify step).

    It holds no evidence itself: each hook call goes to the monitor that the calling thread's
    verify step put in place with :meth:`watching` (none outside a verify step's decide or record
    call: then the plugin does nothing). The gate-1 hook is wrapped, never answered, so the rules
    that decide are exactly those without the plugin.
    """

    def __init__(self) -> None:
        self._current = threading.local()

    @contextlib.contextmanager
    def watching(self, monitor: DrafterQualityMonitor) -> Iterator[None]:
        """``monitor`` receives this thread's hook calls for the duration of the block."""
        previous = getattr(self._current, "monitor", None)
        self._current.monitor = monitor if monitor.active else None
        try:
            yield
        finally:
            self._current.monitor = previous

    def _monitor(self) -> DrafterQualityMonitor | None:
        return getattr(self._current, "monitor", None)

    @hookimpl(wrapper=True)
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        monitor = self._monitor()
        if monitor is not None:
            monitor._saw_gate1(tokens, u)
        return (yield)

    @hookimpl(tryfirst=True)
    def viasd_cycle_finished(self, cycle, metrics):
        monitor = self._monitor()
        if monitor is not None:
            monitor._committed([int(t) for t in cycle.tiers])


MONITOR_PLUGIN_NAME = "viasd-drafter-monitor"


def monitor_plugin_of(manager: pluggy.PluginManager) -> DrafterMonitorPlugin:
    """The manager's monitor plugin, registered on first use (it is stateless between runs)."""
    plugin = manager.get_plugin(MONITOR_PLUGIN_NAME)
    if plugin is None:
        plugin = DrafterMonitorPlugin()
        manager.register(plugin, name=MONITOR_PLUGIN_NAME)
    return plugin


__all__ = ["MONITOR_PLUGIN_NAME", "DrafterEvidence", "DrafterMonitorPlugin", "DrafterQualityMonitor", "monitor_plugin_of", "JunkThresholds", "ViasdQualityWarning", "wilson_upper"]
