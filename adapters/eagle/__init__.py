"""EAGLE adapter: the slim tier inside an existing eagle-llm 1.2.1 ``EaModel`` pipeline.

Usage (the EAGLE head and eagle's drafting code are untouched)::

    import viasd_adapt
    from viasd_adapt.adapters import eagle
    ea_model = eagle.load_ea_model(base_path, head_path)          # transformers-5 safe, checked
    run = viasd_adapt.context(ea_model, mask="mask.json", settings=TierSettings(mode="lossy"))
    with eagle.tiered(ea_model, context=run) as session:
        ea_model.eagenerate(input_ids, max_new_tokens=64)
    print(session.last_metrics.to_dict())
    # or, with eagle's overshoot trimmed and inputs checked:
    lossless = viasd_adapt.context(ea_model, mask="mask.json", settings=TierSettings(mode="lossless"))
    result = eagle.generate(ea_model, input_ids, 64, context=lossless,
                            options=eagle.EagleOptions(lossless_strategy="cascade"))

Layout: :mod:`.compat` (eagle-llm on transformers 5, load-time sanity checks), :mod:`.tree` (pure
tree math), :mod:`.slim_tree` (u: the routed view of eagle's base model and its cache),
:mod:`.target` (q: eagle's cache fed with the lag, resumed passes), :mod:`.decide` (one cycle's
path and decision: the tier is decided by :func:`viasd_adapt.core.cycle.decide_cycle`), :mod:`.state`
(the typed per-cycle state), :mod:`.session` (what each patched function does), :mod:`.patches`
(per-thread dispatch of eagle's swapped names), :mod:`.options`, :mod:`.entry` (:func:`generate`,
:func:`run`).

Seams (traced in eagle-llm 1.2.1). ``EaModel.eagenerate`` runs, per cycle,
``generate_candidates`` (head tree) -> ``tree_decoding`` (one target forward over the tree) ->
``evaluate_posterior`` (acceptance) -> ``update_inference_inputs`` (KV compaction, commit, the head
drafts the next tree from the target's features), after ``initialize_tree`` (prefill).
``ea_model.py`` does ``from .utils import *``, so those names are looked up in
``eagle.model.ea_model``'s globals: that is where they are swapped, for per-thread dispatchers
(:mod:`.patches`): a thread without a scope, or a generation of another EaModel, gets eagle's own
functions, so another thread's stock ``eagenerate`` is never tiered. Every name is restored when
the last scope closes (also on an exception); ``reset_tree_mode`` leaves no tree mask behind.
Scopes on different EaModels may be open in different threads at once; one thread holds one
scope, one EaModel is in one scope (it has one KV cache): both are refused with a clear error.

Modes, per cycle (``root`` = the token the previous cycle decided, the tree's root):

* ``none``: eagle's own functions run unchanged; the adapter only observes them and records each
  cycle through the ledger.
* ``lenient``: q runs over the whole tree as stock eagle does; the path with the longest run of
  drafts accepted under the lenient rule (greedy; sampling: the first-sample chain) is decided by
  ``decide_cycle``. At lenience 0 the greedy output is eagle's own, token for token.
* ``lossless``, ``route`` (default): u runs over the tree instead of q, picks the path and proposes
  one extra token after it; q runs over ``root + path + extra`` only (greedy: over two paths at
  once, u's and the head's top-1 chain, with eagle's tree attention) and verifies every position
  with the core's lossless verify against the distribution it was proposed from (p for the head's
  drafts, u for the extra token). u never cuts the head's path short; the output is exactly q's.
* ``lossless``, ``cascade`` (p -> u -> q, ``decide_cycle`` in lossless mode): u verifies the path
  losslessly and extends it with its own correction or bonus; q verifies those candidates against
  u. Every committed token is q's argmax (greedy) or exactly q-distributed (sampling). Cost: one
  slim tree pass plus one full pass over at most depth+2 tokens instead of the 26-token tree;
  whether that is cheaper depends on the hardware (on a GPU a forward over 26 tokens costs about
  as much as over 7), so the benchmark reports it as measured.
* ``lossy`` (the paper): u runs over the tree; gate 1 and the router decide; q runs only on
  escalation, over the lag (tokens it never saw) plus ``root + path``, in one forward.
* ``audit``: lossy decisions, with q run over the path every cycle in shadow.

The adaptive tier (``TierSettings.adaptive``, lossless and lossy): before ``tree_decoding`` runs a
verifier, the session asks the verify step for the cycle's arm, chosen from the cycles before it.
The tier's arm runs the mode as above; the untiered arm is the lenient path at lenience 0, which is
exactly mode ``none``: q over the whole tree (after whatever lag a lossy cycle left it), the lossless
rule on one path. The slim verifier skips that cycle and catches up on its lag at its next tree pass.

Which path of the tree. Greedy: the path with the longest run of accepted drafts under the first
verifier's rule (eagle's own greedy rule with u, or the lenient q, in q's place). Sampling: the
*first-sample chain* (the path through each node's first child). EAGLE draws siblings without
replacement, so only that chain consists of plain samples from the head's distribution p, which
is what the tier rules (and their lossless proof) assume. The other paths are not used when
sampling: that keeps every mode exact, at the price of EAGLE's multi-path gain.

What the head gets as features for tokens q never processed (lossy/audit). EAGLE's head needs the
target's last hidden state for every committed token. When tiers 1-2 commit without q, there is no
q feature; the slim verifier's final hidden state (after the shared final norm) stands in
(``HeadFeatures.SLIM``, the default). The head's own cache keeps those entries. ``HeadFeatures.FULL``
runs q over the committed tokens every cycle just to get true features: a measurement device (a q
pass per cycle, counted in ``full_passes``). Audit uses the features lossy would, so its decisions
are lossy's.

KV caches. q keeps eagle's pre-allocated cache with a ``valid`` count (:mod:`.target`): lossy cycles
that skip q leave it behind, and the next q forward feeds the lag and the new tokens together. u
has its own pre-allocated eagle ``KVCache`` for the retained layers only (:mod:`.slim_tree`). After
each cycle both caches are compacted like eagle compacts its own.

Prefix sharing (docs/method.md section 3; implemented for lossy and audit). Below the mask's first
skipped layer s1, u and q compute the same keys, values and residual stream for the same tokens at
the same positions (a path of the tree attends exactly to its ancestors, so the tree pass computes
for root + path what a linear pass would). In lossy and audit mode every q pass is over tokens the
slim tree pass already processed: the lag (committed in earlier cycles from tree nodes, or q's own
tokens that u then saw as roots) and ``root + path``. So q resumes at s1 from the ``h_s1`` the slim
pass recorded (a buffer laid out and compacted like u's cache), and copies u's keys/values of the
layers below s1 into its own cache, which thus stays exactly what a plain forward would leave
(equal within float32 rounding of attention sums, see the tests). ``EagleOptions(share_prefix=False)``
switches it off. Not shared, and why:

* lossless (``route`` and ``cascade``): q's pass always ends with a token u never processed at its
  position (route: u's extra token after the path; cascade: u's correction or bonus token), and
  greedy route's two-path sub-tree is laid out in other cache slots than u's tree. Resuming would
  need a second forward through layers ``< s1`` for that token before q's resumed pass; as in the
  core (:mod:`viasd_adapt.routing.shared`), one full forward is preferred to two on hardware where a
  layer costs about the same for one token as for a block.
* none and lenient: there is no slim pass to share.
* s1 = 0 (a mask that skips layer 0): nothing below s1.

Upstream bugs and limits, and what the adapter does:

* Sampling, bonus token: eagle samples the token after a fully accepted path from the *unwarped*
  softmax (temperature and top-p ignored). In lenient/lossless/lossy/audit every token comes from
  the core's verification on warped distributions, so the bug is gone there. ``mode="none"`` is
  eagle unchanged and keeps it.
* Batch size 1 only: enforced with a ConfigError in :func:`generate` and in the patched prefill.
* ``max_new_tokens`` overshoot (eagle stops *after* the cycle that passes the budget, up to the
  tree depth + 1 tokens too many): in a scope, ``ea_model.eagenerate`` (the scope's thread only)
  and :func:`generate` cut the output, and the metrics, to the budget and to the first EOS, as stock
  HF ``generate`` returns it (:func:`.session.budgeted_eagenerate`). Observer hooks see the
  overshoot cycle in full: eagle's loop, not the adapter, decides when to stop.
* transformers 5's deprecation notices about eagle's code (``use_return_dict``,
  ``past_key_values``) are dropped for the scope's thread while it is open
  (:func:`.compat.quiet_eagle_deprecations`).
* eagle always stops at EOS: ``generate(..., stop_at_eos=False)`` continues past it with another
  ``eagenerate`` call on the prompt plus everything so far (metrics of the calls are merged).
"""

from viasd_adapt.adapters.eagle.compat import (
    check_base_model,
    check_head_embeddings,
    check_head_matches,
    eagle_compat,
    load_ea_model,
    repair_rotary_caches,
)
from viasd_adapt.adapters.eagle.entry import EagleGeneration, generate, run
from viasd_adapt.adapters.eagle.options import EagleOptions, HeadFeatures, LosslessStrategy
from viasd_adapt.adapters.eagle.patches import PATCHED_NAMES, is_patched
from viasd_adapt.adapters.eagle.session import EagleTierSession, tiered
from viasd_adapt.adapters.eagle.slim_tree import SlimTreeVerifier
from viasd_adapt.core.plugins import GreedyArgmaxAcceptance

__all__ = ["EagleOptions", "EagleTierSession", "generate", "load_ea_model", "tiered"]
