"""EAGLE adapter: the slim tier inside an existing eagle-llm 1.2.1 ``EaModel`` pipeline.

Usage (the EAGLE head and eagle's drafting code are untouched)::

    from viasd_adapt.adapters import eagle
    ea_model = eagle.load_ea_model(base_path, head_path)          # transformers-5 safe, checked
    with eagle.tiered(ea_model, mask="mask.json", settings=TierSettings(mode="lossy")) as session:
        ea_model.eagenerate(input_ids, max_new_tokens=64)
    print(session.last_metrics.to_dict())
    # or, with the upstream bugs below handled:
    result = eagle.generate(ea_model, input_ids, max_new_tokens=64, mask=..., settings=...)

Seams (traced in eagle-llm 1.2.1). ``EaModel.eagenerate`` runs, per cycle,
``generate_candidates`` (head tree) -> ``tree_decoding`` (one target forward over the tree) ->
``evaluate_posterior`` (acceptance) -> ``update_inference_inputs`` (KV compaction, commit, the head
drafts the next tree from the target's features). ``ea_model.py`` does ``from .utils import *``,
so those names are looked up in ``eagle.model.ea_model``'s globals: that is where
:func:`tiered` swaps them (patching ``eagle.model.utils`` would reach nothing). It also swaps
``initialize_tree`` to start a fresh per-generation state, restores every name on exit (also on an
exception) and calls ``reset_tree_mode`` so no tree mask is left set on the base model.

What each mode does in a cycle (``root`` = the token the previous cycle decided, the tree's root):

* ``none``: eagle's own functions run unchanged; thin wrappers only count metrics.
* ``lossless``, ``lossless_strategy="route"`` (default): u runs over the whole tree instead of q,
  picks the path (greedy: the longest run of drafts matching u's argmax; sampling: see below) and
  proposes one extra token after it. q runs over ``root + path + extra`` only and verifies every
  position with the lossless rule against the distribution it was proposed from (p for the
  head's drafts, u for the extra token). u never cuts the head's path short, so a poor mask costs
  at most the choice of path; the output is exactly q's.
* ``lossless``, ``lossless_strategy="cascade"`` (p -> u -> q, VIA-SD.md section 5): u runs over the
  whole tree instead of q.
  u picks a path and verifies it with the lossless rule, extending it with its own correction
  or bonus token (:func:`viasd_adapt.tiers.cascade_candidates`). q then runs over ``root + that
  path`` only and verifies it with the lossless rule against u. Every committed token is q's
  argmax (greedy) or exactly q-distributed (sampling). Cost: one slim tree pass plus one full pass
  over at most depth+2 tokens instead of the 26-token tree. Whether that is cheaper depends on the
  hardware: on a GPU a full forward over 26 tokens costs about as much as over 7, so the cascade
  is usually *slower* than EAGLE there; the benchmark must report it as measured.
* ``lossy`` (the paper): u runs over the tree, gate 1 and the router decide
  (:func:`viasd_adapt.tiers.slim_stage`); q runs only on escalation, over the lag (tokens it never
  saw) plus ``root + path``, in one forward.
* ``audit``: lossy decisions, with q run over the path every cycle in shadow.

Which path of the tree. Greedy: the path with the longest run of accepted drafts under the first
verifier's rule (u's argmax for the cascade, gate 1 for lossy); EAGLE's own greedy rule with u in
q's place. Sampling: the *first-sample chain* (the path through each node's first child). EAGLE
draws siblings without replacement, so only that chain consists of plain samples from the head's
distribution p, which is what the tier rules (and their lossless proof) assume. The other paths
are not used when sampling: that keeps every mode exact, at the price of EAGLE's multi-path gain.

What the head gets as features for tokens q never processed (lossy/audit). EAGLE's head needs the
target's last hidden state for every committed token. When tiers 1-2 commit without q, there is no
q feature; we feed the slim verifier's final hidden state (after the shared final norm) for those
tokens instead (``head_features="slim"``, the default). The head's own cache keeps those entries:
they are not recomputed when q later catches up. ``head_features="full"`` instead runs q over the
committed tokens every cycle just to get true features: a measurement device, since it costs a q
pass per cycle (counted in ``full_passes``). Comparing the two on the demo pair measures what the
slim features cost in acceptance (README, "EAGLE adapter").

KV caches. q keeps eagle's pre-allocated cache; a per-generation ``q_valid`` says how many
committed tokens it holds. Lossy cycles that skip q leave it behind; the next q forward feeds the
lag and the new tokens together. u gets its own pre-allocated cache with eagle's ``KVCache`` for
the retained layers only (skipped layers hold a length counter, no tensors: eagle reads the cache
length from layer 0, which may be skipped). After each cycle both caches are compacted like
eagle compacts its own (the accepted path's entries are moved to the committed positions).

Upstream bugs and limits, and what the adapter does:

* Sampling, bonus token: eagle samples the token after a fully accepted path from the *unwarped*
  softmax (temperature and top-p ignored). In lossless/lossy/audit every token comes from our
  verification code on warped distributions, so the bug is gone there. ``mode="none"`` is eagle
  unchanged and keeps it.
* Batch size 1 only: enforced with a ConfigError in :func:`generate` and in the patched cycle.
* ``max_new_tokens`` overshoot (eagle stops *after* the cycle that passes the budget, up to the
  tree depth + 1 tokens too many): :func:`generate` trims the output, and the metrics, to the
  budget and to the first EOS.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from viasd_adapt.adapters.eagle_compat import check_head_matches, eagle_compat, load_ea_model, repair_rotary_caches
from viasd_adapt.adapters.eagle_tree import (
    first_child_chain,
    greedy_accepted,
    longest_gated_path,
    node_drafter_probs,
    path_length,
    two_path_subtree,
)
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.hooks import HookRules, TierObserver, hookimpl, make_plugin_manager
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, resolve_mask
from viasd_adapt.rules import BUILTIN_RULES, lossless_accept_prob
from viasd_adapt.sampling import sample_or_argmax
from viasd_adapt.settings import Mode, TierSettings, check_max_new_tokens
from viasd_adapt.tiers import (
    CycleResult,
    Tier,
    audit_cycle,
    cascade_candidates,
    combine_cycle,
    escalation_stage,
    slim_stage,
    verified_cycle,
    verify_block,
)

_MISSING = object()
HEAD_FEATURES = ("slim", "full")
LOSSLESS_STRATEGIES = ("route", "cascade")
PATCHED_NAMES = ("initialize_tree", "generate_candidates", "tree_decoding", "evaluate_posterior", "update_inference_inputs")


def _ea_module():
    from eagle.model import ea_model

    return ea_model


# =========================================================================== slim view and cache


class _SkippedLayer(nn.Module):
    """A bypassed decoder layer with eagle's layer API: returns ``(hidden_states, None)``.

    It advances its layer's length counter so that eagle, which reads the cache length from layer
    0, sees the right length even when layer 0 is skipped.
    """

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                output_attentions=False, use_cache=False):
        if past_key_value is not None:
            for part in past_key_value:
                part.current_length.add_(hidden_states.shape[1])
        return (hidden_states, None)

    def extra_repr(self) -> str:
        return f"skipped_layer={self.index}"


class _LengthOnly:
    """Stands in for eagle's KVCache on a skipped layer: a length, no tensors."""

    def __init__(self, current_length: torch.Tensor):
        self.current_length = current_length

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (1, 0, int(self.current_length), 0)


class SlimTreeVerifier:
    """u for an eagle base model: a routed view of ``base_model.model`` plus its own KV cache.

    The view is a shallow copy of eagle's ``LlamaModel`` with a new layer list (retained layers are
    the same module objects; skipped ones are :class:`_SkippedLayer`); every weight is shared and
    the base model is never modified.
    """

    def __init__(self, base_model: nn.Module, mask: RoutingMask):
        mask.validate_for(base_model)
        self.base_model = base_model
        self.mask = mask
        inner = base_model.model
        view = __import__("copy").copy(inner)
        view._modules = dict(inner._modules)
        view._modules["layers"] = nn.ModuleList(
            layer if keep else _SkippedLayer(i) for i, (layer, keep) in enumerate(zip(inner.layers, mask.keep))
        )
        view.tree_mask = None
        self.view = view
        config = base_model.config
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self._shape = (1, kv_heads, config.max_position_embeddings, config.hidden_size // heads)
        self._dtype = base_model.lm_head.weight.dtype
        self._device = base_model.lm_head.weight.device
        self.data: torch.Tensor | None = None
        self.past: list | None = None
        self.lengths: torch.Tensor | None = None

    def new_cache(self) -> None:
        """Allocates (once) and empties the slim cache: retained layers only."""
        from eagle.model.kv_cache import KVCache

        if self.data is None:
            retained = len(self.mask.retained)
            self.data = torch.zeros((2 * retained, *self._shape), dtype=self._dtype, device=self._device)
            self.lengths = torch.zeros(2 * self.mask.num_layers, dtype=torch.long)
            past, slot = [], 0
            for i, keep in enumerate(self.mask.keep):
                if keep:
                    past.append([KVCache(self.data[slot], self.lengths[2 * i]), KVCache(self.data[slot + 1], self.lengths[2 * i + 1])])
                    slot += 2
                else:
                    past.append([_LengthOnly(self.lengths[2 * i]), _LengthOnly(self.lengths[2 * i + 1])])
            self.past = past
        self.lengths.zero_()

    def cache_bytes(self) -> int:
        return 0 if self.data is None else self.data.numel() * self.data.element_size()

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor, start: int, tree_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Feeds ``tokens`` (1, n) at cache position ``start``; the last ``tree_mask``-sized block
        attends by the tree mask. Returns ``(logits (n, V), hidden (n, H))``."""
        self.lengths.fill_(start)
        self.view.tree_mask = tree_mask
        try:
            hidden = self.view(input_ids=tokens, past_key_values=self.past, position_ids=position_ids, return_dict=False)[0]
        finally:
            self.view.tree_mask = None
        return self.base_model.lm_head(hidden)[0].float(), hidden[0]

    def compact(self, sources: torch.Tensor, start: int) -> None:
        """Moves the cache entries at positions ``sources`` to ``start, start+1, ...``."""
        if self.data is not None and sources.numel():
            picked = self.data[..., sources.to(self.data.device), :]
            self.data[..., start : start + sources.numel(), :] = picked
        self.lengths.fill_(start + sources.numel())


# =========================================================================== per-generation state


@dataclass
class _Cycle:
    """What the patched functions hand each other within one cycle."""

    tree_logits: Any = None
    tree_indices: torch.Tensor | None = None
    head_logits: list | None = None  # the head's full logits per tree row (greedy p)
    u_tree_logits: torch.Tensor | None = None  # (tree_len, V)
    u_tree_hidden: torch.Tensor | None = None  # (tree_len, H)
    committed: list[int] = field(default_factory=list)  # root + committed drafts
    next_root: int = 0
    path_nodes: torch.Tensor | None = None  # tree node indices of root + committed drafts
    features: torch.Tensor | None = None  # (len(committed), H)
    q_fed_committed: bool = False
    slim_lag_tokens: int = 0


class _RecordingHead:
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


@dataclass
class _GenerationState:
    next_head_logits: list = field(default_factory=list)
    metrics: TierMetrics = field(default_factory=TierMetrics)
    q_valid: int = 0
    s_valid: int = 0
    cycle: _Cycle = field(default_factory=_Cycle)


class EagleTierSession:
    """One ``tiered`` scope: settings, the slim verifier, hooks, and the metrics of every
    generation run inside it (``generations``; ``last_metrics`` is the latest)."""

    def __init__(self, ea_model: nn.Module, settings: TierSettings, mask: RoutingMask | None,
                 plugins: Iterable[object] = (), head_features: str = "slim", lossless_strategy: str = "route"):
        if head_features not in HEAD_FEATURES:
            raise ConfigError(f"head_features must be one of {HEAD_FEATURES}, got {head_features!r}")
        if lossless_strategy not in LOSSLESS_STRATEGIES:
            raise ConfigError(f"lossless_strategy must be one of {LOSSLESS_STRATEGIES}, got {lossless_strategy!r}")
        self.lossless_strategy = lossless_strategy
        self.ea_model = ea_model
        self.settings = settings
        self.head_features = head_features
        self.slim = SlimTreeVerifier(ea_model.base_model, mask) if mask is not None else None
        self.plugin_manager = make_plugin_manager(plugins)
        self.rules = HookRules(self.plugin_manager)
        self.observer = TierObserver(self.plugin_manager, "eagle", settings.mode.value)
        self.generations: list[TierMetrics] = []
        self.state: _GenerationState | None = None
        self.originals: dict[str, Any] = {}

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def last_metrics(self) -> TierMetrics | None:
        return self.generations[-1] if self.generations else None

    # ------------------------------------------------------------------ helpers
    def _probs(self, logits: torch.Tensor, logits_processor) -> torch.Tensor:
        """Rows of logits -> the distributions the rules compare, warped exactly like eagle warps
        the head's (same logits processor), so p, u and q are alike."""
        logits = logits.float()
        if logits_processor is not None:
            logits = logits_processor(None, logits)
        return logits.softmax(-1)

    def _full_forward(self, input_ids: torch.Tensor, extra: list[int], tree_mask: torch.Tensor | None = None,
                      extra_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q over the lag (committed tokens it has not seen) plus ``extra``, in one forward.
        ``extra`` is a linear continuation, or a small tree when ``tree_mask`` (``(1, 1, n, n)``)
        and ``extra_positions`` (offsets from the end of ``input_ids``) are given.
        Returns logits and hidden states for the ``extra`` positions."""
        state, model = self.state, self.ea_model
        lag = input_ids[0, state.q_valid :].tolist()
        feed = torch.tensor([lag + extra], dtype=torch.long, device=input_ids.device)
        model.current_length_data.fill_(state.q_valid)
        positions = torch.arange(state.q_valid, state.q_valid + feed.shape[1], device=input_ids.device)[None]
        if extra_positions is not None:
            positions[0, len(lag):] = extra_positions.to(positions.device) + input_ids.shape[1]
        inner = model.base_model.model
        saved = inner.tree_mask
        inner.tree_mask = tree_mask
        try:
            with torch.inference_mode():
                hidden = inner(input_ids=feed, past_key_values=model.past_key_values, position_ids=positions, return_dict=False)[0]
        finally:
            inner.tree_mask = saved
        state.metrics.full_passes += 1
        hidden = hidden[0, -len(extra):].clone()
        return model.base_model.lm_head(hidden).float(), hidden

    def _node_drafter_probs(self, logits_processor, vocab: int) -> torch.Tensor:
        """p at every tree node, from the head's tree (see :func:`eagle_tree.node_drafter_probs`):
        exact in both greedy (recorded head logits, plain softmax) and sampling (eagle's ``op``)."""
        from eagle.model.utils import TOPK

        cycle = self.state.cycle
        tokens, values, op = cycle.tree_logits
        if logits_processor is not None:  # eagle's own warped distributions
            full = torch.cat([o.float().cpu() for o in op], dim=0)
        elif cycle.head_logits:  # greedy: the head's full logits, recorded as eagle computed them
            full = torch.cat([o.float().cpu() for o in cycle.head_logits], dim=0).softmax(-1)
        else:
            full = None
        return node_drafter_probs(cycle.tree_indices.cpu(), tokens.cpu(), values.cpu(), full, vocab, TOPK)


# =========================================================================== the patched functions


class _Patches:
    """The replacement functions; each looks up the active session."""

    def __init__(self, session: EagleTierSession):
        self.session = session
        self.original = session.originals

    # ------------------------------------------------------------------ generation start
    def initialize_tree(self, input_ids, model, tree_attn_mask, past_key_values, logits_processor):
        session = self.session
        if model is not session.ea_model:
            return self.original["initialize_tree"](input_ids, model, tree_attn_mask, past_key_values, logits_processor)
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ConfigError(f"eagle-llm decodes one sequence at a time (batch size 1); got input_ids of shape {tuple(input_ids.shape)}")
        state = _GenerationState()
        session.state = state
        session.generations.append(state.metrics)
        recorder = _RecordingHead(model.base_model.lm_head)
        layer = model.ea_layer
        previous = layer.__dict__.get("topK_genrate", _MISSING)
        layer.topK_genrate = lambda hidden, ids, head, processor, **kw: type(layer).topK_genrate(layer, hidden, ids, recorder, processor, **kw)
        try:
            out = self.original["initialize_tree"](input_ids, model, tree_attn_mask, past_key_values, logits_processor)
        finally:  # an instance attribute only, put back as it was; the class method is never touched
            if previous is _MISSING:
                del layer.topK_genrate
            else:
                layer.topK_genrate = previous
        state.next_head_logits = recorder.outputs
        # the prefill: q's first token (every SD loop starts this way)
        state.metrics.full_passes += 1
        state.metrics.token_tiers.append(int(Tier.FULL))
        state.metrics.accepted_lengths.append(1)
        state.metrics.cycles += 1
        state.metrics.draft_passes += 1  # the head's first tree
        state.q_valid = input_ids.shape[1]
        if session.slim is not None:
            session.slim.new_cache()
        state.s_valid = 0
        return out

    def generate_candidates(self, tree_logits, tree_indices, retrieve_indices, sample_token, logits_processor):
        cycle = self.session.state.cycle if self.session.state is not None else None
        if cycle is not None:
            cycle.tree_logits, cycle.tree_indices = tree_logits, tree_indices
            cycle.head_logits = self.session.state.next_head_logits
        return self.original["generate_candidates"](tree_logits, tree_indices, retrieve_indices, sample_token, logits_processor)

    # ------------------------------------------------------------------ one target forward over the tree
    def tree_decoding(self, model, tree_candidates, past_key_values, tree_position_ids, input_ids, retrieve_indices):
        session = self.session
        if session.mode is Mode.NONE or model is not session.ea_model:
            return self.original["tree_decoding"](model, tree_candidates, past_key_values, tree_position_ids, input_ids, retrieve_indices)
        state = session.state
        length = input_ids.shape[1]
        lag = input_ids[:, state.s_valid :]
        tokens = torch.cat([lag.to(tree_candidates.device), tree_candidates], dim=1)
        positions = torch.cat(
            [torch.arange(state.s_valid, length, device=tree_candidates.device), tree_position_ids + length]
        )[None]
        logits, hidden = session.slim.forward(tokens, positions, state.s_valid, model.base_model.model.tree_mask)
        state.metrics.slim_passes += 1
        tree_len = tree_candidates.shape[1]
        state.cycle.u_tree_logits, state.cycle.u_tree_hidden = logits[-tree_len:], hidden[-tree_len:]
        state.s_valid = length
        # eagle's shape contract: logits per path (paths, depth+1, V), tree hidden (1, tree_len, H)
        return logits[-tree_len:][retrieve_indices], hidden[-tree_len:][None], None

    # ------------------------------------------------------------------ acceptance
    def evaluate_posterior(self, logits, candidates, logits_processor, cart_candidates_prob, op, p_indices, tree_candidates, b_indices):
        session = self.session
        if session.mode is Mode.NONE or session.state is None:
            best, accept_length, sample_p = self.original["evaluate_posterior"](
                logits, candidates, logits_processor, cart_candidates_prob, op, p_indices, tree_candidates, b_indices
            )
            if session.state is not None:
                self._record_plain(candidates, int(best), int(accept_length))
            return best, accept_length, sample_p
        self._current_tree_tokens = tree_candidates[0].cpu()
        return self._decide(candidates, logits_processor)

    def _record_plain(self, candidates: torch.Tensor, best: int, accepted: int) -> None:
        """Metrics of an unwrapped eagle cycle: accepted drafts + the next root from q."""
        state = self.session.state
        g = int((candidates[best, 1:] >= 0).sum())
        result = CycleResult(
            [int(t) for t in candidates[best, 1 : accepted + 1]] + [-1],
            [Tier.DRAFT] * accepted + [Tier.FULL],
            accepted + int(accepted < g),
            int(accepted < g),
        )
        state.cycle.pending_plain = result
        state.metrics.full_passes += 1

    def _choose_path(self, candidates, retrieve, u_probs_paths, p_nodes, greedy: bool, gate) -> int:
        """Greedy: the path with the longest run of drafts passing ``gate``; sampling: the
        first-sample chain (every node the first child of its parent)."""
        from eagle.model.utils import TOPK

        if greedy:
            return longest_gated_path(candidates, retrieve, u_probs_paths, p_nodes, gate)
        return first_child_chain(retrieve, self.session.state.cycle.tree_indices.cpu(), TOPK)

    def _decide(self, candidates, logits_processor):
        session = self.session
        cycle = session.state.cycle
        model = session.ea_model
        greedy = logits_processor is None
        retrieve = model.tree_buffers["retrieve_indices"].cpu()
        candidates = candidates.cpu()
        vocab = cycle.u_tree_logits.shape[-1]
        u_nodes = session._probs(cycle.u_tree_logits, logits_processor).cpu()  # (tree_len, V)
        p_nodes = session._node_drafter_probs(logits_processor, vocab)
        u_paths = u_nodes[retrieve.clamp_min(0)]  # (paths, depth+1, V)
        input_ids = self._current_input_ids
        root = int(candidates[0, 0])

        if session.mode is Mode.LOSSLESS:
            gate = lambda tokens, p, u: lossless_accept_prob(tokens, p, u[:-1], greedy)
        else:
            gate = lambda tokens, p, u: session.rules.gate1_accept_prob(tokens, p, u[:-1], session.settings, greedy)
        j = self._choose_path(candidates, retrieve, u_paths, p_nodes, greedy, gate)
        g = path_length(retrieve[j])
        nodes = retrieve[j, : g + 1]
        drafts = candidates[j, 1 : g + 1].long()
        p = p_nodes[nodes[1:]]
        u = u_paths[j, : g + 1]

        if session.mode is Mode.LOSSLESS and session.lossless_strategy == "route" and greedy:
            from eagle.model.utils import TOPK

            chain = first_child_chain(retrieve, cycle.tree_indices.cpu(), TOPK)
            result, q_hidden, committed_nodes = self._route_greedy(
                input_ids, candidates, retrieve, j, chain, u_nodes, self._current_tree_tokens
            )
            return self._finish(result, q_hidden, committed_nodes, root, candidates, retrieve, j)
        if session.mode is Mode.LOSSLESS and session.lossless_strategy == "cascade":
            result, q_hidden, n_from_tree = self._cascade(input_ids, root, drafts, p, u, greedy, logits_processor)
        elif session.mode is Mode.LOSSLESS:
            result, q_hidden, n_from_tree = self._route(input_ids, root, drafts, p, u, greedy, logits_processor)
        else:
            result, q_hidden, n_from_tree = self._tiered(input_ids, root, drafts, p, u, greedy, logits_processor)

        return self._finish(result, q_hidden, nodes[: n_from_tree + 1], root, candidates, retrieve, j)

    def _finish(self, result: CycleResult, q_hidden, path_nodes: torch.Tensor, root: int, candidates, retrieve, j: int):
        """Records the cycle's decision for update_inference_inputs and the metrics."""
        session = self.session
        state, cycle = session.state, session.state.cycle
        committed_drafts = result.tokens[:-1]
        cycle.committed = [root] + committed_drafts
        cycle.next_root = int(result.tokens[-1])
        cycle.path_nodes = path_nodes
        cycle.slim_lag_tokens = len(committed_drafts) + 1 - path_nodes.numel()
        if q_hidden is not None:
            cycle.features = q_hidden[: len(cycle.committed)]
            cycle.q_fed_committed = True
        else:
            cycle.features = cycle.u_tree_hidden[cycle.path_nodes.to(cycle.u_tree_hidden.device)]
            cycle.q_fed_committed = False
        first_index = len(state.metrics.token_tiers)
        state.metrics.record_cycle(result, drafted=int(cycle.tree_indices.shape[0] - 1))
        session.observer.cycle(result, state.metrics, first_index)
        cycle.result = result
        return torch.tensor(j), torch.tensor(len(committed_drafts)), None

    def _route_greedy(self, input_ids, candidates, retrieve, j_u: int, j_chain: int, u_nodes, tree_tokens):
        """Greedy lossless routing: q verifies a two-path sub-tree in one forward, the path u
        prefers (plus u's own next token after it) and the head's top-1 chain, with eagle's tree
        attention; the path q accepts further wins. A poor slim verifier thus costs at most its
        extra token: the head's best guess is always checked.

        Returns ``(result, q hidden of the committed tokens, tree nodes committed)``; q's cache is
        compacted here so that it holds exactly the committed tokens.
        """
        session, state, model = self.session, self.session.state, self.session.ea_model
        tree_mask = model.base_model.model.tree_mask[0, 0].cpu()
        tree_positions = model.tree_buffers["tree_position_ids"].cpu()
        paths = [retrieve[j, : path_length(retrieve[j]) + 1] for j in (j_u, j_chain)]
        sub = two_path_subtree(tree_mask, tree_positions, paths[0], paths[1])
        extra = int(u_nodes[int(paths[0][-1])].argmax())
        tokens = tree_tokens[sub.nodes].tolist() + [extra]
        logits, hidden = session._full_forward(input_ids, tokens, sub.mask[None, None], sub.positions)
        q_argmax = logits.argmax(-1).cpu()
        fed = torch.tensor(tokens)
        best = None
        for k, rows in enumerate(sub.rows):
            accepted = greedy_accepted(fed, q_argmax, rows)
            if best is None or accepted > best[0]:
                best = (accepted, rows, k)
        accepted, rows, k = best
        g = paths[k].numel() - 1
        committed_rows = rows[: accepted + 1]
        next_token = int(q_argmax[committed_rows[-1]])
        drafts = [tokens[r] for r in committed_rows[1:]]
        result = verified_cycle(drafts + [next_token], accepted, g, g)
        # q's cache: move the committed rows' entries to the committed positions
        start = input_ids.shape[1]
        sources = torch.tensor(committed_rows) + start
        for data in model.past_key_values_data:
            data[..., start : start + sources.numel(), :] = data[..., sources.to(data.device), :]
        state.q_valid = start + sources.numel()
        committed_nodes = paths[k][: min(accepted, g) + 1]
        state.cycle.q_compacted = True
        return result, hidden[torch.tensor(committed_rows)], committed_nodes

    def _cascade(self, input_ids, root, drafts, p, u, greedy, logits_processor):
        """Lossless: u verifies the path (plus its own extension), q verifies u's candidates."""
        session = self.session
        cand, cand_probs, n_kept = cascade_candidates(drafts, p, u, greedy)
        logits, hidden = session._full_forward(input_ids, [root] + cand.tolist())
        q = session._probs(logits, logits_processor).cpu()
        accept = lossless_accept_prob(cand, cand_probs, q[:-1], greedy)
        verdict = verify_block(cand, cand_probs, q, accept, greedy)
        n = verdict.n_accepted
        result = verified_cycle(cand[:n].tolist() + [verdict.next_token], n, n_kept, drafts.shape[0])
        return result, hidden, result.drafts_kept

    def _route(self, input_ids, root, drafts, p, u, greedy, logits_processor):
        """Lossless, u as router: q verifies the head's whole path (never cut short by u) plus
        one token u proposes after it; each position is verified against the distribution it was
        proposed from (p for drafts, u for the extra token), so the output is exactly q's."""
        session = self.session
        g = drafts.shape[0]
        extra = sample_or_argmax(u[g], greedy, None)
        cand = torch.cat([drafts, drafts.new_tensor([extra])])
        proposals = torch.cat([p, u[g : g + 1]])
        logits, hidden = session._full_forward(input_ids, [root] + cand.tolist())
        q = session._probs(logits, logits_processor).cpu()
        accept = lossless_accept_prob(cand, proposals, q[:-1], greedy)
        verdict = verify_block(cand, proposals, q, accept, greedy)
        n = verdict.n_accepted
        result = verified_cycle(cand[:n].tolist() + [verdict.next_token], n, g, g)
        return result, hidden, result.drafts_kept

    def _tiered(self, input_ids, root, drafts, p, u, greedy, logits_processor):
        """Lossy/audit: gate 1 and the router on u; q on escalation (audit: always, in shadow)."""
        session = self.session
        state = session.state
        audit = session.mode is Mode.AUDIT
        slim = slim_stage(drafts, p, u, session.settings, greedy, None, session.rules)
        q = hidden = None
        if audit or slim.escalate_at is not None:
            logits, hidden = session._full_forward(input_ids, [root] + drafts.tolist())
            q = session._probs(logits, logits_processor).cpu()
        escalation = None
        if slim.escalate_at is not None:
            escalation = escalation_stage(drafts, p, q, slim.escalate_at, session.settings, greedy, None, session.rules)
        result = combine_cycle(drafts, slim, escalation)
        if audit:
            record = audit_cycle(drafts, p, u, q, slim, result, session.settings, greedy)
            state.metrics.record_audit(record, offset=len(state.metrics.token_tiers))
        n_drafts = len(result.tokens) - 1
        q_features = hidden if (escalation is not None) else None
        if q_features is None and session.head_features == "full" and hidden is not None:
            q_features = hidden  # audit's shadow pass already has them
        elif q_features is None and session.head_features == "full":
            # measurement mode: true features for what the slim tier committed (costs a q pass)
            _, q_features = session._full_forward(input_ids, [root] + drafts[:n_drafts].tolist())
        if audit and escalation is None:
            # audit mirrors lossy (slim features for the head), but q's cache did see the tokens
            state.cycle.audit_q_ran = True
        return result, q_features, n_drafts

    # ------------------------------------------------------------------ commit and next tree
    def update_inference_inputs(self, input_ids, candidates, best_candidate, accept_length, retrieve_indices,
                                logits_processor, logits, tree_logits, new_token, past_key_values_data_list,
                                current_length_data, model, hidden_state, hidden_state_new, sample_p):
        session = self.session
        state = session.state
        if session.mode is Mode.NONE or state is None:
            out = self.original["update_inference_inputs"](
                input_ids, candidates, best_candidate, accept_length, retrieve_indices, logits_processor, logits,
                tree_logits, new_token, past_key_values_data_list, current_length_data, model, hidden_state,
                hidden_state_new, sample_p,
            )
            if state is not None:
                result = state.cycle.pending_plain
                result.tokens[-1] = int(out[4].reshape(-1)[0])
                first_index = len(state.metrics.token_tiers)
                state.metrics.record_cycle(result, drafted=int(state.cycle.tree_indices.shape[0] - 1))
                session.observer.cycle(result, state.metrics, first_index)
                state.metrics.draft_passes += 1
                state.cycle = _Cycle()
            return out
        cycle = state.cycle
        prev = input_ids.shape[1]
        committed = torch.tensor([cycle.committed], dtype=input_ids.dtype, device=input_ids.device)
        input_ids = torch.cat([input_ids, committed], dim=-1)
        # q's cache: valid through the committed tokens when q saw them this cycle
        if getattr(cycle, "q_compacted", False):
            pass  # already compacted and set by the sub-tree verification
        elif cycle.q_fed_committed or getattr(cycle, "audit_q_ran", False):
            state.q_valid = prev + len(cycle.committed)
        model.current_length_data.fill_(state.q_valid)
        # u's cache: move the committed path's entries into place; tokens it never saw lag
        session.slim.compact(cycle.path_nodes + prev, prev)
        state.s_valid = prev + cycle.path_nodes.numel()
        token = torch.tensor([[cycle.next_root]], dtype=input_ids.dtype, device=input_ids.device)
        features = cycle.features[None].to(model.base_model.lm_head.weight.dtype)
        recorder = _RecordingHead(model.base_model.lm_head)
        tree_logits = model.ea_layer.topK_genrate(
            features, input_ids=torch.cat((input_ids, token), dim=1), head=recorder, logits_processor=logits_processor,
        )
        state.next_head_logits = recorder.outputs
        state.metrics.draft_passes += 1
        new_token += len(cycle.committed)
        state.cycle = _Cycle()
        return input_ids, tree_logits, new_token, None, token

    # evaluate_posterior needs the committed sequence; eagenerate does not pass it, so tree_decoding
    # (which gets input_ids) leaves it here.
    _current_input_ids: torch.Tensor | None = None


def _tree_decoding_capturing(patches: _Patches):
    def tree_decoding(model, tree_candidates, past_key_values, tree_position_ids, input_ids, retrieve_indices):
        patches._current_input_ids = input_ids
        return patches.tree_decoding(model, tree_candidates, past_key_values, tree_position_ids, input_ids, retrieve_indices)

    return tree_decoding


# =========================================================================== optional rules


class GreedyArgmaxAcceptance:
    """Opt-in rules plugin (``plugins=[GreedyArgmaxAcceptance()]``): in greedy decoding a draft
    equal to the verifier's argmax always passes gate 1 and escalation.

    Why: the tolerant inequality ``u(x) >= (1 - alpha) p(x)`` compares probabilities, and a sharp
    drafter (an EAGLE head trained on soft targets is sharper than a small target) can fail it on
    the very token the verifier would pick greedily. Then lossy rejects drafts that lossless EAGLE
    accepts. With this plugin lossy greedy is a relaxation of lossless greedy. Sampling is left to
    the built-in rules (the plugin defers by returning None).
    """

    @hookimpl
    def viasd_gate1_accept_prob(self, tokens, p, u, settings, greedy):
        if not greedy:
            return None
        return torch.maximum(BUILTIN_RULES.gate1_accept_prob(tokens, p, u, settings, greedy), _argmax_match(tokens, u))

    @hookimpl
    def viasd_escalation_accept_prob(self, tokens, p, q, settings, greedy):
        if not greedy:
            return None
        return torch.maximum(BUILTIN_RULES.escalation_accept_prob(tokens, p, q, settings, greedy), _argmax_match(tokens, q))


def _argmax_match(tokens: torch.Tensor, verifier: torch.Tensor) -> torch.Tensor:
    return (verifier[: tokens.shape[0]].argmax(-1) == tokens).float()


# =========================================================================== scope


_ACTIVE: dict[int, EagleTierSession] = {}


def check_head_embeddings(ea_model: nn.Module) -> None:
    """Refuses an EaModel whose head was trained for another base model.

    EAGLE heads carry a frozen copy of their base model's token embeddings (eagle's training script
    and :func:`viasd_adapt.models.eagle_head.train_eagle_head` both copy them), so a head whose
    embedding table differs from the base model's was trained on another model's features.
    """
    head = ea_model.ea_layer.embed_tokens.weight.detach()
    base = ea_model.base_model.get_input_embeddings().weight.detach()
    if head.shape != base.shape:
        raise ModelMismatchError(
            f"the EAGLE head's embedding table {tuple(head.shape)} does not match the base model's {tuple(base.shape)}: "
            "a head for another base model"
        )
    tolerance = 1e-2 * float(base.float().abs().max()) + 1e-3  # fp16 round-trips pass, other models do not
    difference = float((head.float().cpu() - base.float().cpu()).abs().max())
    if difference > tolerance:
        raise ModelMismatchError(
            f"the EAGLE head's token embeddings differ from the base model's (max |difference| {difference:.3g}): "
            "it was trained for another base model"
        )


@contextlib.contextmanager
def tiered(
    ea_model: nn.Module,
    mask: RoutingMask | MaskArtifact | str | os.PathLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    head_features: str = "slim",
    lossless_strategy: str = "route",
) -> Iterator[EagleTierSession]:
    """Scope in which ``ea_model.eagenerate`` runs with the slim tier (see module docstring).

    The five names in ``eagle.model.ea_model`` are swapped on entry and restored on exit, also when
    generation raises; ``reset_tree_mode`` is called on the way out. One scope at a time: the
    names are module globals, so nesting or a second thread would see this session's functions.
    """
    settings = settings or TierSettings()
    if not isinstance(settings, TierSettings):
        raise ConfigError(f"settings must be a TierSettings, got {type(settings).__name__}")
    if not hasattr(ea_model, "ea_layer") or not hasattr(ea_model, "base_model"):
        raise ConfigError(f"expected an eagle EaModel, got {type(ea_model).__name__}")
    check_head_embeddings(ea_model)
    resolved = resolve_mask(ea_model.base_model, mask, settings.mode.value)
    if _ACTIVE:
        raise ViasdError("an eagle.tiered scope is already active: eagle's functions are module globals, scopes cannot nest")
    session = EagleTierSession(ea_model, settings, resolved, plugins, head_features, lossless_strategy)
    module = _ea_module()
    patches = _Patches(session)
    replacements = {
        "initialize_tree": patches.initialize_tree,
        "generate_candidates": patches.generate_candidates,
        "tree_decoding": _tree_decoding_capturing(patches),
        "evaluate_posterior": patches.evaluate_posterior,
        "update_inference_inputs": patches.update_inference_inputs,
    }
    for name in PATCHED_NAMES:
        session.originals[name] = getattr(module, name)
    _ACTIVE[id(ea_model)] = session
    try:
        for name, function in replacements.items():
            setattr(module, name, function)
        yield session
    finally:
        for name in PATCHED_NAMES:
            setattr(module, name, session.originals[name])
        _ACTIVE.pop(id(ea_model), None)
        session.originals["initialize_tree"].__globals__["reset_tree_mode"](ea_model)


def is_patched() -> bool:
    """Whether any eagle name is currently swapped (for tests and diagnostics)."""
    from eagle.model import utils

    module = _ea_module()
    return any(getattr(module, name) is not getattr(utils, name) for name in PATCHED_NAMES)


# =========================================================================== generate


@dataclass
class EagleGeneration:
    """Generated ids (prompt excluded, trimmed to the budget and the first EOS), their tiers and
    the metrics; ``raw_new_tokens`` is how many eagle produced before trimming."""

    tokens: list[int]
    tiers: list[int]
    metrics: TierMetrics
    raw_new_tokens: int


def generate(
    ea_model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    mask: RoutingMask | MaskArtifact | str | os.PathLike | None = None,
    settings: TierSettings | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    plugins: Iterable[object] = (),
    head_features: str = "slim",
    lossless_strategy: str = "route",
    tree_choices=None,
) -> EagleGeneration:
    """``eagenerate`` inside :func:`tiered`, with eagle's overshoot trimmed and inputs checked."""
    check_max_new_tokens(max_new_tokens)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
        raise ConfigError(f"eagle-llm decodes one sequence at a time: input_ids must have shape (1, n), got {shape}")
    if input_ids.shape[1] == 0:
        raise ConfigError("the prompt is empty: at least one token is needed to condition on")
    if temperature < 0 or not 0.0 < top_p <= 1.0 or top_k < 0:
        raise ConfigError(f"need temperature >= 0, top_p in (0, 1], top_k >= 0; got {temperature}, {top_p}, {top_k}")
    config = ea_model.base_model.config
    tree_depth = ea_model.tree_buffers["retrieve_indices"].shape[1] if hasattr(ea_model, "tree_buffers") else 6
    room = config.max_position_embeddings - input_ids.shape[1] - 2 * 64
    if max_new_tokens + tree_depth > room:
        raise ConfigError(
            f"prompt ({input_ids.shape[1]}) + max_new_tokens ({max_new_tokens}) + tree does not fit eagle's "
            f"pre-allocated KV cache of {config.max_position_embeddings} positions"
        )
    kwargs: dict[str, Any] = dict(temperature=temperature, top_p=top_p if top_p < 1.0 else 0.0, top_k=top_k,
                                  max_new_tokens=max_new_tokens)
    if tree_choices is not None:
        kwargs["tree_choices"] = tree_choices
    with tiered(ea_model, mask=mask, settings=settings, plugins=plugins, head_features=head_features,
                lossless_strategy=lossless_strategy) as session:
        output = ea_model.eagenerate(input_ids, **kwargs)
    new = output[0, input_ids.shape[1] :].tolist()
    raw = len(new)
    eos = ea_model.tokenizer.eos_token_id
    if eos is not None and eos in new:
        new = new[: new.index(eos) + 1]
    new = new[:max_new_tokens]
    metrics = session.last_metrics
    metrics.trim_to(len(new))
    return EagleGeneration(new, metrics.token_tiers[:], metrics, raw)


# =========================================================================== `viasd generate --framework eagle`


def cli_runner(request):
    """Runner for ``viasd generate --framework eagle`` (found through ``ADAPTER_MODULES``).

    Loads the target and head with :func:`load_ea_model` (compat + sanity check), then runs
    :func:`generate` in the requested mode. ``--gamma`` has no effect: EAGLE drafts a tree
    (eagle's default ``mc_sim_7b_63``, depth 5), not a block.
    """
    from viasd_adapt.cli.generate import GenerateResult, encode_prompt

    if request.eagle_head is None:
        raise ConfigError(
            "--framework eagle needs --eagle-head (an EAGLE head directory; train one with "
            "viasd_adapt.models.eagle_head.train_eagle_head)"
        )
    ea_model = load_ea_model(request.target, request.eagle_head)
    tokenizer = ea_model.get_tokenizer()
    prompt_ids = encode_prompt(tokenizer, request.prompt)
    torch.manual_seed(request.seed)
    random.seed(request.seed)  # eagle's own sampling acceptance (mode none) draws from Python's random
    mask = request.mask if request.mode is not Mode.NONE else None
    result = generate(
        ea_model, torch.tensor([prompt_ids]), request.max_new_tokens, mask=mask, settings=request.settings,
        temperature=request.temperature, top_p=request.top_p,
    )
    sanity = ea_model.viasd_sanity
    notes = [f"EAGLE base model checked against stock transformers: max |logit diff| {sanity.max_abs_diff_plain:.2g}"]
    if request.mode is Mode.NONE and request.do_sample:
        notes.append("mode none is eagle-llm unchanged: its bonus token after a fully accepted path ignores temperature/top-p")
    if result.raw_new_tokens > len(result.tokens):
        notes.append(f"eagle produced {result.raw_new_tokens} tokens; trimmed to {len(result.tokens)} (budget / EOS)")
    return GenerateResult(result.tokens, result.tiers, result.metrics, tokenizer, prompt_ids, notes)


__all__ = [
    "EagleGeneration",
    "cli_runner",
    "EagleTierSession",
    "GreedyArgmaxAcceptance",
    "SlimTreeVerifier",
    "check_head_embeddings",
    "check_head_matches",
    "eagle_compat",
    "generate",
    "is_patched",
    "load_ea_model",
    "repair_rotary_caches",
    "tiered",
]
