"""The runners of the frameworks that are baselines rather than adapters.

* ``ar``: the target decoding on its own with HF ``generate`` (no drafter, no tier);
* ``lookup``: stock HF prompt lookup, n-grams of the text as drafts (no drafter model, no tier);
* ``engine``: classic speculative decoding through :mod:`viasd_adapt.engine`, the loop the HF
  adapter's tiered modes run; it separates the tier's effect from the difference between that loop
  and transformers' own.

They are registered by name in :mod:`viasd_adapt.frameworks.registry`, like every framework.

Each streams its tokens to ``request.on_tokens`` as they are committed (``viasd generate``): ``ar``
and ``lookup`` through a transformers streamer, ``engine`` through its verify step's observer hook
(:attr:`~viasd_adapt.frameworks.requests.RunRequest.stream_plugins`), as the adapters do.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

import torch

from viasd_adapt.core.tiers import Tier
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.frameworks.requests import RunOutput, RunRequest, TokenCallback

#: The text of the notice transformers 5 logs when ``generate`` gets a ``generation_config`` and
#: generation arguments beside it (:func:`assistant_config_notice_dropped`).
ASSISTANT_CONFIG_NOTICE = "Passing `generation_config` together with generation-related"


class _DropAssistantConfigNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(ASSISTANT_CONFIG_NOTICE)


@contextmanager
def assistant_config_notice_dropped() -> Iterator[None]:
    """Drops, for the duration, transformers' deprecation notice about ``generation_config`` passed
    with generation arguments beside it.

    Why: the project's own calls pass a :func:`generation_config_for` config and model inputs only.
    The notice comes from transformers' *own* assisted decoding: its ``AssistedCandidateGenerator``
    calls the assistant's ``generate`` with its copy of the config plus ``min_new_tokens`` and
    ``max_new_tokens`` on every round (transformers 5.x), whoever called ``generate``. No caller can
    avoid it, so it only buries the output of ``viasd generate``. Scoped: the filter sits on
    transformers' generation logger while a run of ours is inside ``generate`` and is removed after.
    """
    logger = logging.getLogger("transformers.generation.utils")
    notice = _DropAssistantConfigNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


class _CallbackStreamer:
    """A transformers streamer (``generate(streamer=...)``: ``put`` then ``end``) that hands each
    batch of new tokens to ``on_tokens``, with ``tier`` for every token (None: the run keeps no tiers).
    The first ``put`` is the prompt, which is skipped."""

    def __init__(self, on_tokens: TokenCallback, tier: int | None):
        self.on_tokens, self.tier, self.prompt_seen = on_tokens, tier, False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        tokens = [int(t) for t in value.reshape(-1).tolist()]
        self.on_tokens(tokens, None if self.tier is None else [self.tier] * len(tokens))

    def end(self) -> None:
        pass


def streamer_for(request: RunRequest, tier: int | None):
    """The ``streamer`` argument of a stock ``generate`` call: None when nobody listens."""
    return _CallbackStreamer(request.on_tokens, tier) if request.on_tokens is not None else None


def generation_config_for(pair: LoadedPair, request: RunRequest, **extra):
    """A GenerationConfig that samples exactly like ``request.sampling`` and stops at EOS only when
    asked (benchmarks generate exactly ``max_new_tokens``)."""
    from transformers import GenerationConfig

    pad = getattr(pair.target.generation_config, "pad_token_id", None)
    eos = pair.eos_token_ids if request.stop_at_eos else None
    sampling = request.sampling
    # eos_token_id=None would be filled in from the model's own generation config, which stops at
    # EOS; an empty list is "no EOS" (the target keeps writing its argmax past EOS, like the engine).
    kwargs = dict(max_new_tokens=request.max_new_tokens, eos_token_id=list(eos) if eos else [],
                  pad_token_id=0 if pad is None else pad)
    if sampling.greedy:
        kwargs.update(do_sample=False)
    else:
        kwargs.update(do_sample=True, temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p)
    kwargs.update(extra)
    return GenerationConfig(**kwargs)


def run_ar(pair: LoadedPair, request: RunRequest) -> RunOutput:
    """The target alone, with HF ``generate`` (every token is a full-verifier token)."""
    from viasd_adapt.core.ledger import plain_decoding_metrics

    torch.manual_seed(request.seed)
    ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=pair.device)
    with torch.no_grad():
        out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=generation_config_for(pair, request),
                                   streamer=streamer_for(request, int(Tier.FULL)))
    tokens = out[0, len(request.prompt_ids):].tolist()
    return RunOutput(tokens, plain_decoding_metrics(tokens))


def run_prompt_lookup(pair: LoadedPair, request: RunRequest) -> RunOutput:
    """Stock HF prompt lookup decoding, ``generate(prompt_lookup_num_tokens=gamma)``: n-grams of
    the text as drafts, no drafter model and no viasd-adapt. A baseline every pair can run beside
    its drafter's rows (Spec-Bench reports it as PLD): a trained drafter and the tier have to beat
    it too. Its target forwards are counted by the bench's meter, as for every stock row."""
    from viasd_adapt.engine.prompt_lookup import DEFAULT_MAX_NGRAM

    torch.manual_seed(request.seed)
    ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=pair.device)
    config = generation_config_for(pair, request, prompt_lookup_num_tokens=request.settings.gamma,
                                   max_matching_ngram_size=DEFAULT_MAX_NGRAM)
    with torch.no_grad():
        out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                   streamer=streamer_for(request, None))  # stock: no tiers to show
    return RunOutput(out[0, len(request.prompt_ids):].tolist())


def run_engine(pair: LoadedPair, request: RunRequest) -> RunOutput:
    """Classic SD through :mod:`viasd_adapt.engine` (mode none is the untiered loop), with the
    request's run context (its verify step, its mask's slim verifier)."""
    from viasd_adapt.checks import vocab_size_of
    from viasd_adapt.core.notices import emit
    from viasd_adapt.engine.drafters import ModelDrafter
    from viasd_adapt.engine.verifier import TieredVerifier
    from viasd_adapt.engine.loop import speculative_generate

    context = request.context_on(pair, drafter=pair.drafter)
    emit(context.notices)
    generator = torch.Generator(device="cpu").manual_seed(request.seed)
    verifier = TieredVerifier.of(context, context.verify_step("engine"), request.sampling)
    eos = pair.eos_token_ids if request.stop_at_eos else ()
    drafter = (ModelDrafter(pair.draft, request.sampling) if pair.lookup is None
               else pair.lookup.drafter(vocab_size_of(pair.target), eos, pair.device))
    out = speculative_generate(drafter, verifier, request.prompt_ids, request.max_new_tokens, eos, generator=generator)
    return RunOutput(out.tokens, out.metrics)


__all__ = ["ASSISTANT_CONFIG_NOTICE", "assistant_config_notice_dropped", "generation_config_for",
           "run_ar", "run_engine", "run_prompt_lookup", "streamer_for"]
