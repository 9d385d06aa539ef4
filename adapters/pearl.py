"""PEARL as a framework: :func:`pearl_generate` opens the tier and runs our own PEARL decoder.

PEARL ships no package to adapt; the parallel decoder itself (the rounds, the role threads, the
verify step without a bonus token) is our own implementation in :mod:`viasd_adapt.engine.pearl`.
This module is the seam every framework has: it checks the inputs, opens the tier (settings,
mask, slim verifier, plugins) and hands a :class:`~viasd_adapt.engine.pearl.PearlDecoder` the
drafter and the verify step; :func:`run` is the ``pearl`` entry of :mod:`viasd_adapt.frameworks`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import pluggy
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
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.resolve import UNREAD
from viasd_adapt.core.notices import emit
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.engine.context import RunContext, open_context


# =============================================================================== public entry point


def pearl_generate(
    target: nn.Module,
    drafter: nn.Module | Drafter,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    settings: TierSettings | None = None,
    mask: RoutingMask | MaskArtifact | str | Path | None = None,
    sampling: SamplingConfig = SamplingConfig(),
    parallel: bool | str = "auto",
    seed: int | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    plugins: Iterable[object] = (),
    intra_op_threads: int | None = 1,
    plugin_manager: pluggy.PluginManager | None = None,
    share_prefix: bool = True,
    tuned: Any = UNREAD,
    context: RunContext | None = None,
) -> PearlOutput:
    """Generates up to ``max_new_tokens`` after ``prompt_ids`` (batch 1) with PEARL.

    Args:
        target: the target LM (HF causal LM).
        drafter: the draft LM (an HF causal LM on the same vocabulary), or any object with the
            :class:`~viasd_adapt.engine.drafters.Drafter` interface (``propose`` and ``passes``).
        settings: the tier settings; None, as in every adapter, runs ``viasd tune``'s choice beside a
            mask path when it was measured with that mask and this drafter, else :class:`TierSettings`
            defaults (another drafter: with a ``TunedForAnotherDrafterWarning``).
            ``settings.mode`` picks the mode and ``settings.gamma`` is PEARL's draft block length.
        mask: the routing mask of the slim verifier (needed by lossless, lossy and audit): a
            :class:`RoutingMask`, a :class:`MaskArtifact` or the path of a mask JSON; artifacts are
            checked against ``target``'s fingerprint.
        parallel: drafter and target on two threads (PEARL) or inline (same output); ``"auto"``
            (default) uses threads except when both models share one CUDA device, where Python
            threads slow launch-bound decoding down (:func:`~viasd_adapt.engine.pearl.resolve_parallel`).
        seed: seeds the two per-role random generators; None draws one from torch's global RNG.
        intra_op_threads: intra-op threads for the duration of the call (process-global, restored
            afterwards; see :class:`~viasd_adapt.engine.pearl.RoleWorkers`); None leaves torch's setting alone.
        share_prefix: let q resume from the slim verifier's hidden states at its first skipped layer.
        tuned: the tuned file the adaptive tier's prices and priors come from (None: none); by
            default the ``tuned.json`` beside a mask path (:func:`~viasd_adapt.engine.context.open_context`).
        context: the run's context, when the caller built it (a pair's, :mod:`viasd_adapt.frameworks`'
            requests): ``settings``, ``mask``, ``plugins``, ``plugin_manager`` and ``tuned`` are then its own.

    Returns:
        :class:`PearlOutput`: the generated ids (prompt excluded), each token's tier, the shared
        :class:`~viasd_adapt.core.metrics.TierMetrics` and :class:`~viasd_adapt.engine.pearl.PearlStats`.
    """
    prompt = as_prompt_list(prompt_ids, "PEARL")
    check_max_new_tokens(max_new_tokens)
    if context is None:  # tuned settings (settings=None) belong to their drafter: checked against this one
        context = open_context(target, mask, settings, plugins, plugin_manager=plugin_manager, tuned=tuned, drafter=drafter)
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


def generate(pair: LoadedPair, prompt_ids: Sequence[int] | torch.Tensor, max_new_tokens: int,
             settings: TierSettings | None = None, mask: RoutingMask | MaskArtifact | str | Path | None = None,
             **options: Any) -> PearlOutput:
    """:func:`pearl_generate` on a pair from :func:`viasd_adapt.load_pair`: its target and drafter,
    and its mask unless ``mask`` is given (so ``settings=None`` runs the pair's tuned choice).
    ``options`` are :func:`pearl_generate`'s own (``sampling``, ``parallel``, ``seed``, ...)."""
    if not isinstance(pair, LoadedPair):
        raise ConfigError(f"pearl.generate takes a pair from viasd_adapt.load_pair, got {type(pair).__name__}; "
                          "for models, call pearl_generate(target, drafter, ...)")
    if pair.draft is None:
        raise ConfigError("PEARL needs a drafter model; this pair has none (prompt lookup or no drafter)")
    if mask is not None:
        return pearl_generate(pair.target, pair.draft, prompt_ids, max_new_tokens, settings=settings, mask=mask, **options)
    # the pair's own mask, tuned settings and evidence, as loaded (nothing is read again)
    context = pair.run_context(settings, options.pop("plugins", ()), drafter=pair.draft,
                               plugin_manager=options.pop("plugin_manager", None))
    emit(context.notices)
    return pearl_generate(pair.target, pair.draft, prompt_ids, max_new_tokens, context=context, **options)


# =============================================================================== `viasd generate`


def run(pair, request):
    """The ``pearl`` entry of :mod:`viasd_adapt.frameworks`: :func:`pearl_generate`, roles on two
    threads except on one shared CUDA device (``parallel="auto"``)."""
    from viasd_adapt.frameworks.requests import RunOutput

    context = request.context_on(pair, drafter=pair.draft)
    emit(context.notices)
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
