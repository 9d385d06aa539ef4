"""A cheap runtime check that lossy mode is not running on a junk drafter.

In lossy mode gate 1 commits a draft x when ``u(x) >= (1 - alpha1) p(x)``. A drafter that is
unrelated to the target but has the right vocabulary size (a wrong checkpoint, random weights, a
drafter for another tokenizer with the same size) spreads p thin, so ``(1 - alpha1) p(x)`` is tiny
and gate 1 lets many of its tokens through: the output degrades and nothing says so. A junk drafter
whose p is peaked on wrong tokens (a trained drafter for another tokenizer) is rejected instead, so
the slim verifier writes nearly the whole output (lossy) and drafting buys nothing: again nothing
said so. The audit mode would show it (q's overrule rate), but nothing suggests running it.

The monitor looks at evidence the cycle already computed, so it costs no forward pass (an argmax
and an entropy over the slim verifier's rows of the drafts gate 1 judged):

* **committed drafts** (tier 1 tokens). Greedy: how many of them are also u's argmax; sampling: the
  mean of ``log u(x) + H(u)`` over them (zero on average for tokens drawn from u itself). After
  ``min_committed`` (12) of them, greedy warns at most 50% agreeing, sampling at a mean at most -2.5
  nats; short generations are judged on stronger evidence from ``min_committed_strong`` (4) on:
  greedy when even the upper 95% Wilson bound of the agreement is below 50% (0 of 4 or more, 1 of
  8 or more, ...), sampling when the mean is twice as far below its threshold.
* **judged drafts** (every draft gate 1 judged, committed or rejected): the mean of ``log u(x) +
  H(u)`` over all of them, in greedy decoding and sampling alike. From ``min_judged`` (20) judged
  drafts on, a mean at most ``max_judged_surprise_excess`` (-5.0 nats) warns. Greedy agreement is
  no measure here: SmolLM2's own drafter proposes u's argmax for only 19-45% of its drafts (its
  committed drafts agree 56-90%), while its surprise excess stays above -2.4 nats. Drafts of a
  point mass (prompt lookup copies n-grams: u's view of a copy judges the text, not a model, and
  gate 1 commits a point mass only where u is confident) are left out of this rule.
* **first drafts of untiered cycles** (q's view): the adaptive tier runs a lossy sequence untiered
  wherever the tier does not pay, and for a junk drafter that is nearly every cycle, so gate 1 alone
  would see too few drafts to judge. An untiered cycle's full pass has q's row at its first draft,
  the one draft that follows text the run committed (q's rows after it follow the earlier drafts,
  which for junk are junk themselves). The measure is the draft's *rank* in q, as a share of the
  vocabulary (0: q's argmax): a token drawn at random sits half-way down (0.5) whatever the text,
  while a related drafter, even a weak one on text it drafts badly, proposes tokens q ranks near
  the top. From ``min_first`` (12) first drafts on, a median rank share of at least
  ``min_first_median_rank`` (0.1) warns, greedy and sampling alike. Agreement with q's argmax and
  surprise are no measure here: SmolLM2's own distilled drafter agrees with q on 0-33% of its first
  drafts and averages -2.7 to -12 nats at temperature 1, like junk. Measured
  (``benchmarks/junk_drafter_adaptive.py``; hf, 32 tokens, the first 12 first drafts): the median
  rank share of the pairs' own drafters is at most 0.005 (demo) and 0.042 (SmolLM2, temperature 1);
  random-weights and permuted drafters sampled at temperature 1, or permuted ones greedy, 0.20 to
  0.75. A random-weights drafter in greedy decoding proposes one constant token, which on the demo
  pair is a common one (rank share 0.005-0.034): not caught here, and harmless to fidelity, since
  an untiered cycle is exact. Point masses are left out, as above.

Measured (``benchmarks/junk_drafter_monitor.py``, ``benchmarks/results/junk_drafter_monitor.txt``):
64-token lossy generations with the default settings, greedy and at temperature 1, on the bench
split (24 held-out stdlib snippets for the demo and demo-ee pairs, 12 first turns of Spec-Bench's
bench split for SmolLM2), good drafters (each pair's own, prompt lookup, the demo EAGLE head) and
junk ones of the same vocabulary (random weights of the drafter's architecture, two seeds; the
pair's own drafter with its token ids permuted, a trained LM whose ids mean other strings; a
random-weights EAGLE head). The judged drafts' mean surprise excess over a whole generation is
+0.5 to +2.9 nats (greedy) and -2.6 to -0.3 (sampling) for the good drafters, at worst -4.1 early
in a generation (SmolLM2 at temperature 1); the junk drafters' reaches -5.0 or less in every junk
generation but two (both random-weights drafters on one snippet, where their constant draft is what
u picks anyway, 51 of 57 times: harmless there), at -4.3 to -13 over a whole generation otherwise.
Rates, per generation:

* false alarms: 5 of 288 good generations (1.7%), all five on the demo pairs in greedy decoding
  (5 of 96, 5%) and all from the committed-drafts rule, which dips early in a generation (e.g. 3
  of the first 14 committed drafts agreeing); the judged rule adds none (0 of 192 code-pair, 0 of
  48 SmolLM2 and 0 of 48 EAGLE generations). SmolLM2: 0 of 48.
* detection: 406 of 408 junk generations (99.5%; the committed-drafts rule alone: 232, 57%);
  SmolLM2: 72 of 72 (the committed-drafts rule alone: 24); EAGLE: 48 of 48. The warning comes
  after the 4th to 11th cycle.

It is a heuristic for an obvious failure, not a quality measurement: a drafter that passes it can
still cost quality, which only ``audit`` measures. EAGLE heads get wider committed-drafts
thresholds and judge from 40 drafts on (a cycle judges a whole path;
``viasd_adapt.adapters.eagle.session.EAGLE_THRESHOLDS``).

Wiring: the monitor is a plugin, :class:`DrafterMonitorPlugin`. It wraps the gate-1 hook (to see
u, p and the drafts) and the lossless-acceptance hook (an untiered cycle's q over its drafts), and
observes each recorded cycle (to see which drafts were committed, after
the budget and EOS cut), and hands both to the :class:`DrafterQualityMonitor` of the verify step
that is deciding or recording in the calling thread (:class:`viasd_adapt.core.verify_step.VerifyStep`
sets it around each call). So one plugin manager can serve several runs, and threads, without their
evidence mixing, and no framework wires the monitor itself.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import threading
import warnings
from dataclasses import dataclass, field
from typing import Iterator

import pluggy
import torch

from viasd_adapt.core.markers import hookimpl
from viasd_adapt.core.notices import caller_stacklevel
from viasd_adapt.core.rules import gather_token_probs
from viasd_adapt.core.settings import Mode
from viasd_adapt.core.tiers import Tier


class ViasdQualityWarning(UserWarning):
    """Lossy mode appears to be committing tokens of a drafter that is unrelated to the target."""


@dataclass
class DrafterEvidence:
    """What one generation's gate-1 decisions say about the drafter.

    Attributes:
        committed: drafts gate 1 committed (tier 1 tokens).
        agreeing: of those, how many were also the slim verifier's argmax at their position.
        u_mass: the sum over them of u(x), the probability the slim verifier gave the draft.
        surprise_excess: the sum over them of ``log u(x) + H(u)``.
        judged, judged_agreeing, judged_surprise_excess: the same over every draft gate 1 judged,
            committed or rejected (u's view of all of them).
        point_mass: whether every judged draft came from a point mass (prompt lookup's drafts).
        first_ranks: per untiered cycle, its first draft's rank in q as a share of the vocabulary
            (0: q's argmax; :meth:`add_first`).
        first_point_mass: whether every one of those drafts came from a point mass.
    """

    committed: int = 0
    agreeing: int = 0
    u_mass: float = 0.0
    surprise_excess: float = 0.0
    judged: int = 0
    judged_agreeing: int = 0
    judged_surprise_excess: float = 0.0
    point_mass: bool = True
    first_ranks: list[float] = field(default_factory=list)
    first_point_mass: bool = True

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

    @property
    def median_first_rank(self) -> float:
        """The median of :attr:`first_ranks` (0 with none)."""
        return statistics.median(self.first_ranks) if self.first_ranks else 0.0

    @property
    def judged_agreement(self) -> float:
        return self.judged_agreeing / self.judged if self.judged else 1.0

    @property
    def mean_judged_surprise_excess(self) -> float:
        return self.judged_surprise_excess / self.judged if self.judged else 0.0

    def add_first(self, token: torch.Tensor, q_row: torch.Tensor, point_mass: bool) -> None:
        """One untiered cycle: q's row ``q_row`` at its first draft ``token`` (a 0-d tensor). Tokens
        q gives the same probability share their ranks (the middle one is taken): a draft that
        top-k or top-p sampling zeroed in q sits in the middle of the zeroed tail, not at its top."""
        at = q_row[token]
        above, tied = torch.stack(((q_row > at).sum(), (q_row == at).sum())).tolist()  # one read from the device
        self.first_ranks.append((above + (tied - 1) / 2) / q_row.shape[-1])
        self.first_point_mass = self.first_point_mass and point_mass

    def add(self, tokens: torch.Tensor, u: torch.Tensor, committed: int, point_mass: bool) -> None:
        """One cycle: gate 1 judged ``tokens`` (u's rows over them: ``u``) and committed the first ``committed``."""
        if tokens.numel() == 0:
            return
        agrees = u.argmax(dim=-1) == tokens
        u_x = gather_token_probs(u, tokens)
        entropy = -(u * u.clamp_min(1e-30).log()).sum(dim=-1)
        excess = entropy + u_x.clamp_min(1e-30).log()
        self.judged += int(tokens.numel())
        self.judged_agreeing += int(agrees.sum())
        self.judged_surprise_excess += float(excess.sum())
        self.point_mass = self.point_mass and point_mass
        if committed:
            self.committed += committed
            self.agreeing += int(agrees[:committed].sum())
            self.u_mass += float(u_x[:committed].sum())
            self.surprise_excess += float(excess[:committed].sum())


@dataclass(frozen=True)
class JunkThresholds:
    """When the evidence counts as junk.

    Committed drafts: at least ``min_committed`` of them, and (greedy) at most ``max_agreement``
    of them were u's argmax, or (sampling) their mean surprise excess is at most
    ``max_surprise_excess`` nats; from ``min_committed_strong`` on, on stronger evidence (greedy:
    the Wilson bound below ``max_agreement_strong``; module docstring). Judged drafts (every draft
    gate 1 judged, of a drafter that is not a point mass): at least ``min_judged`` of them, and
    their mean surprise excess at most ``max_judged_surprise_excess`` (greedy and sampling);
    ``min_judged=None`` leaves the judged drafts out. Chosen from the measurements in the module
    docstring: -5.0 lies in the middle of the range (-4.5 to -5.5) where no good generation is
    flagged and every flaggable junk one is. First drafts of untiered cycles (q's view, of a drafter
    that is not a point mass): at least ``min_first`` of them, and their median rank share in q at
    least ``min_first_median_rank`` (module docstring: 0.1 lies 2.4x above the highest a pair's own
    drafter reached, and half of the lowest junk did); ``min_first=None`` leaves them out."""

    min_committed: int = 12
    max_agreement: float = 0.5
    max_surprise_excess: float = -2.5
    min_committed_strong: int = 4
    max_agreement_strong: float = 0.5
    min_judged: int | None = 20
    max_judged_surprise_excess: float = -5.0
    min_first: int | None = 12
    min_first_median_rank: float = 0.1


def looks_like_junk(evidence: DrafterEvidence, thresholds: JunkThresholds, greedy: bool) -> str | None:
    """Which evidence says junk ("committed", "judged" or "first"), or None: the monitor's rule, a pure function
    of the evidence so far (``benchmarks/junk_drafter_monitor.py`` replays it on recorded runs)."""
    e, t = evidence, thresholds
    if e.committed >= t.min_committed:
        if (e.agreement <= t.max_agreement) if greedy else (e.mean_surprise_excess <= t.max_surprise_excess):
            return "committed"
    elif e.committed >= t.min_committed_strong:
        if (wilson_upper(e.agreeing, e.committed) < t.max_agreement_strong) if greedy \
                else (e.mean_surprise_excess <= 2 * t.max_surprise_excess):
            return "committed"
    if t.min_judged is not None and not e.point_mass and e.judged >= t.min_judged:
        if e.mean_judged_surprise_excess <= t.max_judged_surprise_excess:
            return "judged"
    if t.min_first is not None and not e.first_point_mass and len(e.first_ranks) >= t.min_first:
        if e.median_first_rank >= t.min_first_median_rank:
            return "first"
    return None


class DrafterQualityMonitor:
    """Collects :class:`DrafterEvidence` per generation and warns once when it says junk (lossy only)."""

    def __init__(self, mode: Mode, greedy: bool, framework: str = "", thresholds: JunkThresholds = JunkThresholds(),
                 enabled: bool = True):
        self.active = enabled and mode is Mode.LOSSY  # enabled=False: a run that asked not to be watched
        self.greedy = greedy
        self.framework = framework
        self.thresholds = thresholds
        self.evidence = DrafterEvidence()
        self.warned = False
        self._gate1: tuple[torch.Tensor, torch.Tensor, bool] | None = None  # (drafts, u, point mass) of the open cycle
        self._untiered: tuple[torch.Tensor, torch.Tensor, bool] | None = None  # (first draft, q's row, point mass)

    def start(self) -> None:
        """A new generation: the evidence starts again from zero."""
        self.evidence, self.warned, self._gate1, self._untiered = DrafterEvidence(), False, None, None

    def _saw_gate1(self, tokens: torch.Tensor, u: torch.Tensor, p: torch.Tensor | None = None) -> None:
        self._gate1 = (tokens, u, _is_point_mass(p))

    def _saw_untiered(self, tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor | None = None) -> None:
        """A full pass judged ``tokens`` by the lossless rule (q's rows: ``q``): in a lossy run, an
        untiered cycle, unless gate 1 already judged this cycle's drafts (a tier cycle asks the
        lossless rule afterwards, of the same drafts, to reveal the untiered arm: not counted again)."""
        if self._gate1 is None and self._untiered is None and tokens.numel():
            self._untiered = (tokens[0], q[0], _is_point_mass(p[:1] if p is not None else None))

    def _committed(self, tiers: list[int]) -> None:
        gate1, untiered, self._gate1, self._untiered = self._gate1, self._untiered, None, None
        if gate1 is not None:
            n = 0
            while n < len(tiers) and tiers[n] == Tier.DRAFT:
                n += 1
            tokens, u, point_mass = gate1
            self.evidence.add(tokens, u[: tokens.shape[0]], n, point_mass)
        elif untiered is not None:
            self.evidence.add_first(*untiered)
        else:
            return
        if not self.warned:
            why = looks_like_junk(self.evidence, self.thresholds, self.greedy)
            if why is not None:
                self.warned = True
                warnings.warn(self.message(why), ViasdQualityWarning, stacklevel=caller_stacklevel())

    def looks_like_junk(self) -> bool:
        return looks_like_junk(self.evidence, self.thresholds, self.greedy) is not None

    def message(self, why: str = "committed") -> str:
        e = self.evidence
        where = f" ({self.framework})" if self.framework else ""
        mean_u = f" (mean u(x) = {e.mean_u:.3f})"  # what the slim verifier gave the committed drafts
        if why == "first":
            evidence = (f"the target ranked the {len(e.first_ranks)} first drafts its untiered cycles judged a median "
                        f"{e.median_first_rank:.0%} of the way down its vocabulary (0%: its own top choice; a random "
                        "token: 50%)")
            mean_u = ""  # q judged these drafts, not u
        elif why == "judged":
            if self.greedy:
                evidence = (f"the slim verifier's own top choice agreed with only {e.judged_agreement:.0%} of the "
                            f"{e.judged} drafts gate 1 judged")
            else:
                evidence = (f"the slim verifier found the {e.judged} drafts gate 1 judged "
                            f"{-e.mean_judged_surprise_excess:.1f} nats more surprising than its own samples on average")
        elif self.greedy:
            evidence = f"the slim verifier's own top choice agreed with only {e.agreement:.0%} of them"
        else:
            evidence = (f"the slim verifier found them {-e.mean_surprise_excess:.1f} nats more surprising than its "
                        "own samples on average")
        consequence = {
            "committed": "and its tokens are being accepted",
            "judged": "so the slim verifier writes most of the output (lossy) and drafting saves nothing",
            "first": ("so drafting saves nothing, and wherever the tier runs the slim verifier writes most of the "
                      "output (lossy)"),
        }[why]
        return (
            f"viasd-adapt{where}: lossy mode committed {e.committed} draft tokens through gate 1, but {evidence}"
            f"{mean_u}: the drafter looks unrelated to the target, {consequence}. Measure the damage with "
            "mode='audit' (how often the target would overrule), or use mode='lossless'."
        )


def _is_point_mass(p: torch.Tensor | None) -> bool:
    """Whether every draft came from a point mass: prompt lookup copies n-grams, and a verifier's view
    of a copy judges the text, not a drafter model."""
    return p is not None and bool((p.max(dim=-1).values >= 1.0 - 1e-6).all())


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
    """The monitor as a pluggy plugin (registered in a lossy run's own plugin manager, by its verify step).

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
            monitor._saw_gate1(tokens, u, p)
        return (yield)

    @hookimpl(wrapper=True)
    def viasd_lossless_accept_prob(self, tokens, proposer, verifier, greedy):
        monitor = self._monitor()
        if monitor is not None:  # a lossy run's untiered cycle (or a tier cycle's reveal: not counted again)
            monitor._saw_untiered(tokens, verifier, proposer)
        return (yield)

    @hookimpl(tryfirst=True)
    def viasd_cycle_finished(self, cycle, metrics):
        monitor = self._monitor()
        if monitor is not None:
            monitor._committed([int(t) for t in cycle.tiers])


MONITOR_PLUGIN_NAME = "viasd-drafter-monitor"


def with_monitor(manager: pluggy.PluginManager) -> tuple[pluggy.PluginManager, DrafterMonitorPlugin]:
    """A manager of the run's own: ``manager``'s plugins and a monitor plugin (``manager`` itself is
    left as it was given)."""
    from viasd_adapt.core.hooks import manager_for_a_run

    plugin = DrafterMonitorPlugin()
    return manager_for_a_run(manager, (MONITOR_PLUGIN_NAME, plugin)), plugin


__all__ = ["ViasdQualityWarning"]
