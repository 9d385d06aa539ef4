"""The lenient rule as a transform of the target's logits, so that vLLM's own rejection sampler applies it.

Why a transform and not a new sampler: the greedy lenient rule accepts a draft x at a position when
``q(x) >= (1 - a) max_v q(v)`` and, at the first position where it does not, commits q's argmax,
exactly like stock greedy SD. Stock greedy SD accepts x iff x is the argmax. So raising x's logit
above the row's maximum *exactly where the lenient test passes* makes the stock sampler compute the
lenient rule: accepted drafts are the lenient ones, the correction at the first rejection is q's
own argmax (that row was not touched), and the bonus row is never touched. Nothing of vLLM's
sampling code is copied or replaced; the plugin calls it.

The test is the lenient rule as the run's rules answer it: the check mode ``lenient`` applies
(:func:`~viasd_adapt.core.rules.rule_for`), asked of a rules object, by default the built-in rules
(greedy: ``q(x) >= (1 - a) max q``), in the engine a plugin manager with the ``viasd_adapt``
entry-point plugins, so a plugin's lenient rule is the one vLLM serves. The rule takes
probabilities: q is the softmax of the target's rows, and p, which vLLM's sampler step does not
have, is the point mass at each draft (exactly the n-gram drafter's distribution, as for prompt
lookup in the engine). Rows are asked a chunk at a time. At ``a = 0`` the transform is the identity
(the same tensor is returned), which is what makes lenience 0 token-identical to stock vLLM by
construction.

The same numbers give the audit the tuner reports: a committed draft that is not q's argmax is one
the full verifier would have *overruled*, and its per-token regret is ``l_max - l_x`` (greedy
regret, ``max_v log q(v) - log q(x)``; logits and log-probabilities differ by a per-row constant).

Sampling requests are not transformed (their rows are left as they are): the lenient rule when
sampling, ``min(1, q(x) / ((1 - a) p(x)))``, would need the sampler's own probabilities after
temperature and top-k/top-p, which the rejection sampler computes inside itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from viasd_adapt.core.rules import BUILTIN_RULES, TierRules, rule_for
from viasd_adapt.core.settings import Mode, TierSettings

BOOST = 1.0  # how far above the row maximum an accepted draft's logit is put
#: draft rows asked of the rule at once (each as two vocabulary-wide rows of probabilities)
RULE_CHUNK = 256


def lenient_mask(draft_logits: torch.Tensor, draft_ids: torch.Tensor, lenience: float,
                 rules: TierRules = BUILTIN_RULES) -> tuple[torch.Tensor, torch.Tensor]:
    """``(passes, regret)`` per draft row: whether the lenient rule of ``rules`` accepts the drafted
    token (greedy), and ``l_max - l_x`` (0 for q's argmax). ``draft_logits`` is ``[n, vocab]``,
    ``draft_ids`` ``[n]``."""
    if draft_logits.dim() != 2 or draft_ids.dim() != 1 or draft_logits.shape[0] != draft_ids.shape[0]:
        raise ValueError(f"draft logits [n, vocab] and ids [n] expected, got {tuple(draft_logits.shape)} and "
                         f"{tuple(draft_ids.shape)}")
    if not 0.0 <= lenience < 1.0:
        raise ValueError(f"lenience must be in [0, 1), got {lenience}")
    logits = draft_logits.float()
    ids = draft_ids.long().clamp_min(0)
    regret = (logits.max(dim=-1).values - logits.gather(-1, ids[:, None]).squeeze(-1)).clamp_min(0.0)
    settings = TierSettings(mode=Mode.LENIENT, lenience=lenience)
    check = rule_for(Mode.LENIENT).drafts
    passes = [torch.zeros(0, dtype=torch.bool, device=logits.device)]
    for start in range(0, ids.shape[0], RULE_CHUNK):
        chunk = ids[start : start + RULE_CHUNK]
        q = logits[start : start + RULE_CHUNK].softmax(dim=-1)
        p = torch.nn.functional.one_hot(chunk, logits.shape[-1]).to(q.dtype)
        passes.append(check.accept_prob(rules, chunk, p, q, settings, greedy=True) > 0.5)
    return torch.cat(passes), regret


def apply_lenience(logits: torch.Tensor, rows: torch.Tensor, draft_ids: torch.Tensor, lenience: float,
                   row_allowed: torch.Tensor | None = None,
                   rules: TierRules = BUILTIN_RULES) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Raises, in ``logits`` (in place), each drafted token that passes the lenient test above its
    row's maximum. ``rows`` index the draft rows of ``logits`` (one per draft token, in order),
    ``row_allowed`` marks those the rule may touch (greedy requests). Returns ``(logits, boosted,
    regret)``: which rows were raised because the draft was not already q's argmax (the overrules,
    should they be committed) and every row's regret. ``lenience == 0`` touches nothing."""
    draft_logits = logits.index_select(0, rows)
    passes, regret = lenient_mask(draft_logits, draft_ids, lenience, rules)
    boosted = passes & (regret > 0)
    if row_allowed is not None:
        boosted &= row_allowed
    if lenience == 0.0 or not bool(boosted.any()):
        return logits, torch.zeros_like(boosted), regret
    target_rows = rows[boosted]
    ids = draft_ids.long()[boosted]
    top = draft_logits.float().max(dim=-1).values[boosted]
    logits[target_rows, ids] = (top + BOOST).to(logits.dtype)
    return logits, boosted, regret


@dataclass
class AuditCounts:
    """What the served rule committed, in the tuner's terms (overrule rate and regret per token)."""

    steps: int = 0
    draft_tokens: int = 0
    accepted_drafts: int = 0
    committed_tokens: int = 0
    overruled: int = 0
    regret_sum: float = 0.0
    sampled_rows_untouched: int = 0
    extra: dict = field(default_factory=dict)

    def add_step(self, boosted: torch.Tensor, regret: torch.Tensor, accepted: torch.Tensor, committed: int,
                 untouched: int = 0) -> None:
        """``boosted``, ``regret``, ``accepted``: per draft row; ``committed``: tokens this step emitted."""
        hit = boosted & accepted
        self.steps += 1
        self.draft_tokens += int(accepted.numel())
        self.accepted_drafts += int(accepted.sum())
        self.committed_tokens += int(committed)
        self.overruled += int(hit.sum())
        self.regret_sum += float(regret[hit].sum()) if bool(hit.any()) else 0.0
        self.sampled_rows_untouched += int(untouched)

    def to_json(self) -> dict:
        tokens = max(self.committed_tokens, 1)
        return {"steps": self.steps, "draft_tokens": self.draft_tokens, "accepted_drafts": self.accepted_drafts,
                "committed_tokens": self.committed_tokens, "overruled": self.overruled,
                "overrule_rate": self.overruled / tokens, "regret_per_token": self.regret_sum / tokens,
                "acceptance_rate": self.accepted_drafts / max(self.draft_tokens, 1),
                "sampled_rows_untouched": self.sampled_rows_untouched, **self.extra}


def accepted_drafts(output_token_ids: torch.Tensor, num_draft_tokens: list[int], placeholder: int = -1) -> tuple[torch.Tensor, int]:
    """From the sampler's ``[batch, max_spec + 1]`` output (``placeholder`` past each request's end),
    which flattened draft rows were committed as drafted, and how many tokens the step emitted."""
    flags = []
    committed = 0
    for req, n in enumerate(num_draft_tokens):
        row = output_token_ids[req]
        emitted = int((row != placeholder).sum())
        committed += emitted
        # a request commits its first (emitted - 1) drafts as drafted, then a correction or the bonus
        kept = max(min(emitted - 1, n), 0)
        flags += [True] * kept + [False] * (n - kept)
    return torch.tensor(flags, dtype=torch.bool), committed


__all__ = ["AuditCounts", "BOOST", "accepted_drafts", "apply_lenience", "lenient_mask"]
