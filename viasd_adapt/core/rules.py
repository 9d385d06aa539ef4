"""The built-in VIA-SD gate rules, as pure functions over probability tensors.

Each rule is vectorised over the positions of a draft block so that one call decides a whole block.
The rules interface is declared once, by the hook specifications of :mod:`viasd_adapt.core.hooks`
(``ViasdHookSpec``). :class:`BuiltinRules` is the one implementation: each of its methods is
marked as the implementation of the hook of the same name with the ``viasd_`` prefix, so the
class is registered as a pluggy plugin as it is. The decision functions in
:mod:`viasd_adapt.core.tiers` call a rules object by the short names (``rules.gate1_accept_prob(...)``):
either :data:`BUILTIN_RULES` itself, or :class:`viasd_adapt.core.hooks.HookRules`, which answers the same
names through a plugin manager. They never import pluggy, so they stay testable in isolation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from viasd_adapt.core.markers import hookimpl
from viasd_adapt.core.settings import TierSettings


def gather_token_probs(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``probs[i, tokens[i]]`` for each position i (probs: ``(g, V)``, tokens: ``(g,)``)."""
    return probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def tolerant_accept_prob(
    tokens: torch.Tensor,
    proposer_probs: torch.Tensor,
    verifier_probs: torch.Tensor,
    alpha: float,
    greedy: bool,
) -> torch.Tensor:
    """Acceptance probability of the tolerant SD rule ``v(x) >= (1 - alpha) * b(x)``.

    Sampling: ``min(1, v(x) / ((1 - alpha) b(x)))``, which for alpha = 0 is the lossless rule.
    Greedy: the same inequality as a 0/1 test.
    """
    b = gather_token_probs(proposer_probs, tokens)
    v = gather_token_probs(verifier_probs, tokens)
    scaled = (1.0 - alpha) * b
    if greedy:
        return (v >= scaled).float()
    return torch.where(scaled > 0, (v / scaled.clamp_min(1e-30)).clamp(max=1.0), torch.ones_like(v))


def top_relative_accept(tokens: torch.Tensor, verifier_probs: torch.Tensor, alpha: float) -> torch.Tensor:
    """Greedy test ``v(x) >= (1 - alpha) max_v v``: the draft is nearly as likely as the verifier's
    own choice. ``alpha = 0`` accepts exactly the verifier's argmax (ties aside)."""
    rows = verifier_probs[: tokens.shape[0]]
    return (gather_token_probs(rows, tokens) >= (1.0 - alpha) * rows.max(dim=-1).values).float()


def lossless_accept_prob(
    tokens: torch.Tensor, proposer_probs: torch.Tensor, verifier_probs: torch.Tensor, greedy: bool
) -> torch.Tensor:
    """Standard SD: ``min(1, v/b)`` when sampling; ``x == argmax v`` when greedy (token-exact).

    ``verifier_probs`` may carry the extra bonus row of the tier shapes (``g + 1``); it is ignored.
    """
    if greedy:
        return (verifier_probs[: tokens.shape[0]].argmax(dim=-1) == tokens).float()
    return tolerant_accept_prob(tokens, proposer_probs, verifier_probs, 0.0, greedy=False)


@dataclass(frozen=True)
class BuiltinRules:
    """VIA-SD.md section 4, our reading of the paper.

    * Gate 1: ``u(x) >= (1 - alpha1) p(x)`` (greedy with ``settings.greedy_gates == "top"``:
      ``u(x) >= (1 - alpha1) max u``).
    * Router: confidence of the slim verifier = ``max_v u(v)``; it resolves a position on its own
      when that is ``>= 1 - alpha2``.
    * Escalation: q with tolerance ``settings.escalation_tolerance`` (0 = the lossless rule), in
      the same greedy reading as gate 1.

    Registered as a plugin (``trylast``), any plugin a user registers answers before it; the
    ``specname`` of each marker names the hook the method answers.
    """

    @hookimpl(trylast=True, specname="viasd_gate1_accept_prob")
    def gate1_accept_prob(self, tokens: torch.Tensor, p: torch.Tensor, u: torch.Tensor, settings: TierSettings, greedy: bool) -> torch.Tensor:
        if greedy and settings.greedy_gates == "top":
            return top_relative_accept(tokens, u, settings.alpha1)
        return tolerant_accept_prob(tokens, p, u, settings.alpha1, greedy)

    @hookimpl(trylast=True, specname="viasd_slim_confidence")
    def slim_confidence(self, p: torch.Tensor, u: torch.Tensor, settings: TierSettings) -> torch.Tensor:
        return u.max(dim=-1).values

    @hookimpl(trylast=True, specname="viasd_slim_resolves")
    def slim_resolves(self, confidence: torch.Tensor, settings: TierSettings) -> torch.Tensor:
        return confidence >= 1.0 - settings.alpha2

    @hookimpl(trylast=True, specname="viasd_escalation_accept_prob")
    def escalation_accept_prob(self, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, settings: TierSettings, greedy: bool) -> torch.Tensor:
        tolerance = settings.escalation_tolerance
        if tolerance == 0.0:
            return lossless_accept_prob(tokens, p, q, greedy)
        if greedy and settings.greedy_gates == "top":
            return top_relative_accept(tokens, q, tolerance)
        return tolerant_accept_prob(tokens, p, q, tolerance, greedy)


BUILTIN_RULES = BuiltinRules()

#: The type the decision functions take for their rules: :class:`BuiltinRules`, or any object that
#: answers its four names the same way (:class:`viasd_adapt.core.hooks.HookRules` does, through plugins).
TierRules = BuiltinRules
