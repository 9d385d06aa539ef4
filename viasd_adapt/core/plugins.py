"""Optional rules plugins that ship with viasd-adapt (framework-neutral; opt in with ``plugins=[...]``).

The built-in VIA-SD rules (:mod:`viasd_adapt.core.rules`) are always registered, last; a plugin here
answers a rule hook before them, or returns None to defer to them (:mod:`viasd_adapt.core.hooks`).
"""

from __future__ import annotations

import torch

from viasd_adapt.core.hooks import hookimpl
from viasd_adapt.core.rules import BUILTIN_RULES


class GreedyArgmaxAcceptance:
    """Opt-in rules plugin (``plugins=[GreedyArgmaxAcceptance()]``): in greedy decoding a draft
    equal to the verifier's argmax always passes gate 1 and escalation.

    Why: the tolerant inequality ``u(x) >= (1 - alpha) p(x)`` compares probabilities, and a sharp
    drafter (an EAGLE head trained on soft targets is sharper than a small target) can fail it on
    the very token the verifier would pick greedily. Then lossy rejects drafts that lossless SD
    accepts. With this plugin lossy greedy is a relaxation of lossless greedy, in every adapter.
    Sampling is left to the built-in rules (the plugin defers by returning None). "The verifier's
    argmax" is the built-in lossless rule in its greedy form, asked, not restated.
    """

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        if not greedy:
            return None
        builtin = BUILTIN_RULES.viasd_gate1_accept_prob(tokens=tokens, p=p, u=u, settings=settings, greedy=greedy)
        return torch.maximum(builtin, BUILTIN_RULES.viasd_lossless_accept_prob(tokens=tokens, proposer=p, verifier=u,
                                                                               greedy=greedy))

    @hookimpl
    def viasd_escalation_accept_prob(self, tokens, p, q, settings, greedy):
        if not greedy:
            return None
        builtin = BUILTIN_RULES.viasd_escalation_accept_prob(tokens=tokens, p=p, q=q, settings=settings, greedy=greedy)
        return torch.maximum(builtin, BUILTIN_RULES.viasd_lossless_accept_prob(tokens=tokens, proposer=p, verifier=q,
                                                                               greedy=greedy))


__all__ = ["GreedyArgmaxAcceptance"]
