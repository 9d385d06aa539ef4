"""Model plumbing around the one cycle function: the verify step and the draft -> verify loop.

:class:`TieredVerifier` is the decoder-only seam of the verify step: it turns the target's runners
into the lazy verifiers that the run's :class:`~viasd_adapt.verify_step.VerifyStep` decides and
records each cycle with. It decides and counts nothing itself. Adapters supply drafts (HF
assistant model, PEARL's drafter thread, ...) and get back the committed tokens.

KV caches: the target's runners (:mod:`viasd_adapt.routing.shared`) are asked about
``committed + block`` every cycle; each crops what it fed that is no longer part of the committed
sequence and feeds the rest in one forward, so q catches up on tokens committed by tiers 1-2 in
the same forward that verifies the next block. With a shared prefix, that forward starts at the
slim verifier's first skipped layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import pluggy
import torch
from torch import nn

from viasd_adapt.checks import (
    check_draft_block,
    check_fits_context,
    check_max_new_tokens,
    check_prompt_ids,
    check_same_vocabulary,
    check_token_ids_in_vocabulary,
    eos_ids,
    vocab_size_of,
)
from viasd_adapt.cycle import CyclePolicy, StopRule, Verifiers
from viasd_adapt.errors import ConfigError
from viasd_adapt.ledger import CycleLedger
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.monitor import DrafterQualityMonitor
from viasd_adapt.routing.shared import TargetRunners, make_target_runners
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.runner import CachedRunner
from viasd_adapt.sampling import SamplingConfig, Warper, as_warper, sample_or_argmax
from viasd_adapt.settings import TierSettings
from viasd_adapt.tiers import CycleResult
from viasd_adapt.verify_step import VerifyStep


class Drafter(Protocol):
    """Anything that proposes a block: returns ``(tokens (g,), p (g, V))`` given the committed ids."""

    passes: int

    def propose(self, sequence: list[int], gamma: int, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]: ...


class ModelDrafter:
    """An independent small LM drafting ``gamma`` tokens autoregressively (HF assisted generation,
    classic SD, PEARL)."""

    def __init__(self, model: nn.Module, sampling: SamplingConfig | Warper):
        self.model = model
        self.runner = CachedRunner(model)
        self.warper = as_warper(sampling)

    @property
    def passes(self) -> int:
        return self.runner.passes

    def draft(self, sequence: list[int], gamma: int, generator: torch.Generator | None = None) -> tuple[list[int], torch.Tensor]:
        """``gamma`` drafted ids (host ints, as each next forward needs them) and their rows of p."""
        drafted: list[int] = []
        rows = []
        for _ in range(gamma):
            context = sequence + drafted
            probs = self.warper.probs(context, self.runner.logits_for(context, 1))[0]
            drafted.append(sample_or_argmax(probs, self.warper.greedy, generator))
            rows.append(probs)
        return drafted, torch.stack(rows)

    def propose(self, sequence, gamma, generator=None):
        drafted, p = self.draft(sequence, gamma, generator)
        return torch.tensor(drafted, dtype=torch.long, device=p.device), p  # same device: gathers index p with them


def _drafts_on_host(drafter: Drafter) -> bool:
    """Whether ``drafter`` is a plain :class:`ModelDrafter` (a subclass that overrides ``propose``
    must be asked through it)."""
    return isinstance(drafter, ModelDrafter) and type(drafter).propose is ModelDrafter.propose


def host_draft(drafter: Drafter, sequence: list[int], gamma: int,
               generator: torch.Generator | None) -> tuple[list[int], torch.Tensor]:
    """``(ids, p)``: a drafter's block with its ids as host ints.

    A :class:`ModelDrafter` picks its ids on the host anyway (each next forward needs them), so
    :meth:`ModelDrafter.draft` hands them over as they are: no copy to the device and back. Any
    other drafter is asked through ``propose`` and its tokens are read back once.
    """
    if _drafts_on_host(drafter):
        return drafter.draft(sequence, gamma, generator)
    tokens, p = drafter.propose(sequence, gamma, generator)
    return tokens.tolist(), p


def draft_with_ids(drafter: Drafter, sequence: list[int], gamma: int,
                   generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """``(tokens, p, ids)``: the block on p's device for the verify step, and its host ids."""
    if _drafts_on_host(drafter):
        ids, p = drafter.draft(sequence, gamma, generator)
        return torch.tensor(ids, dtype=torch.long, device=p.device), p, ids
    tokens, p = drafter.propose(sequence, gamma, generator)
    return tokens, p, tokens.tolist()


@dataclass
class TieredVerifier:
    """Verifies draft blocks of one target in the chosen mode and keeps the metrics.

    Attributes:
        bonus_after_block: False for frameworks whose next block's first draft takes the position
            after a fully committed block (PEARL), see :class:`~viasd_adapt.cycle.CyclePolicy`.
        share_prefix: let q resume from the slim verifier's hidden states at its first skipped
            layer (:mod:`viasd_adapt.routing.shared`); off gives every model its own cache.
        runners: the target's runners, when the caller builds them (encoder-decoder targets:
            :class:`viasd_adapt.seq2seq.Seq2SeqTargetRunners`); None builds the decoder-only ones.
        step: the run's verify step, when several verifiers serve one run (the rows of one HF
            ``generate`` call); None builds one from the settings and ``plugin_manager``.
    """

    target: nn.Module
    settings: TierSettings
    sampling: SamplingConfig | Warper
    slim: SlimVerifier | None = None
    plugin_manager: pluggy.PluginManager | None = None
    framework: str = "hf"
    bonus_after_block: bool = True
    share_prefix: bool = True
    runners: TargetRunners | None = None
    step: VerifyStep | None = None

    def __post_init__(self) -> None:
        self.warper = as_warper(self.sampling)
        if self.step is None:
            self.step = VerifyStep(self.settings, self.framework, self.plugin_manager, greedy=self.warper.greedy,
                                   bonus_after_block=self.bonus_after_block)
        else:
            self.step.new_generation(self.warper.greedy)
        self.plugin_manager = self.step.plugin_manager
        mode = self.settings.mode
        if mode.uses_slim and self.slim is None:
            raise ConfigError(f"mode {mode.value!r} needs a routing mask (slim verifier); pass mask=...")
        if self.runners is None:
            self.runners = make_target_runners(self.target, self.slim if mode.uses_slim else None, self.share_prefix)
        self.vocab_size = vocab_size_of(self.target)

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
    """The draft -> verify loop shared by the HF adapter's tiered modes, the bench and the CLI.

    Starts with one q prefill for the first token (``q_prefill=False`` drafts straight after the
    prompt, as transformers' assisted decoding does; q then first sees the prompt when it is
    first needed), then runs cycles until ``max_new_tokens``, an EOS token, or
    ``should_stop(all_ids)`` (checked after every token, so generation ends where one-token-at-a-time
    decoding would). The last block is shortened so no more than ``max_new_tokens`` are drafted
    for, and ``verify`` cuts a cycle that overshoots before its tokens are counted.
    """
    check_max_new_tokens(max_new_tokens)
    check_prompt_ids(prompt_ids)
    check_token_ids_in_vocabulary(prompt_ids, verifier.target)
    # Every forward (draft, verify, bonus) stays within prompt + budget positions: blocks are
    # shortened to what the budget has left, so no speculative extra is needed.
    check_fits_context(verifier.target, len(prompt_ids), max_new_tokens, role="target")
    if isinstance(getattr(drafter, "model", None), nn.Module):
        check_same_vocabulary(verifier.target, drafter.model)
        check_fits_context(drafter.model, len(prompt_ids), max_new_tokens, role="drafter")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ConfigError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    eos = frozenset(eos_ids(eos_token_ids))
    metrics = verifier.new_generation()
    draft_passes_before = drafter.passes
    generated: list[int] = []
    if q_prefill:
        generated = [verifier.first_token(prompt_ids, generator)]
        if on_tokens:
            on_tokens(generated[:])
    while len(generated) < max_new_tokens and not (generated and generated[-1] in eos):
        # Asked only once something was generated: like one-token-at-a-time decoding, the prompt
        # itself never stops generation (a prompt ending in EOS, or BART's decoder start id, which
        # is its EOS id, would otherwise yield no token at all).
        if should_stop and generated and should_stop(prompt_ids + generated):
            break
        gamma = min(verifier.settings.gamma, max_new_tokens - len(generated))
        drafts, p, ids = draft_with_ids(drafter, prompt_ids + generated, gamma, generator)
        result = verifier.verify(prompt_ids + generated, drafts, p, generator, max_new_tokens - len(generated), eos,
                                 should_stop, draft_ids=ids)
        generated += result.tokens  # already cut to the budget, the first EOS and should_stop by verify()
        if on_tokens:
            on_tokens(result.tokens)
    verifier.ledger.count_draft_passes(drafter.passes - draft_passes_before)
    return GenerationOutput(generated, metrics.token_tiers[:], metrics)


__all__ = ["Drafter", "GenerationOutput", "ModelDrafter", "TieredVerifier", "draft_with_ids", "host_draft", "speculative_generate"]
