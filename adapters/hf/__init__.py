"""Hugging Face transformers adapter: the slim tier inside ``target.generate(assistant_model=...)``.

The user's code stays::

    import viasd_adapt
    from viasd_adapt.adapters import hf
    run = viasd_adapt.context(target, mask="mask.json", settings=TierSettings(mode="lossy"))
    with hf.tiered(target, context=run) as session:
        out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=64)
    print(session.metrics.to_dict())

Seams (verified on transformers 5.24):

* **none** runs transformers' own assisted-decoding loop, untouched: no input check, no changed
  type, no changed state. Its cycles are only *observed* (instance-level wrappers on the per-call
  candidate generator that call the originals and return their results), so the patched model
  behaves exactly like the stock one, and the session still gets the untiered metrics.
* **lenient / lossless / lossy / audit** run the tier's own loop
  (:func:`viasd_adapt.engine.loop.speculative_generate`, one :func:`viasd_adapt.core.cycle.decide_cycle`
  per cycle), registered through ``generate(custom_generate=<callable>)``. transformers 5.24 drops
  ``assistant_model`` (and the streamer) when ``custom_generate`` is a callable, so the patched
  ``generate`` takes the drafter out of the call and closes over it; transformers still prepares
  the generation config, the stopping criteria and the logits processors, and puts the prompt on
  the streamer. The prepared processors are applied to every model's logits row by row, as the
  stock loop applies them to q's. The loop drafts ``settings.gamma`` tokens per cycle and never
  touches the assistant's generation config (the heuristic draft-length schedule of stock
  assisted decoding keeps its state: a tiered call leaves nothing behind that changes later calls).

Encoder-decoder targets (T5, BART, mBART, Marian, Whisper) take the same paths; their tiered rows
reuse the target's encoder output and run the engine over the decoder ids
(:mod:`viasd_adapt.adapters.hf_seq2seq`, :mod:`viasd_adapt.engine.seq2seq`).

KV caches: the target's runners (:mod:`viasd_adapt.routing.shared`) are built per ``generate``
call. With a mask whose first skipped layer s1 > 0 the slim and full verifiers share the cache
and the residual stream of layers below s1, and q's passes over tokens u already saw start at s1.

GPU options (transformers' own speed switches) with the tier:

* attention: ``sdpa`` (transformers' default), ``eager`` and ``flash_attention_2`` only change
  the attention kernel; the routed views and the shared prefix use the model's own layers, so
  they work as the target does (sdpa and eager are tested; FA2 is not installed where we test);
* ``torch.compile``: compile the decoder layers in place (``layer.compile()``), which every view
  shares; ``model.compile()`` and ``model.forward = torch.compile(model.forward)`` leave the
  routed views uncompiled; a ``torch.compile(model)`` wrapper is refused with a clear error;
* caches: the tier keeps its own dynamic caches; another ``cache_implementation`` (static,
  offloaded, quantized, hybrid) is replaced for the call with a :class:`ViasdCacheWarning`, and a
  cache object passed to ``generate`` is refused (it would not be updated).

Thread safety: the patch sets instance attributes (``generate`` and ``_get_candidate_generator``) on
this one model object, never on its class, so other instances are untouched. The installed methods
are dispatchers that look up the session of the *calling thread*: a thread that did not open a
session on this model gets the original methods, even while another thread is inside ``tiered``.
Sessions nest; the instance attributes are removed (or the user's own instance attributes put
back) when the last session on the model closes, also when generation raised.

The adapter is one package, a module per job: :mod:`.patch` (the per-instance patch),
:mod:`.session` (a session's run context and metrics), :mod:`.checks` (what a call may ask for, and why a call falls back), :mod:`.loop` (what a
patched ``generate`` call runs: transformers' own loop observed, or the tier's own loop) and
:mod:`.runner` (the ``hf`` entry of :mod:`viasd_adapt.frameworks`). Their public names are here.
"""

from __future__ import annotations


from viasd_adapt.adapters.hf.checks import ViasdCacheWarning, ViasdFallbackWarning
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.verify_step import VerifyStep
from viasd_adapt.adapters.hf.patch import is_patched, patch, tiered, unpatch
from viasd_adapt.adapters.hf.session import FRAMEWORK, TierSession
from viasd_adapt.adapters.hf.runner import drafting_blocks_of, fix_draft_length, run

__all__ = ["TierSession", "ViasdCacheWarning", "ViasdFallbackWarning", "patch", "tiered", "unpatch"]
