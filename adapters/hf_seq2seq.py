"""The ``hf`` framework's runner for encoder-decoder pairs (T5, BART, mBART, Marian, Whisper).

``target.generate(<source>, assistant_model=draft)``, with no viasd-adapt at all (``plain``) or
inside :func:`viasd_adapt.adapters.hf.tiered`. What the tier's loop does with such a call (the
source and decoder-prompt checks, one engine loop per row over the target's encoder output) is
:mod:`viasd_adapt.adapters.hf_seq2seq_loop`, whose names are importable from here too.
"""

from __future__ import annotations

import torch

from viasd_adapt.adapters.hf import drafting_blocks_of, tiered
from viasd_adapt.adapters.hf_seq2seq_loop import SOURCE_KEYS, Seq2SeqRows, call_source, prepare_seq2seq_call
from viasd_adapt.errors import ViasdError
from viasd_adapt.frameworks.registry import PLAIN
from viasd_adapt.frameworks.baselines import generation_config_for
from viasd_adapt.frameworks.requests import RunOutput
from viasd_adapt.checks import check_decoder_cache_layers
from viasd_adapt.frameworks.seq2seq import generated_tokens, request_source


def run(pair, request):
    """The ``hf`` framework's runner for an encoder-decoder pair: ``target.generate(<source>,
    assistant_model=draft)`` with no viasd-adapt at all (``plain``) or inside
    :func:`viasd_adapt.adapters.hf.tiered` in the requested mode, like :func:`viasd_adapt.adapters.hf.run`."""
    if request.mode in (PLAIN, "none"):  # transformers' own loop decodes (the tiered modes keep their own caches)
        check_decoder_cache_layers(pair.target)
        check_decoder_cache_layers(pair.draft)
    assistant = drafting_blocks_of(pair.draft, request.settings.gamma)
    source = {pair.target.main_input_name: request_source(pair, request)}
    config = generation_config_for(pair, request)

    def generate():
        torch.manual_seed(request.seed)
        with torch.no_grad():
            return pair.target.generate(**source, generation_config=config, assistant_model=assistant)

    if request.mode == PLAIN:
        return RunOutput(generated_tokens(pair.target, generate()))
    with tiered(pair.target, context=request.context_on(pair)) as session:
        out = generate()
    if session.fallbacks:
        raise ViasdError(f"the hf adapter fell back to the stock path: {session.fallbacks[-1]}")
    return RunOutput(generated_tokens(pair.target, out), session.last_metrics)


__all__ = ["SOURCE_KEYS", "Seq2SeqRows", "call_source", "prepare_seq2seq_call", "run"]
