"""Entry points: :func:`generate` (``eagenerate`` inside :func:`~.session.tiered`, checked and trimmed)
and :func:`run`, the ``eagle`` entry of :mod:`viasd_adapt.frameworks`."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from viasd_adapt.adapters.eagle.compat import load_for_pair
from viasd_adapt.adapters.eagle.options import EagleOptions, as_options
from viasd_adapt.adapters.eagle.session import LOOSE_RUN_OPTIONS, eagle_context, scope
from viasd_adapt.core.cycle import StopRule
from viasd_adapt.checks import check_fits_context, check_max_new_tokens, check_token_ids_in_vocabulary
from viasd_adapt.core.settings import check_real
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.settings import Mode
from viasd_adapt.engine.context import RunContext, loose_run_options

if TYPE_CHECKING:  # pragma: no cover
    from viasd_adapt.models.pair import LoadedPair
    from viasd_adapt.frameworks.requests import RunOutput, RunRequest

#: Positions eagle needs past the budget: the draft tree written after the committed tokens, and
#: eagle's overshoot (it stops only after the cycle that passes the budget).
TREE_MARGIN = 2 * 64


@dataclass
class EagleGeneration:
    """Generated ids (prompt excluded, trimmed to the budget and, unless told otherwise, the first
    EOS), their tiers and the metrics; ``raw_new_tokens`` is how many eagle produced before
    trimming; ``cache_bytes`` is EAGLE's pre-allocated KV memory (q's and the slim verifier's)."""

    tokens: list[int]
    tiers: list[int]
    metrics: TierMetrics
    raw_new_tokens: int
    cache_bytes: int = 0


def _check_input_ids(ea_model: nn.Module, input_ids: Any, max_new_tokens: int) -> None:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ConfigError(f"eagle-llm decodes one sequence at a time (batch size 1): input_ids must have shape (1, n), got {shape}")
    if input_ids.shape[1] == 0:
        raise ConfigError("the prompt is empty: at least one token is needed to condition on")
    if input_ids.is_floating_point():
        raise ConfigError("prompt token ids must be integers, got a floating-point tensor")
    check_token_ids_in_vocabulary(input_ids[0].tolist(), ea_model.base_model)
    depth = ea_model.tree_buffers["retrieve_indices"].shape[1] if hasattr(ea_model, "tree_buffers") else 6
    check_fits_context(ea_model.base_model, input_ids.shape[1], max_new_tokens, extra=depth + TREE_MARGIN)


def _sampling_kwargs(temperature: float, top_p: float, top_k: int) -> dict[str, Any]:
    check_real("temperature", temperature, low=0.0)
    check_real("top_p", top_p, low=0.0, high=1.0, low_open=True)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ConfigError(f"top_k must be an integer >= 0, got {top_k!r}")
    return dict(temperature=temperature, top_p=top_p if top_p < 1.0 else 0.0, top_k=top_k)


def decode(ea_model: nn.Module, input_ids: torch.Tensor, max_new_tokens: int, kwargs: dict[str, Any],
           stop_at_eos: bool = True, session=None) -> tuple[list[list[int]], int]:
    """``eagenerate`` until the budget. Returns the tokens kept from each call and how many eagle
    produced in all.

    eagle overshoots the budget (trimmed here) and always stops at its tokenizer's EOS. With
    ``stop_at_eos=False`` the generation goes on past EOS with another ``eagenerate`` call on the
    prompt plus everything so far, so exactly ``max_new_tokens`` come out whenever eagle can make
    them (it also stops at its own ``max_length``; then fewer come out).
    """
    eos = ea_model.tokenizer.eos_token_id
    kept_per_call: list[list[int]] = []
    total, raw, ids = 0, 0, input_ids
    while total < max_new_tokens:
        if session is not None:  # the ledger cuts what this call keeps, before observers see it
            session.stop = StopRule.of(max_new_tokens - total, [eos] if stop_at_eos and eos is not None else ())
        out = ea_model.eagenerate(ids, max_new_tokens=max_new_tokens - total,
                                  max_length=ea_model.base_model.config.max_position_embeddings, **kwargs)
        new = out[0, ids.shape[1] :].tolist()
        raw += len(new)
        keep = new[: max_new_tokens - total]
        stopped_at_eos = eos is not None and eos in new
        if stop_at_eos and eos in keep:
            keep = keep[: keep.index(eos) + 1]
        kept_per_call.append(keep)
        total += len(keep)
        if stop_at_eos or not stopped_at_eos or not keep:
            break
        ids = torch.cat([ids, torch.tensor([keep], dtype=ids.dtype, device=ids.device)], dim=1)
    return kept_per_call, raw


def generate(
    ea_model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    context: RunContext | None = None,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    options: EagleOptions | None = None,
    tree_choices=None,
    stop_at_eos: bool = True,
    **run_options: Any,
) -> EagleGeneration:
    """``eagenerate`` inside :func:`~.session.tiered`, with eagle's overshoot trimmed and inputs checked.

    ``context``: the run's, from :func:`viasd_adapt.context` (as :func:`~.session.tiered` takes it);
    the other arguments are eagle's own. ``run_options``: 0.2's ``mask``, ``settings`` and
    ``plugins``, deprecated (until 0.4.0) and refused beside ``context``."""
    context, loose = loose_run_options("eagle.generate", context, run_options, accepted=LOOSE_RUN_OPTIONS, stacklevel=3)
    options = as_options(options)
    check_max_new_tokens(max_new_tokens)
    _check_input_ids(ea_model, input_ids, max_new_tokens)
    kwargs = _sampling_kwargs(temperature, top_p, top_k)
    if tree_choices is not None:
        kwargs["tree_choices"] = tree_choices
    ea_model, context = eagle_context(ea_model, context, loose)
    with scope(ea_model, context, options) as session:
        kept_per_call, raw = decode(ea_model, input_ids, max_new_tokens, kwargs, stop_at_eos, session)
    per_call = session.ledgers[-len(kept_per_call) :]
    for kept, ledger in zip(kept_per_call, per_call):
        ledger.keep_first(len(kept))  # the pending root and eagle's overshoot are not output
    metrics = per_call[0].metrics
    for ledger in per_call[1:]:
        metrics = metrics.merge(ledger.metrics)
    tokens = [t for kept in kept_per_call for t in kept]
    return EagleGeneration(tokens, metrics.token_tiers[:], metrics, raw, session.cache_bytes())


# =========================================================================== the framework registry's entry


def run(pair: LoadedPair, request: RunRequest) -> RunOutput:
    """The ``eagle`` entry of :mod:`viasd_adapt.frameworks`.

    ``plain``: ``eagenerate`` with no viasd-adapt scope at all; every tier mode: :func:`generate`.
    ``request.stop_at_eos=False`` generates exactly ``max_new_tokens`` where eagle can (see
    :func:`decode`). ``RunOutput.extra_bytes`` is EAGLE's pre-allocated KV memory.
    ``settings.gamma`` has no effect: EAGLE drafts a tree (eagle's default ``mc_sim_7b_63``).
    """
    from viasd_adapt.frameworks.registry import PLAIN
    from viasd_adapt.frameworks.requests import RunOutput

    ea_model = load_for_pair(pair)  # loaded once per pair
    sampling = request.sampling
    temperature = 0.0 if sampling.greedy else sampling.temperature
    kwargs = _sampling_kwargs(temperature, sampling.top_p, sampling.top_k or 0)
    ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=ea_model.base_model.lm_head.weight.device)
    torch.manual_seed(request.seed)
    random.seed(request.seed)  # eagle's own sampling acceptance (plain, none) draws from Python's random
    notes = []
    sanity = getattr(ea_model, "viasd_sanity", None)
    if sanity is not None:
        notes.append(f"EAGLE base model checked against stock transformers: max |logit diff| {sanity.max_abs_diff_plain:.2g}")
    if request.mode == PLAIN:
        _check_input_ids(ea_model, ids, request.max_new_tokens)
        kept_per_call, raw = decode(ea_model, ids, request.max_new_tokens, kwargs, request.stop_at_eos)
        tokens = [t for kept in kept_per_call for t in kept]
        q_bytes = sum(t.numel() * t.element_size() for t in ea_model.past_key_values_data)
        return RunOutput(tokens, None, _trim_note(raw, tokens, notes), extra_bytes=q_bytes)
    settings = request.settings
    result = generate(ea_model, ids, request.max_new_tokens, temperature=temperature, top_p=sampling.top_p,
                      top_k=sampling.top_k or 0, stop_at_eos=request.stop_at_eos, context=request.context_on(pair))
    if settings.mode is Mode.NONE and not sampling.greedy:
        notes.append("mode none is eagle-llm unchanged: its bonus token after a fully accepted path ignores temperature/top-p")
    return RunOutput(result.tokens, result.metrics, _trim_note(result.raw_new_tokens, result.tokens, notes),
                     extra_bytes=result.cache_bytes)


def _trim_note(raw: int, tokens: list[int], notes: list[str]) -> list[str]:
    if raw > len(tokens):
        notes.append(f"eagle produced {raw} tokens; trimmed to {len(tokens)} (budget / EOS)")
    return notes


__all__ = ["EagleGeneration", "TREE_MARGIN", "decode", "generate", "run"]
