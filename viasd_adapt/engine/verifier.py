"""The decoder-only seam of the verify step: the target's runners as lazy verifiers.

:class:`TieredVerifier` turns the target's runners (:mod:`viasd_adapt.routing.shared`) into the
lazy verifiers that the run's :class:`~viasd_adapt.core.verify_step.VerifyStep` decides and
records each cycle with. It decides and counts nothing itself.

KV caches: the target's runners are asked about ``committed + block`` every cycle; each crops
what it fed that is no longer part of the committed sequence and feeds the rest in one forward,
so q catches up on tokens committed by tiers 1-2 in the same forward that verifies the next
block. With a shared prefix, that forward starts at the slim verifier's first skipped layer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

import pluggy
import torch
from torch import nn

from viasd_adapt.checks import (
    check_draft_block,
    vocab_size_of,
)
from viasd_adapt.core.adaptive import AdaptivePlan
from viasd_adapt.core.cycle import CyclePolicy, StopRule, Verifiers
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.ledger import CycleLedger
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.monitor import DrafterQualityMonitor
from viasd_adapt.routing.shared import TargetRunners, make_target_runners
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig, Warper, as_warper, sample_or_argmax
from viasd_adapt.core.settings import TierSettings, check_settings
from viasd_adapt.core.tiers import CycleResult
from viasd_adapt.core.verify_step import VerifyStep


def step_for_fields(target: nn.Module, settings: TierSettings | None, sampling: SamplingConfig | Warper,
                    slim: SlimVerifier | None = None, plugin_manager: pluggy.PluginManager | None = None,
                    framework: str = "hf", *, bonus_after_block: bool = True,
                    adaptive: AdaptivePlan | None = None) -> VerifyStep:
    """The verify step of a run given field by field (a bare target, its settings, a slim verifier
    built by the caller): resolved through a run context like any other run's, so that the
    rules, the monitor and the plan are the context's. For the engine's own callers that hold no
    context (the encoder-decoder loop) and the 0.2 constructor."""
    from viasd_adapt.engine.context import resolve_context

    mode = check_settings(settings if settings is not None else TierSettings()).mode
    if mode.uses_slim and slim is None:
        raise ConfigError(f"mode {mode.value!r} needs a routing mask (slim verifier); pass mask=...")
    context = resolve_context(target, settings, mask=slim.mask if slim is not None else None,
                              plugin_manager=plugin_manager, build_slim=False)
    return replace(context, plan=adaptive).verify_step(framework, greedy=as_warper(sampling).greedy,
                                                      bonus_after_block=bonus_after_block)


@dataclass
class TieredVerifier:
    """Verifies draft blocks of one target with the run's verify step, over the target's runners.

    Built from a run context, :meth:`of` takes the step and the runners, nothing else it could
    disagree with: the step holds the settings, the plugin manager and the adaptive plan (one
    builder, :meth:`viasd_adapt.engine.context.RunContext.verify_step`), the runners hold the target
    and its slim verifier::

        context = open_context(target, mask, settings, plugins)
        verifier = TieredVerifier.of(context, context.verify_step("engine"), sampling)

    The field-by-field form below without a ``step`` is the 0.2 one: it still builds the step from
    ``settings``, ``plugin_manager`` and ``adaptive`` (through :func:`step_for_fields`), with a
    :class:`DeprecationWarning`, until 0.4.0. Given a ``step``, anything it holds may only repeat it.

    Attributes:
        bonus_after_block: False for frameworks whose next block's first draft takes the position
            after a fully committed block (PEARL), see :class:`~viasd_adapt.core.cycle.CyclePolicy`.
        share_prefix: let q resume from the slim verifier's hidden states at its first skipped
            layer (:mod:`viasd_adapt.routing.shared`); off gives every model its own cache.
        runners: the target's runners, when the caller builds them (encoder-decoder targets:
            :class:`viasd_adapt.routing.seq2seq.Seq2SeqTargetRunners`); None builds the decoder-only ones.
        step: the run's verify step (several verifiers may serve one run: the rows of one HF
            ``generate`` call); None builds one from ``settings``, ``plugin_manager`` and ``adaptive``.
        adaptive: the adaptive tier's prices and priors for a step built here. A cycle the
            controller gives the untiered arm runs q alone: the slim runner is not called and
            catches up on what it missed at its next pass (:mod:`viasd_adapt.routing.shared`).
    """

    target: nn.Module
    settings: TierSettings | None
    sampling: SamplingConfig | Warper
    slim: SlimVerifier | None = None
    plugin_manager: pluggy.PluginManager | None = None
    framework: str = "hf"
    bonus_after_block: bool = True
    share_prefix: bool = True
    runners: TargetRunners | None = None
    step: VerifyStep | None = None
    adaptive: AdaptivePlan | None = None

    @classmethod
    def of(cls, context, step: VerifyStep, sampling: SamplingConfig | Warper, *, share_prefix: bool = True,
           runners: TargetRunners | None = None) -> "TieredVerifier":
        """The verifier of a run: its ``context``'s target and slim verifier as runners (or the
        ``runners`` given), and ``step`` (built by ``context.verify_step``)."""
        return cls(context.target, None, sampling, slim=context.slim, share_prefix=share_prefix, runners=runners,
                   step=step)

    def __post_init__(self) -> None:
        self.warper = as_warper(self.sampling)
        if self.step is None:
            from viasd_adapt.deprecated import deprecated_use

            deprecated_use("TieredVerifier(target, settings, sampling, ...) without a step",
                           'TieredVerifier.of(context, context.verify_step("engine"), sampling)',
                           stacklevel=3)  # __post_init__ <- the dataclass's __init__ <- user
            self.step = step_for_fields(self.target, self.settings, self.warper, self.slim, self.plugin_manager,
                                        self.framework, bonus_after_block=self.bonus_after_block, adaptive=self.adaptive)
        else:
            self._refuse_disagreement()
            self.step.new_generation(self.warper.greedy)
        self.settings = self.step.settings
        self.plugin_manager = self.step.plugin_manager
        mode = self.settings.mode
        if mode.uses_slim and self.slim is None and self.runners is None:
            raise ConfigError(f"mode {mode.value!r} needs a routing mask (slim verifier); pass mask=...")
        if self.runners is None:
            self.runners = make_target_runners(self.target, self.slim if mode.uses_slim else None, self.share_prefix)
        self.vocab_size = vocab_size_of(self.target)

    def _refuse_disagreement(self) -> None:
        """With a step, the settings, plugin manager and plan are the step's: any other is refused."""
        step = self.step
        if self.settings is not None and self.settings != step.settings:
            raise ConfigError("TieredVerifier got settings that are not its verify step's; pass the step alone")
        if self.plugin_manager is not None and self.plugin_manager is not step.plugin_manager:
            raise ConfigError("TieredVerifier got a plugin manager that is not its verify step's; pass the step alone")
        if self.adaptive is not None:
            raise ConfigError("TieredVerifier got an adaptive plan beside its verify step; the step holds its own")

    @property
    def ledger(self) -> CycleLedger:
        return self.step.ledger

    @property
    def metrics(self) -> TierMetrics:
        return self.step.metrics

    @property
    def monitor(self) -> DrafterQualityMonitor:
        """The drafter-quality evidence of the current generation."""
        return self.step.monitor

    @property
    def policy(self) -> CyclePolicy:
        return self.step.policy

    @property
    def greedy(self) -> bool:
        return self.warper.greedy

    def new_generation(self) -> TierMetrics:
        """Starts a fresh metrics object (earlier outputs keep theirs); the caches are kept."""
        return self.step.new_generation(self.warper.greedy)

    def _dist(self, logits_of: Callable[[list[int], int], torch.Tensor], sequence: list[int], block: torch.Tensor,
              known: tuple[torch.Tensor, list[int]]) -> torch.Tensor:
        """The warped distributions after ``sequence + block``; ``known`` pairs the cycle's draft
        tensor with its host ids, so asking about the drafts themselves reads nothing back."""
        full = sequence + (known[1] if block is known[0] else block.tolist())
        return self.warper.probs(full, logits_of(full, block.shape[0] + 1))

    def first_token(self, prompt: list[int], generator: torch.Generator | None) -> int:
        """The first token after the prompt, from one q prefill, recorded as its own cycle."""
        probs = self.warper.probs(prompt, self.runners.full_logits(prompt, 1))[0]
        token = sample_or_argmax(probs, self.greedy, generator)
        self.step.prefill(token)
        return token

    def verify(
        self,
        sequence: list[int],
        drafts: torch.Tensor,
        p: torch.Tensor,
        generator: torch.Generator | None = None,
        max_tokens: int | None = None,
        eos_token_ids: Iterable[int] = (),
        should_stop: Callable[[list[int]], bool] | None = None,
        draft_ids: list[int] | None = None,
    ) -> CycleResult:
        """Decides and records one cycle of ``drafts`` (proposed after ``sequence`` with
        distributions ``p``), cut at ``max_tokens``, the first EOS, and the first token after which
        ``should_stop(sequence + kept)`` holds, before it is recorded.

        ``draft_ids``: the drafts as host ids, when the caller has them (PEARL's drafter does);
        otherwise they are read back from the device once per cycle.
        """
        runners = self.runners
        ids = list(draft_ids) if draft_ids is not None else drafts.tolist()
        check_draft_block(drafts, p, self.vocab_size, ids)
        known = (drafts, ids)
        verifiers = Verifiers(
            full=lambda block: self._dist(runners.full_logits, sequence, block, known),
            slim=(lambda block: self._dist(runners.slim_logits, sequence, block, known)) if self.settings.mode.uses_slim else None,
        )
        resumed_before = runners.resumed_full_passes
        stop_after = (lambda kept: should_stop(sequence + kept)) if should_stop is not None else None
        outcome = self.step.decide(drafts, p, verifiers, generator, StopRule.of(max_tokens, eos_token_ids, stop_after),
                                   draft_ids=ids)
        self.step.record(outcome, drafted=int(drafts.shape[0]),
                         resumed_full_passes=runners.resumed_full_passes - resumed_before)
        return outcome.result



__all__ = ["TieredVerifier"]
