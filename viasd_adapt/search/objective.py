"""The DIMR objective: the routed-path cost of a mask on a fixed calibration window.

    J(z) = C(u_z || p) + C(q || u_z)    (alpha1 on the first segment, alpha2 on the second)

Calibration is fixed and the forward pass is deterministic, so J is a deterministic function of z:
the observed minimum of a search is the exact minimum of what was evaluated, and no re-evaluation
of the top masks is needed (BO-RECIPE.md's advice to re-evaluate applies to noisy costs).

Delta is reported with the direct path p -> q checked at tolerance alpha2, i.e. the tolerance q
applies when it checks p's tokens itself in lossy escalation:

    Delta(z) = C_alpha2(q || p) - [C_alpha1(u_z || p) + C_alpha2(q || u_z)]

(The paper's Eq. 10 uses one alpha throughout; ``routing_delta`` keeps that reading available.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from viasd_adapt.cost import block_cost, routed_path_cost, routing_delta
from viasd_adapt.routing.mask import RoutingMask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.search.calibration import CalibrationSet, TokenWindows, scored_log_probs
from viasd_adapt.settings import TierSettings


@dataclass(frozen=True)
class MaskScore:
    """Everything measured about one mask on the calibration window."""

    cost: float  # routed-path cost summed over tau positions (the objective)
    delta: float  # Delta(z), see module docstring
    agreement: float  # teacher-forced argmax agreement of u_z with q on the scored positions

    def per_token(self, tau: int) -> float:
        return self.cost / max(tau, 1)


def argmax_agreement(logp_a: torch.Tensor, logp_b: torch.Tensor) -> float:
    """Fraction of positions where two distributions have the same most likely token."""
    return (logp_a.argmax(-1) == logp_b.argmax(-1)).float().mean().item()


class MaskObjective:
    """Scores masks of ``target`` against a :class:`CalibrationSet`; one slim forward per mask."""

    def __init__(self, target: nn.Module, calibration: CalibrationSet, settings: TierSettings | None = None,
                 batch_size: int = 16):
        self.target = target
        self.calibration = calibration
        self.settings = settings or TierSettings()
        self.batch_size = batch_size
        self.evaluations = 0
        s = self.settings
        self.direct_cost = float(
            block_cost(calibration.logp_full, calibration.logp_draft, s.alpha2, s.beta).sum()
        )

    @property
    def tau(self) -> int:
        return self.calibration.tau

    def slim_log_probs(self, mask: RoutingMask, windows: TokenWindows | None = None) -> torch.Tensor:
        """u_z's scored log-probs on ``windows`` (default: the calibration windows)."""
        slim = SlimVerifier(self.target, mask).model
        return scored_log_probs(slim, windows or self.calibration.windows, self.batch_size)

    def score(self, mask: RoutingMask) -> MaskScore:
        s, cal = self.settings, self.calibration
        logp_slim = self.slim_log_probs(mask)
        self.evaluations += 1
        cost = routed_path_cost(cal.logp_full, logp_slim, cal.logp_draft, s.alpha1, s.alpha2, s.beta)
        delta = routing_delta(cal.logp_full, logp_slim, cal.logp_draft, alpha=s.alpha2, beta=s.beta,
                              alpha_slim=(s.alpha1, s.alpha2))
        return MaskScore(float(cost.sum()), float(delta.sum()), argmax_agreement(logp_slim, cal.logp_full))

    def __call__(self, mask: RoutingMask) -> float:
        return self.score(mask).cost


class AgreementProbe:
    """Teacher-forced argmax agreement with q on separate (held-out) windows.

    Holds q's argmax once; each mask then costs one slim forward, like the objective.
    """

    def __init__(self, target: nn.Module, windows: TokenWindows, batch_size: int = 16):
        self.target = target
        self.windows = windows
        self.batch_size = batch_size
        self.full_argmax = scored_log_probs(target, windows, batch_size).argmax(-1)

    def of_model(self, model: nn.Module) -> float:
        predictions = scored_log_probs(model, self.windows, self.batch_size).argmax(-1)
        return (predictions == self.full_argmax).float().mean().item()

    def of_mask(self, mask: RoutingMask) -> float:
        return self.of_model(SlimVerifier(self.target, mask).model)
