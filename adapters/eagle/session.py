"""One ``tiered`` scope: the session's verifiers and rules, and what each patched function does.

The methods named after eagle's functions are called by the per-thread dispatchers of
:mod:`.patches` with the thread's :class:`~.state.Generation` as their first argument; they keep the
cycle in progress in its declared fields. Mode ``none`` runs eagle's own functions and only
observes them; every other mode replaces the target forward and the acceptance, and records each
decided cycle through the scope's :class:`~viasd_adapt.core.verify_step.VerifyStep`, as every framework does.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from typing import Any, Callable, Iterator

import torch
from torch import nn

from viasd_adapt.adapters.eagle.compat import check_head_embeddings, quiet_eagle_deprecations
from viasd_adapt.adapters.eagle.decide import CycleContext, decide, warp
from viasd_adapt.adapters.eagle.options import EagleOptions, as_options
from viasd_adapt.adapters.eagle.patches import close_scope, current_session, open_scope, original
from viasd_adapt.adapters.eagle.slim_tree import SlimTreeVerifier
from viasd_adapt.adapters.eagle.state import Generation, PlainVerdict, QCache, TreeCycle, TreeDraft
from viasd_adapt.adapters.eagle.target import FullTreeVerifier
from viasd_adapt.core.adaptive import Arm
from viasd_adapt.core.cycle import StopRule
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.ledger import CycleLedger
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.monitor import JunkThresholds
from viasd_adapt.core.sampling import sample_or_argmax
from viasd_adapt.core.settings import Mode
from viasd_adapt.core.tiers import verified_cycle
from viasd_adapt.core.notices import emit
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.engine.context import RunContext, eagle_switches, loose_run_options, open_context


class RecordingHead:
    """Stands in for the LM head that eagle's ``topK_genrate`` is given, and keeps each output.

    In greedy mode eagle keeps only the top-k logits of the head at each tree level; the recorded
    outputs (one per row of the tree's token table, in order) give the exact p instead.
    """

    def __init__(self, head: nn.Module):
        self.head = head
        self.outputs: list[torch.Tensor] = []

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden)
        self.outputs.append(logits.detach().reshape(-1, logits.shape[-1]))
        return logits


#: The monitor's thresholds for an EAGLE head. A head predicts from the target's own features and is
#: weaker on its own than a drafter LM: with the shipped demo head the running evidence dips to 33%
#: greedy agreement and -2.6 nats of surprise excess early in a generation (the defaults would warn),
#: and settles at 55-97% and -1.7 to +0.3 nats over 48 tokens; a head with random weights stays at
#: 0% and -5.1 to -5.4 nats. Every draft of the path gate 1 judges counts from 40 on (a cycle judges a
#: whole path: 4 to 6 drafts): over 64 tokens the demo head's judged drafts never fall to a mean
#: surprise excess of -5.0 (at worst -3.6), a random head's always do, by the 8th to 11th cycle
#: (benchmarks/results/junk_drafter_monitor.txt).
EAGLE_THRESHOLDS = JunkThresholds(max_agreement=0.25, max_surprise_excess=-4.0, max_agreement_strong=0.25, min_judged=40)


def _check_batch_of_one(input_ids: torch.Tensor) -> None:
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ConfigError(
            f"eagle-llm decodes one sequence at a time (batch size 1); got input_ids of shape {tuple(input_ids.shape)}"
        )


class EagleTierSession:
    """One ``tiered`` scope: settings, options, the two verifiers, hooks, and the metrics of every
    generation run inside it (``generations``; ``last_metrics`` is the latest)."""

    def __init__(self, ea_model: nn.Module, context: RunContext, options: EagleOptions | None = None):
        self.ea_model = ea_model
        self.context = context
        self.settings = context.settings
        self.options = as_options(options)
        shares = self.options.share_prefix and self.settings.mode in (Mode.LOSSY, Mode.AUDIT)
        # The tree variant of the slim verifier, over the routing mask the context checked.
        self.slim = (SlimTreeVerifier(ea_model.base_model, context.routing, record_prefix=shares)
                     if context.routing is not None else None)
        self.full = FullTreeVerifier(ea_model, self.slim)
        # The verify step, as in every other framework: rules, observers, the drafter-quality monitor
        # (lossy mode warns when gate 1 commits the tokens of a head unrelated to the target; greedy
        # or not is set per generation) and the ledger of each generation.
        # The adaptive tier (when the settings adapt) prices the head as the drafter, by layer counts:
        # tuned.json's points measure the engine's loop, not EAGLE's tree (viasd_adapt.engine.priors).
        self.step = context.verify_step("eagle", thresholds=EAGLE_THRESHOLDS)
        self.plugin_manager = self.step.plugin_manager
        self.ledgers: list[CycleLedger] = []
        self.stop: StopRule | None = None  # the next eagenerate's budget and EOS (set by generate())

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def generations(self) -> list[TierMetrics]:
        """The metrics of every generation run in the scope, in order."""
        return [ledger.metrics for ledger in self.ledgers]

    @property
    def last_metrics(self) -> TierMetrics | None:
        return self.generations[-1] if self.generations else None

    def cache_bytes(self) -> int:
        """EAGLE's pre-allocated KV buffers: q's (the EaModel's) and the slim verifier's own."""
        return self.full.cache_bytes() + (self.slim.cache_bytes() if self.slim is not None else 0)

    def start_generation(self) -> Generation:
        # a cycle commits at most a path of the tree and the token after it: the tree's depth + 1
        buffers = getattr(self.ea_model, "tree_buffers", None)
        most = int(buffers["retrieve_indices"].shape[1]) if buffers is not None else None
        self.step.new_generation(stop=self.stop, most_tokens=most)
        generation = Generation(self.step.ledger)
        self.ledgers.append(generation.ledger)
        return generation

    def _context(self, arm: Arm) -> CycleContext:
        """The decision's context for a cycle of ``arm``: the untiered arm decides in mode none."""
        from eagle.model.utils import TOPK

        buffers = self.ea_model.tree_buffers
        return CycleContext(
            self.step.settings_for(arm), self.step, self.options.head_features, self.options.lossless_strategy, self.slim, self.full,
            buffers["retrieve_indices"].cpu(), buffers["tree_attn_mask"][0, 0].cpu(), buffers["tree_position_ids"].cpu(),
            TOPK,
        )

    # ------------------------------------------------------------------ generation start
    def initialize_tree(self, generation: Generation, input_ids, model, tree_attn_mask, past_key_values, logits_processor):
        _check_batch_of_one(input_ids)
        self.step.set_greedy(logits_processor is None)  # eagle samples exactly when it is given a processor
        if self.mode is Mode.NONE:
            out = original("initialize_tree")(input_ids, model, tree_attn_mask, past_key_values, logits_processor)
            self.step.prefill(int(out[3].reshape(-1)[0]), draft_passes=1)
            return out
        # Our own prefill (q's first token, then the head's first tree): the same steps as eagle's,
        # with the head's outputs recorded for the exact greedy p.
        _, logits, hidden = model(input_ids, past_key_values=past_key_values, output_orig=True, init=False)
        token = sample_or_argmax(warp(logits[0, -1:], logits_processor)[0], logits_processor is None, None)
        token_ids = torch.tensor([[token]], dtype=input_ids.dtype, device=input_ids.device)
        recorder = RecordingHead(model.base_model.lm_head)
        tree_logits = model.ea_layer.topK_genrate(hidden, torch.cat((input_ids, token_ids), dim=1), recorder, logits_processor)
        model.base_model.model.tree_mask = tree_attn_mask
        generation.next_head_logits = recorder.outputs
        self.step.prefill(token, draft_passes=1)
        self.full.new_generation(input_ids.shape[1])
        if self.slim is not None:
            self.slim.new_generation()
        return tree_logits, logits, hidden, token_ids

    def candidates_drafted(self, generation: Generation, tree_logits, tree_indices, logits_processor, out) -> None:
        """After eagle's ``generate_candidates``: the cycle's tree, kept for the decision."""
        generation.tree_size = int(tree_indices.shape[0])
        if self.mode is not Mode.NONE:
            cart_candidates, _, tree_candidates = out
            draft = TreeDraft(tree_logits, tree_indices, logits_processor, generation.next_head_logits, cart_candidates,
                              tree_candidates[0])
            generation.cycle = TreeCycle(draft)

    # ------------------------------------------------------------------ one target forward over the tree
    def tree_decoding(self, generation: Generation, model, tree_candidates, past_key_values, tree_position_ids, input_ids,
                      retrieve_indices):
        if self.mode is Mode.NONE:
            return original("tree_decoding")(model, tree_candidates, past_key_values, tree_position_ids, input_ids,
                                             retrieve_indices)
        cycle = generation.cycle
        cycle.input_ids = input_ids
        # the arm is chosen from past cycles before any verifier runs: u over the tree, or q over it
        cycle.arm = self.step.next_arm()
        if self.mode is Mode.LENIENT:  # q over the tree, exactly as eagle runs it
            out = original("tree_decoding")(model, tree_candidates, past_key_values, tree_position_ids, input_ids,
                                            retrieve_indices)
            cycle.full_paths, cycle.full_hidden = out[0], out[1][0]
            return out
        if cycle.arm is Arm.PLAIN:
            # the untiered arm: q over the tree, as eagle runs it, after the lag a lossy cycle may
            # have left it (the slim verifier skips this cycle and catches up at its next pass)
            logits, hidden = self.full.forward(input_ids, tree_candidates[0].tolist(), model.base_model.model.tree_mask,
                                               tree_position_ids)
            cycle.full_paths, cycle.full_hidden = logits[retrieve_indices.to(logits.device)], hidden
            return cycle.full_paths, hidden[None], None
        logits, hidden = self.slim.tree_pass(input_ids, tree_candidates, tree_position_ids, model.base_model.model.tree_mask)
        cycle.slim_logits, cycle.slim_hidden = logits, hidden
        # eagle's shape contract: logits per path (paths, depth+1, V), tree hidden (1, tree_len, H)
        return logits[retrieve_indices.to(logits.device)], hidden[None], None

    # ------------------------------------------------------------------ acceptance
    def evaluate_posterior(self, generation: Generation, logits, candidates, logits_processor, cart_candidates_prob, op,
                           p_indices, tree_candidates, b_indices):
        if self.mode is Mode.NONE:
            best, accept_length, sample_p = original("evaluate_posterior")(
                logits, candidates, logits_processor, cart_candidates_prob, op, p_indices, tree_candidates, b_indices
            )
            best_row, accepted = candidates[int(best)], int(accept_length)
            generation.plain = PlainVerdict(generation.tree_size - 1, int((best_row[1:] >= 0).sum()),
                                            [int(t) for t in best_row[1 : accepted + 1]])
            return best, accept_length, sample_p
        resumed_before = self.full.resumed_passes
        decision = decide(self._context(generation.cycle.arm), generation.cycle)
        generation.cycle.plan = decision.plan
        self.step.record(decision.outcome, drafted=generation.tree_size - 1, draft_passes=1,
                         resumed_full_passes=self.full.resumed_passes - resumed_before, measured=decision.passes)
        return torch.tensor(decision.path), torch.tensor(len(decision.plan.committed) - 1), None

    # ------------------------------------------------------------------ commit and next tree
    def update_inference_inputs(self, generation: Generation, input_ids, candidates, best_candidate, accept_length,
                                retrieve_indices, logits_processor, logits, tree_logits, new_token,
                                past_key_values_data_list, current_length_data, model, hidden_state, hidden_state_new,
                                sample_p):
        if self.mode is Mode.NONE:
            out = original("update_inference_inputs")(
                input_ids, candidates, best_candidate, accept_length, retrieve_indices, logits_processor, logits,
                tree_logits, new_token, past_key_values_data_list, current_length_data, model, hidden_state,
                hidden_state_new, sample_p,
            )
            verdict = generation.plain
            tokens = verdict.accepted + [int(out[4].reshape(-1)[0])]
            result = verified_cycle(tokens, len(verdict.accepted), verdict.path_drafts, verdict.path_drafts)
            self.step.observe(result, drafted=verdict.drafted, draft_passes=1)
            generation.plain = None
            return out
        plan = generation.cycle.plan
        prev = input_ids.shape[1]
        committed = torch.tensor([plan.committed], dtype=input_ids.dtype, device=input_ids.device)
        input_ids = torch.cat([input_ids, committed], dim=-1)
        if plan.q_cache is QCache.FED:
            self.full.holds(prev + len(plan.committed))
        elif plan.q_cache is QCache.TREE:
            self.full.compact(plan.q_nodes + prev, prev)
        elif plan.q_cache is QCache.BEHIND:
            self.full.holds(self.full.valid)
        if self.slim is not None and generation.cycle.slim_logits is not None:
            # tokens u never saw at their position (not tree nodes) become its lag; a cycle of the
            # untiered arm ran no slim pass: all it committed is lag
            self.slim.compact(plan.slim_nodes + prev, prev)
        token = torch.tensor([[plan.next_root]], dtype=input_ids.dtype, device=input_ids.device)
        features = plan.features[None].to(model.base_model.lm_head.weight.dtype)
        recorder = RecordingHead(model.base_model.lm_head)
        tree_logits = model.ea_layer.topK_genrate(features, input_ids=torch.cat((input_ids, token), dim=1), head=recorder,
                                                  logits_processor=logits_processor)
        generation.next_head_logits = recorder.outputs
        generation.cycle = None
        return input_ids, tree_logits, new_token + len(plan.committed), None, token


#: the run options eagle.tiered and eagle.generate took in 0.2
LOOSE_RUN_OPTIONS = ("mask", "settings", "plugins")


@contextlib.contextmanager
def tiered(
    ea_model: nn.Module | LoadedPair,
    context: RunContext | None = None,
    *,
    options: EagleOptions | None = None,
    **run_options: Any,
) -> Iterator[EagleTierSession]:
    """Scope in which ``ea_model.eagenerate``, called from this thread, runs with the slim tier.

    Other threads and other EaModels keep eagle's own functions (:mod:`.patches`). Every name is
    restored when the last open scope closes, also when generation raises; ``reset_tree_mode`` is
    called on the way out so no tree mask is left set on the base model.

    Args:
        ea_model: an eagle ``EaModel``, or a pair from :func:`viasd_adapt.load_pair` that has an
            EAGLE head (its EaModel, loaded once per pair, is ``session.ea_model``).
        context: the run's context, from :func:`viasd_adapt.context` on the EaModel's
            ``base_model`` or on the pair (nothing is read again); it is moved onto the EaModel's
            own copy of the base model. None: ``viasd_adapt.context(ea_model.base_model)``, a pair's
            own settings and mask.
        options: EAGLE's own switches (:class:`EagleOptions`).
        run_options: 0.2's ``mask``, ``settings`` and ``plugins``: deprecated (until 0.4.0), given
            to :func:`viasd_adapt.context` instead; refused beside ``context``.
    """
    # the warning names the user's `with` line: this generator <- contextlib's __enter__ <- user
    context, loose = loose_run_options("eagle.tiered", context, run_options, accepted=LOOSE_RUN_OPTIONS, stacklevel=4)
    options = as_options(options)
    ea_model, context = eagle_context(ea_model, context, loose)
    with scope(ea_model, context, options) as session:
        yield session


def eagle_context(ea_model: nn.Module | LoadedPair, context: RunContext | None,
                  loose: dict[str, Any]) -> tuple[nn.Module, RunContext]:
    """The EaModel (a pair's, loaded once per pair) and the run's context on its base model, checked,
    its notices given: what :func:`tiered` and :func:`~.entry.generate` open a scope with.
    ``loose``: 0.2's run options, when there is no context."""
    if isinstance(ea_model, LoadedPair):
        from viasd_adapt.adapters.eagle.compat import load_for_pair

        pair = ea_model
        ea_model = load_for_pair(pair)
        if context is None and loose.get("mask") is None:  # what the pair read when it loaded
            context = pair.run_context(loose.get("settings"), loose.get("plugins", ()))
    if not hasattr(ea_model, "ea_layer") or not hasattr(ea_model, "base_model"):
        raise ConfigError(f"expected an eagle EaModel, got {type(ea_model).__name__}")
    from viasd_adapt.adapters.eagle.compat import SPLIT_REASON
    from viasd_adapt.models.placement import refuse_split

    refuse_split(ea_model.base_model, "the eagle framework", SPLIT_REASON)
    check_head_embeddings(ea_model)
    if context is None:
        context = open_context(ea_model.base_model, loose.get("mask"), loose.get("settings"), loose.get("plugins", ()),
                               **eagle_switches(ea_model))
    else:
        eagle = {name: value for name, value in eagle_switches(ea_model).items() if name != "tuned"}
        context = context.on_target(ea_model.base_model, **eagle)
        emit(context.notices)
    return ea_model, context


@contextlib.contextmanager
def scope(ea_model: nn.Module, context: RunContext, options: EagleOptions | None = None) -> Iterator[EagleTierSession]:
    """The scope of :func:`tiered`, on an EaModel and a context already checked (:func:`eagle_context`)."""
    session = EagleTierSession(ea_model, context, as_options(options))
    open_scope(session)
    own = ea_model.__dict__.get("eagenerate", _MISSING)
    ea_model.eagenerate = budgeted_eagenerate(session, ea_model.eagenerate)
    try:
        with quiet_eagle_deprecations():
            yield session
    finally:
        if own is _MISSING:
            del ea_model.eagenerate
        else:
            ea_model.eagenerate = own
        close_scope(session)
        from eagle.model.utils import reset_tree_mode

        reset_tree_mode(ea_model)


_MISSING = object()


def budgeted_eagenerate(session: EagleTierSession, eagenerate: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``ea_model.eagenerate`` inside the scope: eagle's own call, its output cut to ``max_new_tokens``
    and to the first EOS, as stock HF ``generate`` returns it, and the generation's metrics cut the
    same way.

    Why: eagle checks its budget only after a cycle, so a call for 48 tokens returns up to the tree's
    depth + 1 more. Observer hooks still see that last cycle in full (eagle's loop decides when to
    stop). Another thread's call, and :func:`~viasd_adapt.adapters.eagle.entry.generate`'s (which
    sets the session's own stop rule first), get eagle's call unchanged.
    """
    signature = inspect.signature(eagenerate)

    @functools.wraps(eagenerate)
    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        if current_session() is not session or session.stop is not None:
            return eagenerate(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        prompt, budget = bound.arguments["input_ids"].shape[1], int(bound.arguments["max_new_tokens"])
        eos = session.ea_model.tokenizer.eos_token_id
        session.stop = StopRule.of(budget, [eos] if eos is not None else ())
        try:
            out = eagenerate(*args, **kwargs)
        finally:
            session.stop = None
        new = out[0, prompt:].tolist()
        keep = new[:budget]
        if eos is not None and eos in keep:
            keep = keep[: keep.index(eos) + 1]
        session.ledgers[-1].keep_first(len(keep))  # eagle's pending root and its overshoot are not output
        return out[:, : prompt + len(keep)]

    return call


__all__ = ["EagleTierSession", "RecordingHead", "budgeted_eagenerate", "eagle_context", "scope", "tiered"]
