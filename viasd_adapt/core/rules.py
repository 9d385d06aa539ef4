"""The tier's acceptance rules: their interface, and the built-in VIA-SD rules as pure tensor code.

Each rule is vectorised over the positions of a draft block so that one call decides a whole block.

:class:`TierRules` is the interface, declared once: a :class:`typing.Protocol` whose methods are
also the pluggy hook specifications (:class:`viasd_adapt.core.hooks.ViasdHookSpec` adds the observer
hooks to it). :class:`BuiltinRules` is the one implementation: its methods carry the hook names
themselves and are marked ``trylast``, so the class is registered as a plugin as it is and any
plugin a user registers answers first. The decision functions (:mod:`viasd_adapt.core.tiers`,
:mod:`viasd_adapt.core.cycle`) call a rules object by those names, with keyword arguments:
either :data:`BUILTIN_RULES` itself, or a plugin manager's ``hook`` relay
(:func:`viasd_adapt.core.hooks.hook_rules`), which answers the same names through the plugins.
They never import pluggy, so they stay testable in isolation.

Which rule a mode applies where is its row of the table of modes (:mod:`viasd_adapt.core.modes`),
read through :func:`rule_for`: the check of the drafts by the mode's first verifier, and the full
verifier's check after it. The cycle's decision, EAGLE's path
choice, the audit's effective distributions and the vLLM plugin ask it, and it asks the rules
object it is given, so a plugin that answers a rule hook decides it everywhere. No rule and no
mode-to-rule mapping is written anywhere else (tests/core/test_rules_written_once.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from viasd_adapt.core.markers import hookimpl, hookspec
from viasd_adapt.core.modes import ModeRules, mode_row
from viasd_adapt.core.settings import Mode, TierSettings


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


class TierRules(Protocol):
    """The rules every tier decision asks, and the pluggy hook specifications of the same names.

    Rule hooks are ``firstresult``: the first plugin that returns something other than ``None``
    decides. Tensors follow the shapes of :mod:`viasd_adapt.core.tiers`; a verifier's rows may
    carry the extra bonus row. Callers pass every argument by keyword (pluggy's hooks take keyword
    arguments only), so a plugin manager's hook relay is a ``TierRules`` as it is.

    A rule decides each position from that position's token and rows alone. That is what lets the
    audit ask a rule about every token of the vocabulary at one position (as one block whose rows
    all repeat that position, :meth:`Check.every_token_accept_prob`) and the vLLM plugin ask it a
    chunk of rows at a time.
    """

    @hookspec(firstresult=True)
    def viasd_gate1_accept_prob(
        self, tokens: torch.Tensor, p: torch.Tensor, u: torch.Tensor, settings: TierSettings, greedy: bool
    ) -> torch.Tensor | None:
        """Probability, per draft position, that gate 1 (p -> u) accepts the draft token.

        Greedy callers treat the value as a 0/1 decision (> 0.5 passes).
        """

    @hookspec(firstresult=True)
    def viasd_slim_confidence(
        self, p: torch.Tensor, u: torch.Tensor, settings: TierSettings
    ) -> torch.Tensor | None:
        """The router's confidence score at each of the ``g + 1`` positions (the last: bonus)."""

    @hookspec(firstresult=True)
    def viasd_slim_resolves(self, confidence: torch.Tensor, settings: TierSettings) -> torch.Tensor | None:
        """Bool per position: may the slim verifier commit its own token there (tier 2)?"""

    @hookspec(firstresult=True)
    def viasd_escalation_accept_prob(
        self, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, settings: TierSettings, greedy: bool
    ) -> torch.Tensor | None:
        """Probability, per escalated position, that the full verifier accepts the draft token."""

    @hookspec(firstresult=True)
    def viasd_lenient_accept_prob(
        self, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, settings: TierSettings, greedy: bool
    ) -> torch.Tensor | None:
        """Probability, per draft position, that the full verifier accepts the draft token in the
        lenient baseline mode (tolerance ``settings.lenience``)."""

    @hookspec(firstresult=True)
    def viasd_lossless_accept_prob(
        self, tokens: torch.Tensor, proposer: torch.Tensor, verifier: torch.Tensor, greedy: bool
    ) -> torch.Tensor | None:
        """Probability, per position, that ``verifier`` keeps a token drawn from ``proposer`` under
        the lossless SD rule (untiered SD, and both checks of the lossless cascade)."""


@dataclass(frozen=True)
class BuiltinRules:
    """The built-in rules, our reading of the paper.

    * Gate 1: ``u(x) >= (1 - alpha1) p(x)`` (greedy with ``settings.greedy_gates == "top"``:
      ``u(x) >= (1 - alpha1) max u``).
    * Router: confidence of the slim verifier = ``max_v u(v)``; it resolves a position on its own
      when that is ``>= 1 - alpha2``.
    * Escalation: q with tolerance ``settings.escalation_tolerance`` (0 = the lossless rule), in
      the same greedy reading as gate 1.
    * Lenient baseline: q accepts x when ``q(x) >= (1 - lenience) p(x)`` (sampling); greedy
      decoding targets q's argmax, so the greedy form measures the draft against q's own top
      token, ``q(x) >= (1 - lenience) max q``: at lenience 0 it accepts exactly q's argmax.
    * Lossless: ``min(1, v/b)`` when sampling; the verifier's argmax when greedy.

    Registered as a plugin (``trylast``), any plugin a user registers answers before it.
    """

    @hookimpl(trylast=True)
    def viasd_gate1_accept_prob(self, tokens: torch.Tensor, p: torch.Tensor, u: torch.Tensor, settings: TierSettings,
                                greedy: bool) -> torch.Tensor:
        if greedy and settings.greedy_gates == "top":
            return top_relative_accept(tokens, u, settings.alpha1)
        return tolerant_accept_prob(tokens, p, u, settings.alpha1, greedy)

    @hookimpl(trylast=True)
    def viasd_slim_confidence(self, p: torch.Tensor, u: torch.Tensor, settings: TierSettings) -> torch.Tensor:
        return u.max(dim=-1).values

    @hookimpl(trylast=True)
    def viasd_slim_resolves(self, confidence: torch.Tensor, settings: TierSettings) -> torch.Tensor:
        return confidence >= 1.0 - settings.alpha2

    @hookimpl(trylast=True)
    def viasd_escalation_accept_prob(self, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                                     settings: TierSettings, greedy: bool) -> torch.Tensor:
        tolerance = settings.escalation_tolerance
        if tolerance == 0.0:
            return lossless_accept_prob(tokens, p, q, greedy)
        if greedy and settings.greedy_gates == "top":
            return top_relative_accept(tokens, q, tolerance)
        return tolerant_accept_prob(tokens, p, q, tolerance, greedy)

    @hookimpl(trylast=True)
    def viasd_lenient_accept_prob(self, tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, settings: TierSettings,
                                  greedy: bool) -> torch.Tensor:
        if greedy:
            return top_relative_accept(tokens, q, settings.lenience)
        return tolerant_accept_prob(tokens, p, q, settings.lenience, greedy=False)

    @hookimpl(trylast=True)
    def viasd_lossless_accept_prob(self, tokens: torch.Tensor, proposer: torch.Tensor, verifier: torch.Tensor,
                                   greedy: bool) -> torch.Tensor:
        return lossless_accept_prob(tokens, proposer, verifier, greedy)


BUILTIN_RULES: TierRules = BuiltinRules()


# --------------------------------------------------------------------------- which rule, where


def rule_for(mode: Mode | str) -> ModeRules:
    """The checks ``mode`` applies (:class:`~viasd_adapt.core.modes.ModeRules`): its row's rule in the
    table of modes (:mod:`viasd_adapt.core.modes`), the one place that says which rule judges what."""
    return mode_row(Mode.parse(mode)).rule


__all__ = ["BUILTIN_RULES", "TierRules", "rule_for"]
