"""PEARL as a framework: :func:`pearl_generate` opens the tier and runs our own PEARL decoder.

PEARL ships no package to adapt; the parallel decoder itself (the rounds, the role threads, the
verify step without a bonus token) is our own implementation in :mod:`viasd_adapt.engine.pearl`.
This module is the seam every framework has: it checks the inputs, opens the tier (settings,
mask, slim verifier, plugins) and hands a :class:`~viasd_adapt.engine.pearl.PearlDecoder` the
drafter and the verify step; :func:`run` is the ``pearl`` entry of :mod:`viasd_adapt.frameworks`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Sequence

import torch
from torch import nn

from viasd_adapt.checks import (
    as_prompt_list,
    check_fits_context,
    check_max_new_tokens,
    check_same_vocabulary,
    check_token_ids_in_vocabulary,
    eos_ids,
)
from viasd_adapt.engine.drafters import Drafter, ModelDrafter
from viasd_adapt.engine.pearl import PearlDecoder, PearlOutput, pearl_verifier
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.notices import emit
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.engine.context import RUN_OPTIONS, RunContext, build_context, loose_run_options


# =============================================================================== public entry point


def pearl_generate(
    target: nn.Module,
    drafter: nn.Module | Drafter,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    context: RunContext | None = None,
    *,
    sampling: SamplingConfig = SamplingConfig(),
    parallel: bool | str = "auto",
    seed: int | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    intra_op_threads: int | None = 1,
    share_prefix: bool = True,
    **run_options: Any,
) -> PearlOutput:
    """Generates up to ``max_new_tokens`` after ``prompt_ids`` (batch 1) with PEARL.

    Args:
        target: the target LM (HF causal LM).
        drafter: the draft LM (an HF causal LM on the same vocabulary), or any object with the
            :class:`~viasd_adapt.engine.drafters.Drafter` interface (``propose`` and ``passes``).
        context: the run's context, from :func:`viasd_adapt.context` on ``target`` (its settings,
            mask, plugins and tuned evidence); ``settings.mode`` picks the mode and
            ``settings.gamma`` is PEARL's draft block length. Tuned settings measured with another
            drafter than ``drafter`` run the defaults, with a ``TunedForAnotherDrafterWarning``.
            None: ``viasd_adapt.context(target, drafter=drafter)`` (untiered, with a notice).
        sampling: how tokens are drawn (greedy by default).
        parallel: drafter and target on two threads (PEARL) or inline (same output); ``"auto"``
            (default) uses threads except when both models share one CUDA device, where Python
            threads slow launch-bound decoding down (:func:`~viasd_adapt.engine.pearl.resolve_parallel`).
        seed: seeds the two per-role random generators; None draws one from torch's global RNG.
        eos_token_id: the token (or tokens) that end the generation; None: none.
        intra_op_threads: intra-op threads for the duration of the call (process-global, restored
            afterwards; see :class:`~viasd_adapt.engine.pearl.RoleWorkers`); None leaves torch's setting alone.
        share_prefix: let q resume from the slim verifier's hidden states at its first skipped layer.
        run_options: 0.2's ``settings``, ``mask``, ``plugins``, ``plugin_manager`` and ``tuned``:
            deprecated (until 0.4.0), given to :func:`viasd_adapt.context` instead; refused beside
            ``context``.

    Returns:
        :class:`PearlOutput`: the generated ids (prompt excluded), each token's tier, the shared
        :class:`~viasd_adapt.core.metrics.TierMetrics` and :class:`~viasd_adapt.engine.pearl.PearlStats`.
    """
    context, loose = loose_run_options("pearl_generate", context, run_options, slot="settings", stacklevel=3)
    prompt = as_prompt_list(prompt_ids, "PEARL")
    check_max_new_tokens(max_new_tokens)
    context = _drafting_context(target, drafter, context, loose)
    check_token_ids_in_vocabulary(prompt, target)
    # No speculative margin: PEARL drafts at most what the budget has left after its pending
    # drafts, so no forward reaches past prompt + max_new_tokens positions.
    check_fits_context(target, len(prompt), max_new_tokens)
    if isinstance(drafter, nn.Module):
        check_same_vocabulary(target, drafter)
        drafter = ModelDrafter(drafter, sampling)
    elif not callable(getattr(drafter, "propose", None)):
        raise ConfigError("drafter must be a causal LM (nn.Module) or have a propose(sequence, gamma, generator) method")
    verifier = pearl_verifier(context, sampling, share_prefix)
    decoder = PearlDecoder(drafter, verifier, parallel=parallel, seed=seed, intra_op_threads=intra_op_threads)
    return decoder.generate(prompt, max_new_tokens, eos_ids(eos_token_id))


def _drafting_context(target: nn.Module, drafter: Any, context: RunContext | None, loose: dict[str, Any]) -> RunContext:
    """The run's context for ``drafter`` (tuned settings belong to their drafter), its notices given.
    ``loose``: 0.2's run options, when there is no context."""
    if context is None:
        context = build_context(target, drafter=drafter, **loose)
    elif context.target is not target:
        raise ConfigError("pearl_generate: the context was built for another model; build it for this target "
                          "(viasd_adapt.context(target, ...))")
    elif context.drafter is None:  # built before the drafter was known: checked against this one now
        drafted = context.for_drafter(drafter)
        context = replace(drafted, notices=context.notices + drafted.notices)
    emit(context.notices)
    return context


def generate(pair: LoadedPair, prompt_ids: Sequence[int] | torch.Tensor, max_new_tokens: int,
             context: RunContext | None = None, **options: Any) -> PearlOutput:
    """:func:`pearl_generate` on a pair from :func:`viasd_adapt.load_pair`: its target and drafter.
    ``context``: the run's, from :func:`viasd_adapt.context`; None: the pair's own (its mask, tuned
    choice and evidence, as loaded: nothing is read again). ``options`` are :func:`pearl_generate`'s
    own (``sampling``, ``parallel``, ``seed``, ...); 0.2's ``settings``, ``mask``, ``plugins`` and
    ``plugin_manager`` among them are deprecated (until 0.4.0) and refused beside ``context``."""
    loose = {name: options.pop(name) for name in RUN_OPTIONS if name in options}
    context, loose = loose_run_options("pearl.generate", context, loose, slot="settings", stacklevel=3)
    if not isinstance(pair, LoadedPair):
        raise ConfigError(f"pearl.generate takes a pair from viasd_adapt.load_pair, got {type(pair).__name__}; "
                          "for models, call pearl_generate(target, drafter, ...)")
    if pair.draft is None:
        raise ConfigError("PEARL needs a drafter model; this pair has none (prompt lookup or no drafter)")
    if context is None:
        context = build_context(pair, drafter=pair.draft, **loose)
    return pearl_generate(pair.target, pair.draft, prompt_ids, max_new_tokens, context=context, **options)


# =============================================================================== `viasd generate`


def run(pair, request):
    """The ``pearl`` entry of :mod:`viasd_adapt.frameworks`: :func:`pearl_generate`, roles on two
    threads except on one shared CUDA device (``parallel="auto"``)."""
    from viasd_adapt.frameworks.requests import RunOutput

    context = request.context_on(pair, drafter=pair.draft)
    out = pearl_generate(
        pair.target, pair.draft, request.prompt_ids, request.max_new_tokens, sampling=request.sampling, parallel="auto",
        seed=request.seed, eos_token_id=pair.eos_token_ids if request.stop_at_eos else None, context=context,
    )
    stats, runs = out.stats, out.stats.accepted_runs
    notes = [
        f"PEARL ({'drafter and target on two threads' if stats.parallel else 'roles in turn on one thread'}): "
        f"{stats.rounds} rounds ({stats.pre_verify_rounds} pre-verify, {stats.post_verify_rounds} post-verify), "
        f"mean run of accepted drafts {sum(runs) / max(1, len(runs)):.1f}, {stats.discarded_drafts} drafts discarded, "
        f"drafter/target overlap {stats.overlap:.2f}x"
    ]
    return RunOutput(out.tokens, out.metrics, notes)


__all__ = ["generate", "pearl_generate"]
