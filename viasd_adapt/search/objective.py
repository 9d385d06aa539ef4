"""The DIMR objective: the routed-path cost of a mask on a fixed calibration window.

    J(z) = C(u_z || p) + C(q || u_z)    (alpha1 on the first segment, alpha2 on the second)

Calibration is fixed and the forward pass is deterministic, so J is a deterministic function of z:
the observed minimum of a search is the exact minimum of what was evaluated, and no re-evaluation
of the top masks is needed (re-evaluating the best points pays only when the cost is noisy).

Delta is reported with the direct path p -> q checked at tolerance alpha2, i.e. the tolerance q
applies when it checks p's tokens itself in lossy escalation:

    Delta(z) = C_alpha2(q || p) - [C_alpha1(u_z || p) + C_alpha2(q || u_z)]

(The paper's Eq. 10 uses one alpha throughout; ``routing_delta`` keeps that reading available.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from viasd_adapt.checks import vocab_size_of
from viasd_adapt.core.cost import block_cost, routed_path_cost, routing_delta, top1_margin_cost
from viasd_adapt.core.rules import BUILTIN_RULES, TierRules, rule_for
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.search.decoder_windows import CalibrationSet, TokenWindows, batch_size_for, scored_log_probs
from viasd_adapt.core.settings import Mode, TierSettings


@dataclass(frozen=True)
class MaskScore:
    """Everything measured about one mask on the calibration window."""

    cost: float  # routed-path cost summed over tau positions (the objective)
    delta: float  # Delta(z), see module docstring
    agreement: float  # teacher-forced argmax agreement of u_z with q on the scored positions
    escalation: float | None = None  # estimated share of cycles that call q (escalation_rate)

    def per_token(self, tau: int) -> float:
        return self.cost / max(tau, 1)


def argmax_agreement(logp_a: torch.Tensor, logp_b: torch.Tensor) -> float:
    """Fraction of positions where two distributions have the same most likely token."""
    return (logp_a.argmax(-1) == logp_b.argmax(-1)).float().mean().item()


class PrefixStates:
    """The residual stream entering every decoder layer of the full target on fixed windows.

    A slim verifier computes exactly what the target computes below its first skipped layer s1, so
    a mask's teacher-forced forward can start at s1 from the stored input of layer s1: the layers
    below s1 become stubs and the last of them injects the stored tensor
    (:class:`~viasd_adapt.routing.shared.InjectLayer`, the same mechanism as the decoding-time
    shared prefix). One capture forward of the target fills it; memory is
    ``L x windows x length x hidden`` floats (83 MB for SmolLM2-135M on 12 windows of 96 tokens).
    Results equal the plain slim forward (tested); only decoder-only stacks are supported, anything
    else returns None from :meth:`build` and is scored the plain way.
    """

    def __init__(self, target: nn.Module, windows: TokenWindows, batch_size: int | None, states: list[list[torch.Tensor]]):
        self.target, self.windows, self.batch_size, self.states = target, windows, batch_size, states

    @classmethod
    def build(cls, target: nn.Module, windows: TokenWindows, batch_size: int | None = None) -> "PrefixStates | None":
        from viasd_adapt.routing.layers import find_decoder_stack
        from viasd_adapt.routing.shared import CaptureLayer, HiddenSlot
        from viasd_adapt.routing.view import build_layer_view

        stack = find_decoder_stack(target)
        if stack.encoder_decoder or hasattr(windows, "log_probs"):
            return None
        slots = [HiddenSlot() for _ in range(stack.num_layers)]
        try:
            view = build_layer_view(target, [CaptureLayer(slot, i, inner=layer)
                                             for i, (slot, layer) in enumerate(zip(slots, stack.layers))])
        except Exception:  # an architecture the views do not support: plain scoring
            return None
        states: list[list[torch.Tensor]] = []
        batch_size = batch_size or batch_size_for(windows, vocab=vocab_size_of(target))  # the stored states' batches

        def collect(_number: int) -> None:
            if any(slot.value is not None for slot in slots):
                states.append([slot.value for slot in slots])
            for slot in slots:
                slot.value = None

        scored_log_probs(view, windows, batch_size, before_batch=collect)
        collect(-1)
        if len(states) != -(-windows.input_ids.size(0) // batch_size):
            return None
        return cls(target, windows, batch_size, states)

    def log_probs(self, mask: RoutingMask) -> torch.Tensor:
        """u_z's scored log-probs on the windows, from layer s1 on."""
        from viasd_adapt.routing.layers import find_decoder_stack
        from viasd_adapt.routing.shared import HiddenSlot, InjectLayer
        from viasd_adapt.routing.view import PassThroughLayer, build_layer_view

        keep = list(mask.keep)
        s1 = keep.index(False) if False in keep else len(keep)
        if s1 == 0:
            return scored_log_probs(SlimVerifier(self.target, mask).model, self.windows, self.batch_size)
        stack = find_decoder_stack(self.target)
        slot = HiddenSlot()
        layers = ([PassThroughLayer(i) for i in range(s1 - 1)] + [InjectLayer(slot, s1 - 1)]
                  + [layer if keep[i] else PassThroughLayer(i) for i, layer in enumerate(stack.layers) if i >= s1])
        view = build_layer_view(self.target, layers)

        def inject(number: int) -> None:
            slot.value = self.states[number][s1] if s1 < len(keep) else None

        if s1 == len(keep):  # nothing skipped: the target itself
            return scored_log_probs(self.target, self.windows, self.batch_size)
        return scored_log_probs(view, self.windows, self.batch_size, before_batch=inject)


ROUTED, Q_ONLY, MARGIN = "routed", "q-only", "margin"
#: what a mask is scored by: the paper's routed path C(u||p) + C(q||u); C(q||u) alone; or the
#: log-margin of u's greedy top-1 agreement with q (:func:`viasd_adapt.core.cost.top1_margin_cost`)
OBJECTIVE_KINDS = (ROUTED, Q_ONLY, MARGIN)


class MaskObjective:
    """Scores masks of ``target`` against a :class:`CalibrationSet`; one slim forward per mask.

    ``prefix``: start each mask's forward at its first skipped layer from the target's stored
    residual stream (:class:`PrefixStates`; same result, less work). ``batch_size`` None runs all
    windows in one forward when they fit :data:`~viasd_adapt.search.decoder_windows.BATCH_TOKENS`.
    ``seconds`` accumulates the time spent scoring. ``drafter_term=False`` scores C_alpha2(q || u)
    alone: for a drafter with no distribution of its own (prompt lookup), where a proxy p (the
    target's first layer) would pull u towards a model that agrees with q 5% of the time.
    ``rules``: the gate-1 and router rules of the escalation estimate (:func:`escalation_rate`), so
    a run's plugins price masks as they will decide (a plugin manager's
    :func:`~viasd_adapt.core.hooks.hook_rules`); the built-in rules by default.
    """

    def __init__(self, target: nn.Module, calibration: CalibrationSet, settings: TierSettings | None = None,
                 batch_size: int | None = None, prefix: bool = True, drafter_term: bool = True,
                 objective: str | None = None, rules: TierRules = BUILTIN_RULES):
        self.objective = objective or (ROUTED if drafter_term else Q_ONLY)
        if self.objective not in OBJECTIVE_KINDS:
            raise ValueError(f"unknown mask objective {self.objective!r}; known: {', '.join(OBJECTIVE_KINDS)}")
        self.drafter_term = self.objective == ROUTED
        self.target = target
        self.calibration = calibration
        self.settings = settings or TierSettings()
        self.rules = rules
        self.batch_size = batch_size
        self.evaluations = 0
        self.seconds = 0.0
        self.prefix = PrefixStates.build(target, calibration.windows, batch_size) if prefix else None
        s = self.settings
        self.direct_cost = float(
            block_cost(calibration.logp_full, calibration.logp_draft, s.alpha2, s.beta).sum()
        )

    @property
    def tau(self) -> int:
        return self.calibration.tau

    def slim_log_probs(self, mask: RoutingMask, windows: TokenWindows | None = None) -> torch.Tensor:
        """u_z's scored log-probs on ``windows`` (default: the calibration windows)."""
        if windows is None and self.prefix is not None:
            return self.prefix.log_probs(mask)
        slim = SlimVerifier(self.target, mask).model
        return scored_log_probs(slim, windows or self.calibration.windows, self.batch_size)

    def _cost(self, logp_slim: torch.Tensor) -> torch.Tensor:
        """The objective's per-position cost of u's log-probs (module docstring, OBJECTIVE_KINDS)."""
        s, cal = self.settings, self.calibration
        if self.objective == ROUTED:
            return routed_path_cost(cal.logp_full, logp_slim, cal.logp_draft, s.alpha1, s.alpha2, s.beta)
        if self.objective == Q_ONLY:  # no drafter distribution worth scoring against: u as q's stand-in, C_alpha2(q || u)
            return block_cost(cal.logp_full, logp_slim, s.alpha2, s.beta)
        return top1_margin_cost(cal.logp_full, logp_slim)  # the log-margin of greedy top-1 agreement with q

    def score(self, mask: RoutingMask) -> MaskScore:
        """Everything reported about a mask: its cost, Delta, agreement and escalation estimate."""
        import time

        started = time.perf_counter()
        s, cal = self.settings, self.calibration
        logp_slim = self.slim_log_probs(mask)
        self.evaluations += 1
        cost = self._cost(logp_slim)
        delta = routing_delta(cal.logp_full, logp_slim, cal.logp_draft, alpha=s.alpha2, beta=s.beta,
                              alpha_slim=(s.alpha1, s.alpha2))
        result = MaskScore(float(cost.sum()), float(delta.sum()), argmax_agreement(logp_slim, cal.logp_full),
                           escalation_rate(logp_slim, cal.logp_draft, s, rules=self.rules))
        self.seconds += time.perf_counter() - started
        return result

    def __call__(self, mask: RoutingMask) -> float:
        """The cost alone, what a search minimises: the same number as ``score(mask).cost``
        without Delta, agreement and the escalation walk, which are full-vocabulary passes over
        every position that only the reported masks need (on SmolLM2-135M they were a large
        share of an evaluation, most of it in allocating their temporaries)."""
        import time

        started = time.perf_counter()
        logp_slim = self.slim_log_probs(mask)
        self.evaluations += 1
        cost = float(self._cost(logp_slim).sum())
        self.seconds += time.perf_counter() - started
        return cost


#: vocabulary entries :func:`escalation_rate` holds at once per distribution (as probabilities, for
#: the rules): 256 positions of a 49,152-token vocabulary; at 151,936 tokens, 256 positions held
#: about 1 GB of the rules' temporaries
RULE_CHUNK_ELEMENTS = 256 * 49_152


def escalation_rate(logp_slim: torch.Tensor, logp_draft: torch.Tensor, settings: TierSettings, gamma: int | None = None,
                    rules: TierRules = BUILTIN_RULES) -> float:
    """Estimated share of greedy cycles that escalate to q, from teacher-forced log-probs.

    Walks consecutive scored positions in blocks of ``gamma`` as a greedy cycle would: the drafter
    proposes its argmax x; gate 1 decides whether u accepts it; at the first rejection the cycle
    ends in tier 2 if the router lets u resolve the position, else it escalates; a fully accepted
    block escalates unless the router lets u resolve the bonus token. Gate 1 and the router are
    those of ``rules`` (the built-in ones, or a plugin manager's), asked exactly as a greedy cycle
    asks them, so ``settings.greedy_gates`` and plugins count here as they do when decoding. The
    text is the target's own continuation, so this is an estimate, not a decoding measurement; it
    prices masks in the budget space (``BudgetSpace.cycle_price``) and is reported per mask.
    """
    gamma = gamma or int(getattr(settings, "gamma", 5) or 5)
    logp_slim, logp_draft = logp_slim.float(), logp_draft.float()
    x = logp_draft.argmax(-1)
    accept_parts, confident_parts = [], []
    step = max(1, RULE_CHUNK_ELEMENTS // max(1, logp_slim.shape[-1]))
    for start in range(0, x.shape[0], step):  # the rules take probabilities: a chunk at a time
        rows = slice(start, start + step)
        p, u = logp_draft[rows].exp(), logp_slim[rows].exp()
        gate1 = rule_for(Mode.LOSSY).drafts.accept_prob(rules, x[rows], p, u, settings, greedy=True)
        accept_parts.append(gate1 > 0.5)  # greedy rules answer 0/1 (tiers' acceptance draws)
        confidence = rules.viasd_slim_confidence(p=p, u=u, settings=settings)
        confident_parts.append(rules.viasd_slim_resolves(confidence=confidence, settings=settings).bool())
    accept = torch.cat(accept_parts).tolist() if accept_parts else []
    confident = torch.cat(confident_parts).tolist() if confident_parts else []
    cycles = escalations = 0
    t, n = 0, len(accept)
    while t < n:
        cycles += 1
        end = min(t + gamma, n)
        rejected = next((i for i in range(t, end) if not accept[i]), None)
        at = rejected if rejected is not None else min(end, n - 1)
        escalations += 0 if confident[at] else 1
        t = (rejected + 1) if rejected is not None else end + 1
    return escalations / max(cycles, 1)


class AgreementProbe:
    """Teacher-forced argmax agreement with q on separate (held-out) windows.

    Holds q's argmax once; each mask then costs one slim forward, like the objective.
    """

    def __init__(self, target: nn.Module, windows: TokenWindows, batch_size: int | None = None):
        self.target = target
        self.windows = windows
        self.batch_size = batch_size
        self.full_argmax = scored_log_probs(target, windows, batch_size).argmax(-1)

    def of_model(self, model: nn.Module) -> float:
        predictions = scored_log_probs(model, self.windows, self.batch_size).argmax(-1)
        return (predictions == self.full_argmax).float().mean().item()

    def of_mask(self, mask: RoutingMask) -> float:
        return self.of_model(SlimVerifier(self.target, mask).model)
