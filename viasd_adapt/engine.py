"""The framework-independent verify step and decoding loop.

:class:`TieredVerifier` is the single place where a block of drafts meets the slim and full
verifiers, for every mode. Adapters supply drafts (HF assistant model, PEARL's drafter, ...) and get
back the committed tokens; the tier math itself lives in :mod:`viasd_adapt.tiers`.

KV caches: the slim verifier and the full verifier each own a :class:`CachedRunner`. Each cycle both
are asked about ``committed + drafts``; a runner crops whatever it fed that is no longer part of
the committed sequence and feeds the rest in one forward, so q catches up on tokens committed by
tiers 1-2 in the same forward that verifies the next block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Iterable, Protocol

import pluggy
import torch
from torch import nn

from viasd_adapt.errors import ConfigError
from viasd_adapt.hooks import HookRules, TierObserver, make_plugin_manager
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.rules import lossless_accept_prob
from viasd_adapt.runner import CachedRunner
from viasd_adapt.sampling import SamplingConfig, probs_from_logits, sample_or_argmax
from viasd_adapt.settings import Mode, TierSettings, check_max_new_tokens
from viasd_adapt.tiers import (
    CycleResult,
    Tier,
    audit_cycle,
    cascade_candidates,
    combine_cycle,
    escalation_stage,
    slim_stage,
    verified_cycle,
    verify_block,
)


class Drafter(Protocol):
    """Anything that proposes a block: returns ``(tokens (g,), p (g, V))`` given the committed ids."""

    passes: int

    def propose(self, sequence: list[int], gamma: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]: ...


class ModelDrafter:
    """An independent small LM drafting ``gamma`` tokens autoregressively (HF assisted generation,
    classic SD, PEARL)."""

    def __init__(self, model: nn.Module, sampling: SamplingConfig):
        self.runner = CachedRunner(model)
        self.sampling = sampling

    @property
    def passes(self) -> int:
        return self.runner.passes

    def propose(self, sequence, gamma, generator=None):
        drafted: list[int] = []
        rows = []
        for _ in range(gamma):
            logits = self.runner.logits_for(sequence + drafted, 1)[0]
            probs = probs_from_logits(logits, self.sampling)
            drafted.append(sample_or_argmax(probs, self.sampling.greedy, generator))
            rows.append(probs)
        p = torch.stack(rows)
        return torch.tensor(drafted, dtype=torch.long, device=p.device), p  # same device: gathers index p with them


@dataclass
class TieredVerifier:
    """Verifies draft blocks for one generation in the chosen mode and keeps the metrics."""

    target: nn.Module
    settings: TierSettings
    sampling: SamplingConfig
    slim: SlimVerifier | None = None
    plugin_manager: pluggy.PluginManager | None = None
    framework: str = "hf"
    metrics: TierMetrics = field(default_factory=TierMetrics)

    def __post_init__(self) -> None:
        mode = self.settings.mode
        if mode is not Mode.NONE and self.slim is None:
            raise ConfigError(f"mode {mode.value!r} needs a routing mask (slim verifier); pass mask=...")
        self.plugin_manager = self.plugin_manager or make_plugin_manager()
        self.rules = HookRules(self.plugin_manager)
        self.observer = TierObserver(self.plugin_manager, self.framework, mode.value)
        self.full = CachedRunner(self.target)
        self.slim_runner = CachedRunner(self.slim.model, self.slim.new_cache) if self.slim is not None else None
        self._cycle_limits: tuple[int | None, tuple[int, ...]] = (None, ())

    # ------------------------------------------------------------------ helpers
    def _dist(self, runner: CachedRunner, sequence: list[int], n_tail: int) -> torch.Tensor:
        return probs_from_logits(runner.logits_for(sequence, n_tail), self.sampling)

    @property
    def greedy(self) -> bool:
        return self.sampling.greedy

    def first_token(self, prompt: list[int], generator: torch.Generator | None) -> int:
        """The first token after the prompt, from q (one prefill; every mode starts this way)."""
        probs = self._dist(self.full, prompt, 1)[0]
        self.metrics.full_passes += 1
        return sample_or_argmax(probs, self.greedy, generator)

    # ------------------------------------------------------------------ one cycle
    def verify(
        self,
        sequence: list[int],
        drafts: torch.Tensor,
        p: torch.Tensor,
        generator: torch.Generator | None = None,
        max_tokens: int | None = None,
        eos_token_ids: Iterable[int] = (),
    ) -> CycleResult:
        """Verifies ``drafts`` (proposed after ``sequence`` with distributions ``p``).

        ``max_tokens`` and ``eos_token_ids`` cut the committed tokens (budget, first EOS) *before*
        they are counted and shown to observers, so hooks never see a token the caller drops.
        """
        mode = self.settings.mode
        self._cycle_limits = (max_tokens, tuple(eos_token_ids))  # read by _verify_tiered's audit
        if mode is Mode.NONE:
            result = self._verify_plain(sequence, drafts, p, generator)
        elif mode is Mode.LOSSLESS:
            result = self._verify_cascade(sequence, drafts, p, generator)
        else:
            result = self._verify_tiered(sequence, drafts, p, generator, audit=mode is Mode.AUDIT)
        _clip_cycle(result, *self._cycle_limits)
        self.commit(result, drafted=int(drafts.shape[0]))
        return result

    def commit(self, result: CycleResult, drafted: int) -> None:
        """Counts a cycle's committed tokens and shows them to the observer hooks."""
        first_index = len(self.metrics.token_tiers)
        self.metrics.record_cycle(result, drafted=drafted)
        self.observer.cycle(result, self.metrics, first_index)

    #: Whether a block that passes entirely earns a bonus token after it. Frameworks whose next
    #: block's first draft takes that position (PEARL) set this to False, so the tiers neither
    #: resolve nor escalate a position whose token would be dropped.
    bonus_after_block: ClassVar[bool] = True

    def _end_cycle(self, result: CycleResult, drafts: torch.Tensor) -> CycleResult:
        """Framework hook applied to every cycle's result before it is recorded (default: as is)."""
        return result

    def _verify_plain(self, sequence, drafts, p, generator) -> CycleResult:
        g = drafts.shape[0]
        q = self._dist(self.full, sequence + drafts.tolist(), g + 1)
        self.metrics.full_passes += 1
        verdict = verify_block(drafts, p, q, lossless_accept_prob(drafts, p, q[:-1], self.greedy), self.greedy, generator)
        n, g = verdict.n_accepted, drafts.shape[0]
        return self._end_cycle(verified_cycle(drafts[:n].tolist() + [verdict.next_token], n, g, g), drafts)

    def _verify_cascade(self, sequence, drafts, p, generator) -> CycleResult:
        g = drafts.shape[0]
        u = self._dist(self.slim_runner, sequence + drafts.tolist(), g + 1)
        self.metrics.slim_passes += 1
        candidates, cand_probs, n_kept = cascade_candidates(drafts, p, u, self.greedy, generator)
        c = candidates.shape[0]
        q = self._dist(self.full, sequence + candidates.tolist(), c + 1)
        self.metrics.full_passes += 1
        verdict = verify_block(
            candidates, cand_probs, q, lossless_accept_prob(candidates, cand_probs, q[:-1], self.greedy),
            self.greedy, generator,
        )
        n = verdict.n_accepted
        tokens = candidates[:n].tolist() + [verdict.next_token]
        return self._end_cycle(verified_cycle(tokens, n, n_kept, g), drafts)

    def _verify_tiered(self, sequence, drafts, p, generator, audit: bool) -> CycleResult:
        g = drafts.shape[0]
        block = sequence + drafts.tolist()
        u = self._dist(self.slim_runner, block, g + 1)
        self.metrics.slim_passes += 1
        q = None
        if audit:  # shadow q every cycle; reused if the cycle escalates
            q = self._dist(self.full, block, g + 1)
            self.metrics.full_passes += 1
        slim = slim_stage(drafts, p, u, self.settings, self.greedy, generator, self.rules)
        if slim.n_accepted == g and not self.bonus_after_block:
            result = CycleResult(drafts.tolist(), [Tier.DRAFT] * g, drafts_judged=g, drafts_rejected=0)
        else:
            escalation = None
            if slim.escalate_at is not None:
                if q is None:
                    q = self._dist(self.full, block, g + 1)
                    self.metrics.full_passes += 1
                escalation = escalation_stage(
                    drafts, p, q, slim.escalate_at, self.settings, self.greedy, generator, self.rules
                )
            result = self._end_cycle(combine_cycle(drafts, slim, escalation), drafts)
        if audit:  # audit only what will be committed
            _clip_cycle(result, *getattr(self, "_cycle_limits", (None, ())))
            record = audit_cycle(drafts, p, u, q, slim, result, self.settings, self.greedy)
            self.metrics.record_audit(record, offset=len(self.metrics.token_tiers))
        return result


def split_at_stop(tokens: list[int], budget: int | None, eos: set[int]) -> tuple[list[int], bool]:
    """The tokens to keep (up to ``budget`` and the first EOS, inclusive) and whether to stop.

    The one stop rule of every decoding loop: verifiers cut each cycle with it before counting, so
    loops only need the stop flag.
    """
    kept: list[int] = []
    for token in tokens if budget is None else tokens[:budget]:
        kept.append(token)
        if token in eos:
            return kept, True
    return kept, budget is not None and len(kept) >= budget


def _clip_cycle(result: CycleResult, max_tokens: int | None, eos_token_ids: Iterable[int]) -> None:
    """Drops committed tokens after the first EOS and beyond ``max_tokens`` (in place)."""
    kept, _ = split_at_stop(result.tokens, max_tokens, set(int(e) for e in eos_token_ids))
    del result.tokens[len(kept) :], result.tiers[len(kept) :]


@dataclass
class GenerationOutput:
    """Generated ids (prompt excluded), their tiers, and the metrics."""

    tokens: list[int]
    tiers: list[int]
    metrics: TierMetrics


def speculative_generate(
    drafter: Drafter,
    verifier: TieredVerifier,
    prompt_ids: list[int],
    max_new_tokens: int,
    eos_token_ids: Iterable[int] = (),
    generator: torch.Generator | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
    should_stop: Callable[[list[int]], bool] | None = None,
    q_prefill: bool = True,
) -> GenerationOutput:
    """The draft -> verify loop shared by the HF lossy path and the CLI.

    ``q_prefill=False`` skips the q prefill and drafts straight after the prompt, as transformers'
    assisted decoding does; q then first sees the prompt when it is first needed (the first
    escalation, or every cycle in audit mode), so lossy runs are compared with the stock loop
    cycle for cycle.

    Starts with one q prefill for the first token (as every SD loop does), then runs cycles until
    ``max_new_tokens``, an EOS token, or ``should_stop(all_ids)``. The last block is shortened so no
    more than ``max_new_tokens`` are drafted for, and ``verify`` cuts a cycle that overshoots (budget
    or EOS) before its tokens are counted.
    """
    check_max_new_tokens(max_new_tokens)
    if not prompt_ids:
        raise ConfigError("the prompt is empty: at least one token is needed to condition on")
    eos = set(int(e) for e in eos_token_ids)
    # Metrics are per generation. A reused verifier gets a fresh object (earlier outputs keep theirs);
    # otherwise the final trim and the returned tiers would mix in the previous generations' tokens.
    verifier.metrics = TierMetrics()
    draft_passes_before = drafter.passes
    generated: list[int] = []
    if q_prefill:
        generated = [verifier.first_token(prompt_ids, generator)]
        verifier.commit(CycleResult(generated[:], [Tier.FULL]), drafted=0)  # the prefill counts as a cycle
        if on_tokens:
            on_tokens(generated[:])
    while len(generated) < max_new_tokens and not (generated and generated[-1] in eos):
        if should_stop and should_stop(prompt_ids + generated):
            break
        gamma = min(verifier.settings.gamma, max_new_tokens - len(generated))
        drafts, p = drafter.propose(prompt_ids + generated, gamma, generator)
        result = verifier.verify(
            prompt_ids + generated, drafts, p, generator, max_new_tokens - len(generated), eos
        )
        generated += result.tokens  # already cut to the budget and the first EOS by verify()
        if on_tokens:
            on_tokens(result.tokens)
    verifier.metrics.draft_passes = drafter.passes - draft_passes_before
    return GenerationOutput(generated, verifier.metrics.token_tiers[:], verifier.metrics)
