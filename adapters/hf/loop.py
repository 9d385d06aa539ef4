"""What a patched ``generate`` call runs: transformers' own loop, observed (mode ``none``), or the
tier's own loop handed to ``generate(custom_generate=...)`` (every tiered mode), with the call's run
context (:meth:`~viasd_adapt.adapters.hf.TierSession.context_for`: the session's, for the call's drafter).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
import torch
from torch import nn
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from viasd_adapt.adapters.hf.checks import (ViasdFallbackWarning, check_budget, check_cache_options, check_prompt, fallback_reason,
                                            normalise_call, uncarried_inputs_reason)
from viasd_adapt.checks import check_drafter_pair, check_fits_context, check_max_new_tokens, eos_ids
from viasd_adapt.config.tuned import PROMPT_LOOKUP_DRAFTER
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.notices import caller_stacklevel
from viasd_adapt.core.sampling import ProcessorWarper
from viasd_adapt.core.settings import Mode
from viasd_adapt.core.tiers import verified_cycle
from viasd_adapt.engine.context import RunContext
from viasd_adapt.engine.drafters import ModelDrafter
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.engine.prompt_lookup import DEFAULT_MAX_NGRAM, PromptLookupSpec
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import model_kind

from viasd_adapt.adapters.hf.session import FRAMEWORK, TierSession


def _fall_back(session: TierSession, reason: str, run):
    warnings.warn(f"viasd-adapt: the slim tier is off for this call ({reason}); running transformers' stock path",
                  ViasdFallbackWarning, stacklevel=caller_stacklevel())
    session.fallbacks.append(reason)
    return run()


def _call_drafter(session: TierSession, original, args: tuple, kwargs: dict):
    """What this call drafts with (its assistant model, or prompt lookup); None when it names neither
    or its arguments cannot be read (the call itself then says what is wrong)."""
    try:
        call = normalise_call(original, args, kwargs)
    except ConfigError:
        return None
    if call.get("assistant_model") is not None:
        return call["assistant_model"]
    config = call.get("generation_config") or session.target.generation_config
    lookup = call.get("prompt_lookup_num_tokens") or getattr(config, "prompt_lookup_num_tokens", None)
    return PROMPT_LOOKUP_DRAFTER if lookup is not None else None


def tiered_generate(session: TierSession, original, args: tuple, kwargs: dict):
    target = session.target
    # the call's context: for its drafter (settings=None ran the tuned choice: was it measured with it?)
    drafter = _call_drafter(session, original, args, kwargs)
    context = session.context_for(drafter) if drafter is not None else session.context
    if getattr(original, "__func__", None) is not getattr(type(target), "generate", None):
        return _fall_back(session, "generate() was replaced on this instance before patching; calling that replacement",
                          lambda: original(*args, **kwargs))
    if context.mode is Mode.NONE:
        return _generate_observed(session, context, original, args, kwargs)
    call = normalise_call(original, args, kwargs)
    reason = fallback_reason(target, call) or uncarried_inputs_reason(target, original, call)
    if reason is not None:
        return _fall_back(session, reason, lambda: original(**call))
    if model_kind(target).encoder_decoder:  # a source and a decoder prompt instead of one prompt
        from viasd_adapt.adapters.hf_seq2seq_loop import prepare_seq2seq_call

        prepare_seq2seq_call(target, call)
    else:
        check_prompt(call)
    check_budget(call)
    check_cache_options(target, call)
    if call.get("assistant_model") is not None:  # prompt lookup drafts from the prompt's own tokens
        check_drafter_pair(target, call["assistant_model"], call.get("tokenizer", session.tokenizer),
                           call.get("assistant_tokenizer", session.assistant_tokenizer), role="assistant")
    call.pop("assistant_tokenizer", None)  # same vocabulary established above; stock would refuse it
    return _generate_own_loop(session, context, original, call)


def _attach(output, metrics: TierMetrics):
    if not isinstance(output, torch.Tensor):
        setattr(output, "viasd_metrics", metrics)
    return output


# ---------------------------------------------------------------------------- none: stock, observed


class _StockObserver:
    """Mode ``none``: transformers' own loop runs untouched; this only watches its cycles.

    The candidate generator transformers builds keeps its type and every behaviour: two of its
    methods get instance-level wrappers (on that one, per-call object) that call the originals with
    the same arguments, return their results unchanged, and note the drafts and what was kept.
    Observation never raises into the stock loop: a generator it cannot read is simply not counted.
    """

    def __init__(self, context: RunContext):
        self.step = context.verify_step(FRAMEWORK)
        self.pending: tuple[int, int] | None = None  # (committed length, drafts) of the open cycle

    def wrap(self, generator, kwargs: dict):
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy

        def observed_get_candidates(input_ids, *args, **kw):
            out = get_candidates(input_ids, *args, **kw)
            with contextlib.suppress(Exception):
                self.pending = (int(input_ids.shape[1]), int(out[0].shape[1] - input_ids.shape[1]))
            return out

        def observed_update(input_ids, scores, num_matches, *args, **kw):
            cycle = None
            with contextlib.suppress(Exception):  # reading transformers' state may fail: then not counted
                cycle = self._read(input_ids, int(num_matches))
            if cycle is not None:  # recording runs the user's observers: their errors are theirs to see
                # the stock assistant runs one forward per draft; prompt lookup runs no model
                draft_passes = 0 if isinstance(generator, PromptLookupCandidateGenerator) else cycle[1]
                self.step.observe(cycle[0], drafted=cycle[1], draft_passes=draft_passes)
            return update(input_ids, scores, num_matches, *args, **kw)

        generator.get_candidates = observed_get_candidates
        generator.update_candidate_strategy = observed_update
        return generator

    def _read(self, input_ids: torch.Tensor, num_matches: int):
        """The cycle transformers just verified, as ``(CycleResult, drafted)``; None if none is open."""
        if self.pending is None:
            return None
        start, drafted = self.pending
        self.pending = None
        tokens = input_ids[0, start:].tolist()
        return verified_cycle(tokens, min(num_matches, len(tokens) - 1), drafted, drafted), drafted


def _generate_observed(session: TierSession, context: RunContext, original, args: tuple, kwargs: dict):
    observer = _StockObserver(context)
    with session.observing_stock_call(observer):
        output = original(*args, **kwargs)
    session._record(observer.step.metrics)
    return _attach(output, observer.step.metrics)


# ---------------------------------------------------------------------------- tiered modes: own loop


class _OwnLoop:
    """The decoding method handed to ``generate(custom_generate=...)`` for every tiered mode.

    transformers calls it as ``method(model, input_ids, logits_processor=, stopping_criteria=,
    generation_config=, **model_kwargs)`` after preparing all of those; the drafter and streamer,
    which 5.24 does not forward to a callable, are closed over. The prepared logits processors are
    applied to p, u and q row by row with each row's prefix (:class:`ProcessorWarper`), as the stock
    loop applies them to q. For an encoder-decoder target ``input_ids`` are the decoder ids and
    ``inputs_tensor`` the source; its rows are built by :class:`viasd_adapt.adapters.hf_seq2seq.Seq2SeqRows`.
    """

    def __init__(self, session: TierSession, context: RunContext, assistant: nn.Module | None, streamer,
                 lookup: tuple[int, PromptLookupSpec] | None = None):
        self.session, self.assistant, self.streamer = session, assistant, streamer
        # the call's context: with prompt lookup, the call's prompt_lookup_num_tokens is the block length, as in stock
        self.context = context if lookup is None else context.with_block_length(lookup[0])
        self.lookup = lookup  # (block length, spec) when the call asked for prompt lookup instead of an assistant
        self.metrics: TierMetrics | None = None

    def __call__(self, model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                 inputs_tensor=None, **model_kwargs):
        config = generation_config
        max_new = check_max_new_tokens(int(config.max_length) - input_ids.shape[1])
        warper = ProcessorWarper(logits_processor, greedy=not bool(getattr(config, "do_sample", False)))
        # One verify step for the call, every row's cycles through it; the adaptive tier (when the
        # settings adapt) prices this call's drafter: the assistant, or none (lookup).
        self.step = self.context.verify_step(FRAMEWORK, greedy=warper.greedy)
        kind = model_kind(model)
        if kind.encoder_decoder:  # input_ids are decoder ids; each row also reads its source
            from viasd_adapt.adapters.hf_seq2seq_loop import Seq2SeqRows

            generate_row = Seq2SeqRows(self, model, input_ids, inputs_tensor, model_kwargs, max_new, warper,
                                       stopping_criteria, config)
        else:
            attention = model_kwargs.get("attention_mask")

            def generate_row(b: int):
                row = input_ids[b] if attention is None else input_ids[b][attention[b].bool()]
                return self._generate_row(model, row, max_new, stopping_criteria, config, warper)

        rows = []
        try:
            for b in range(input_ids.shape[0]):
                rows.append(generate_row(b))
        finally:
            if self.streamer is not None:
                self.streamer.end()
        metrics = rows[0].metrics
        for extra in rows[1:]:
            metrics = metrics.merge(extra.metrics)
        self.metrics = metrics
        sequences = _pad_right(input_ids, [r.tokens for r in rows], _pad_id(config))
        if config.return_dict_in_generate:
            output = kind.generate_output_class()(sequences=sequences)
            output.viasd_row_metrics = [r.metrics for r in rows]
            return output
        return sequences

    def _generate_row(self, model, prompt_ids: torch.Tensor, max_new: int, stopping_criteria, config, warper):
        """One sequence (padding already stripped, so positions start at 0 as HF's mask-derived ones do)."""
        session = self.session
        # No speculative margin: the engine shortens every block to the budget left, so no forward
        # (draft, verify or bonus) reaches past prompt + max_new positions.
        check_fits_context(model, prompt_ids.shape[0], max_new)
        verifier = TieredVerifier.of(self.context, self.step, warper, share_prefix=session.share_prefix)
        if self.lookup is None:
            drafter = ModelDrafter(self.assistant, warper)
        else:
            drafter = self.lookup[1].drafter(verifier.vocab_size, eos_ids(_config_eos(config)), prompt_ids.device)
        return self.run_row(verifier, drafter, prompt_ids, max_new, stopping_criteria, config)

    def run_row(self, verifier, drafter, prompt_ids: torch.Tensor, max_new: int, stopping_criteria, config):
        """The engine loop for one row, with the call's stopping criteria, EOS ids and streamer."""
        device = prompt_ids.device
        criteria = criteria_beyond_the_loop(stopping_criteria)

        def should_stop(ids: list[int]) -> bool:
            return bool(criteria(torch.tensor([ids], device=device), None).all())

        def on_tokens(new: list[int]) -> None:
            if self.streamer is not None and new:
                self.streamer.put(torch.tensor([new]))

        # No q prefill: like the stock loop, draft straight after the prompt (q sees the prompt at
        # its first pass), so cost is compared with assisted generation cycle for cycle.
        return speculative_generate(drafter, verifier, prompt_ids.tolist(), max_new, eos_ids(_config_eos(config)),
                                    None, on_tokens=on_tokens, should_stop=should_stop if criteria else None,
                                    q_prefill=False)


def criteria_beyond_the_loop(stopping_criteria) -> list:
    """The call's stopping criteria less the two the engine loop already applies: transformers'
    ``MaxLengthCriteria`` (the loop stops at ``max_length`` less the padded prompt, never later than
    the criterion would) and ``EosTokenCriteria`` (the loop stops at the first of the same EOS ids).
    Why: each criterion is asked after every token, on a tensor on the model's device, and reading
    its answer is a host synchronisation; these two, which every call has, would only repeat the
    loop's own checks. Any other criterion (stop strings, a time limit, the user's) is kept; an
    exact type check, so that a subclass with its own rule is kept too."""
    from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList

    return StoppingCriteriaList(c for c in (stopping_criteria or ()) if type(c) not in (MaxLengthCriteria, EosTokenCriteria))


def _config_eos(config):
    """The EOS ids transformers prepared for this call (its tensor), else the config's own."""
    prepared = getattr(config, "_eos_token_tensor", None)
    return prepared if prepared is not None else config.eos_token_id


def _pad_id(config) -> int:
    for value in (getattr(config, "_pad_token_tensor", None), getattr(config, "pad_token_id", None)):
        if value is not None:
            return int(torch.as_tensor(value).reshape(-1)[0])
    eos = eos_ids(config.eos_token_id)
    return eos[0] if eos else 0


def _pad_right(input_ids: torch.Tensor, generated: list[list[int]], pad_id: int) -> torch.Tensor:
    """The (left-padded) prompts followed by each row's tokens, right-padded like HF's batched output."""
    width = max(len(tokens) for tokens in generated)
    tail = torch.full((input_ids.shape[0], width), pad_id, dtype=input_ids.dtype, device=input_ids.device)
    for b, tokens in enumerate(generated):
        tail[b, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype)
    return torch.cat([input_ids, tail], dim=-1)


def _lookup_request(target: nn.Module, call: dict) -> tuple[int, PromptLookupSpec] | None:
    """``(block length, spec)`` when the call asks for prompt lookup; takes the lookup options out of
    the call, since the tier's loop, not transformers', does the lookup."""
    config = call.get("generation_config") or target.generation_config
    num_tokens = call.pop("prompt_lookup_num_tokens", None) or getattr(config, "prompt_lookup_num_tokens", None)
    max_ngram = call.pop("max_matching_ngram_size", None) or getattr(config, "max_matching_ngram_size", None)
    if num_tokens is None:
        return None
    if getattr(config, "prompt_lookup_num_tokens", None) is not None:
        config = call["generation_config"] = copy.deepcopy(config)
        config.prompt_lookup_num_tokens = None
    return int(num_tokens), PromptLookupSpec(int(max_ngram or DEFAULT_MAX_NGRAM))


def _generate_own_loop(session: TierSession, context: RunContext, original, call: dict):
    lookup = _lookup_request(session.target, call)
    assistant = call.pop("assistant_model", None)
    loop = _OwnLoop(session, context, assistant, call.get("streamer"), lookup)
    call["custom_generate"] = loop
    output = original(**call)
    if loop.metrics is not None:
        session._record(loop.metrics)
        _attach(output, loop.metrics)
    return output

__all__ = ["tiered_generate"]
