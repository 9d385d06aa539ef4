"""One EAGLE cycle's decision: pick a path of the tree, decide it with the core, plan the commit.

Everything a tier decides goes through the session's :class:`~viasd_adapt.core.verify_step.VerifyStep`
(:func:`viasd_adapt.core.cycle.decide_cycle`): this module only turns the tree into one block (the chosen
root-to-leaf path: its drafts, the head's p along it, the slim verifier's rows along it as a
precomputed ``Verifiers.slim``, and q as a lazy ``Verifiers.full`` that runs q over the lag + root +
block only when the decision asks). Lossless ``route`` is the cascade in which u only proposes the
token after the block (``CyclePolicy.slim_extends_only``); greedy, it decides two paths of the tree
verified by one q pass, the head's top-1 chain as an untiered block, and keeps the longer commit:
which path, and the single pass, are tree plumbing; each path's verdict is the core's.

The adaptive tier's untiered arm (a cycle the controller runs without the slim verifier) is the
lenient path at lenience 0, which is exactly mode none: q over the whole tree, the lossless rule;
its :class:`CycleContext` carries the arm's settings (mode none), so it decides like any mode.

Which path. Greedy: the path with the longest run of drafts accepted under the mode's first check
(:func:`~viasd_adapt.core.rules.rule_for`: the lossless rule on u for lossless, gate 1 for
lossy/audit, the lenient rule on q for lenient, at lenience 0 eagle's own choice, the lossless rule
on q for the untiered arm), asked of the step's rules, so plugins apply.
Sampling: the *first-sample chain* (package docstring).

Passes. The verifiers a decision is given read rows of passes made before it (u's, or in lenient
mode q's, forward over the whole tree) or shared between two decisions (the two paths of lossless
route), and a cycle may pay one q pass after deciding (true head features); so the passes a cycle
records are those its model runners counted (:class:`~viasd_adapt.core.verify_step.MeasuredPasses`),
not the decision's verifier calls.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from viasd_adapt.adapters.eagle.options import HeadFeatures, LosslessStrategy
from viasd_adapt.adapters.eagle.slim_tree import SlimTreeVerifier
from viasd_adapt.adapters.eagle.state import CommitPlan, QCache, QPass, TreeCycle
from viasd_adapt.adapters.eagle.target import FullTreeVerifier
from viasd_adapt.adapters.eagle.tree import (
    first_child_chain,
    longest_gated_path,
    node_drafter_probs,
    path_length,
    two_path_subtree,
)
from viasd_adapt.core.cycle import CycleOutcome, CyclePolicy, Verifiers
from viasd_adapt.core.modes import CyclePath, mode_row
from viasd_adapt.core.rules import rule_for
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.core.verify_step import MeasuredPasses, VerifyStep

Gate = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class CycleContext:
    """What a decision needs from its session (no model plumbing beyond the two verifiers)."""

    settings: TierSettings
    step: VerifyStep
    head_features: HeadFeatures
    lossless_strategy: LosslessStrategy
    slim: SlimTreeVerifier | None
    full: FullTreeVerifier
    retrieve: torch.Tensor  # (paths, depth + 1) tree node of each path position, -1 padded
    tree_mask: torch.Tensor  # (tree_len, tree_len)
    tree_positions: torch.Tensor  # (tree_len,)
    topk: int


@dataclass(frozen=True)
class Decision:
    outcome: CycleOutcome  # the core's decision, as decided
    plan: CommitPlan
    path: int  # row of ``retrieve`` (eagle's ``best_candidate``)
    passes: MeasuredPasses  # what the cycle ran: its tree pass, and the q passes counted by the full verifier


def warp(logits: torch.Tensor, logits_processor) -> torch.Tensor:
    """Rows of logits -> the distributions the rules compare, warped exactly like eagle warps the
    head's (same logits processor), so p, u and q are alike."""
    logits = logits.float()
    if logits_processor is not None:  # transformers' processors take (batch, V)
        logits = logits_processor(None, logits.reshape(-1, logits.shape[-1])).reshape(logits.shape)
    return logits.softmax(-1)


def drafter_probs(cycle: TreeCycle, vocab: int, topk: int) -> torch.Tensor:
    """p at every tree node: exact in greedy (the recorded head logits) and sampling (eagle's ``op``)."""
    draft = cycle.draft
    tokens, values, op = draft.tree_logits
    if not draft.greedy:
        full = torch.cat([o.float().cpu() for o in op], dim=0)
    elif draft.head_logits:
        full = torch.cat([o.float().cpu() for o in draft.head_logits], dim=0).softmax(-1)
    else:  # the head ran on another device through eagle's own weights: top-k only (an upper bound)
        full = None
    return node_drafter_probs(draft.tree_indices.cpu(), tokens.cpu(), values.cpu(), full, vocab, topk)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def decide(context: CycleContext, cycle: TreeCycle) -> Decision:
    """The cycle's decision, per mode (module docstring), with the passes the cycle ran."""
    mode = context.settings.mode
    full_before = context.full.passes
    decided = _BY_PATH[mode_row(mode).path](context, cycle)  # none (full-only): also the adaptive tier's untiered arm
    slim_tree, full_tree = cycle.tree_passes
    return Decision(*decided, MeasuredPasses(slim_tree, full_tree + context.full.passes - full_before))


def first_rule(context: CycleContext, greedy: bool) -> Gate:
    """``gate(tokens, p, verifier)``: the check the mode's first verifier applies to the drafts
    (:func:`~viasd_adapt.core.rules.rule_for`), asked of the step's rules; ``verifier`` carries the
    bonus row."""
    rules, settings = context.step.rules, context.settings
    check = rule_for(settings.mode).drafts
    return lambda tokens, p, rows: check.accept_prob(rules, tokens, p, rows, settings, greedy)


# ----------------------------------------------------------------------------- shared pieces


@dataclass(frozen=True)
class _Tree:
    """The cycle's tree as the rules see it."""

    candidates: torch.Tensor  # (paths, depth + 1)
    root: int
    p_nodes: torch.Tensor  # (tree_len, V)
    greedy: bool


def _tree(context: CycleContext, cycle: TreeCycle, vocab: int) -> _Tree:
    candidates = cycle.draft.candidates.cpu()
    return _Tree(candidates, int(candidates[0, 0]), drafter_probs(cycle, vocab, context.topk), cycle.draft.greedy)


def _choose(context: CycleContext, cycle: TreeCycle, tree: _Tree, verifier_paths: torch.Tensor) -> int:
    if tree.greedy:
        return longest_gated_path(tree.candidates, context.retrieve, verifier_paths, tree.p_nodes, first_rule(context, True))
    return first_child_chain(context.retrieve, cycle.draft.tree_indices.cpu(), context.topk)


def _path(context: CycleContext, tree: _Tree, j: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Nodes (root first), drafts and p along path ``j``."""
    g = path_length(context.retrieve[j])
    nodes = context.retrieve[j, : g + 1]
    return nodes, tree.candidates[j, 1 : g + 1].long(), tree.p_nodes[nodes[1:]]


def _lazy_full(context: CycleContext, cycle: TreeCycle, root: int, drafts: torch.Tensor, nodes: torch.Tensor):
    """``Verifiers.full``: q over lag + root + tokens, run when called; remembers the pass."""
    logits_processor = cycle.draft.logits_processor

    def full(tokens: torch.Tensor) -> torch.Tensor:
        listed = tokens.tolist()
        from_tree = listed == drafts[: len(listed)].tolist()
        logits, hidden = context.full.path(cycle.input_ids, [root] + listed, nodes[: len(listed) + 1] if from_tree else None)
        cycle.q_pass = QPass([root] + listed, hidden)
        return warp(logits, logits_processor).cpu()

    return full


def _fixed(rows: torch.Tensor, drafts: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """A verifier whose rows along the path are already computed (one pass over the whole tree)."""

    def verifier(tokens: torch.Tensor) -> torch.Tensor:
        if tokens.tolist() != drafts[: tokens.shape[0]].tolist():
            raise RuntimeError("the tree verifier's rows hold the chosen path only")
        return rows[: tokens.shape[0] + 1]

    return verifier


def _plan(context: CycleContext, cycle: TreeCycle, outcome: CycleOutcome, root: int, drafts: torch.Tensor,
          nodes: torch.Tensor) -> CommitPlan:
    """Commit plan of a cycle decided on one path, with the head's features (package docstring).
    With true head features for what the slim tier committed, that costs one more q pass."""
    tokens = outcome.result.tokens
    committed = [root] + tokens[:-1]
    slim_nodes = nodes[: 1 + common_prefix(tokens[:-1], drafts.tolist())]
    q_pass = cycle.q_pass
    q_holds = q_pass is not None and q_pass.tokens[: len(committed)] == committed
    full_features = context.head_features is HeadFeatures.FULL
    if full_features and not q_holds:
        # measurement mode: true features for what the slim tier committed (costs a q pass)
        _, hidden = context.full.path(cycle.input_ids, committed, slim_nodes if len(slim_nodes) == len(committed) else None)
        q_pass, q_holds = QPass(committed, hidden), True
    # audit's q runs in shadow; the head gets what lossy would give it, so audit decides as lossy does
    shadow_only = context.settings.mode is Mode.AUDIT and not outcome.result.escalated
    if q_holds and (full_features or not shadow_only):
        features = q_pass.hidden[: len(committed)]
    else:
        features = cycle.slim_hidden[slim_nodes.to(cycle.slim_hidden.device)]
    return CommitPlan(committed, tokens[-1], slim_nodes, features, QCache.FED if q_holds else QCache.BEHIND)


# ----------------------------------------------------------------------------- the modes


def _policy(context: CycleContext, greedy: bool, **changes) -> CyclePolicy:
    return replace(CyclePolicy(context.settings, greedy, context.step.rules), **changes)


_Decided = tuple[CycleOutcome, CommitPlan, int]  # a Decision before its passes are counted


def _on_one_path(context: CycleContext, cycle: TreeCycle) -> _Decided:
    """The cascade (its ``cascade`` strategy) and the three tiers: u over the tree, one path, :func:`decide_cycle`."""
    logits_processor = cycle.draft.logits_processor
    u_nodes = warp(cycle.slim_logits, logits_processor).cpu()
    tree = _tree(context, cycle, u_nodes.shape[-1])
    u_paths = u_nodes[context.retrieve.clamp_min(0)]
    j = _choose(context, cycle, tree, u_paths)
    nodes, drafts, p = _path(context, tree, j)
    verifiers = Verifiers(full=_lazy_full(context, cycle, tree.root, drafts, nodes),
                          slim=_fixed(u_paths[j, : drafts.shape[0] + 1], drafts))
    outcome = context.step.decide(drafts, p, verifiers, policy=_policy(context, tree.greedy))
    return outcome, _plan(context, cycle, outcome, tree.root, drafts, nodes), j


def _on_full_tree(context: CycleContext, cycle: TreeCycle) -> _Decided:
    """q over the whole tree, as eagle runs it; the lenient rule decides along one path, or, for the
    adaptive tier's untiered arm (mode none), the lossless rule: lenient at lenience 0, which is
    eagle's own verification."""
    logits_processor = cycle.draft.logits_processor
    q_paths = warp(cycle.full_paths, logits_processor).cpu()
    tree = _tree(context, cycle, q_paths.shape[-1])
    j = _choose(context, cycle, tree, q_paths)
    nodes, drafts, p = _path(context, tree, j)
    outcome = context.step.decide(drafts, p, Verifiers(full=_fixed(q_paths[j, : drafts.shape[0] + 1], drafts)),
                                  policy=_policy(context, tree.greedy))
    tokens = outcome.result.tokens
    committed = [tree.root] + tokens[:-1]
    q_nodes = nodes[: len(committed)]  # lenient commits accepted drafts, then q's own token
    features = cycle.full_hidden[q_nodes.to(cycle.full_hidden.device)]
    plan = CommitPlan(committed, tokens[-1], q_nodes, features, QCache.TREE, q_nodes=q_nodes)
    return outcome, plan, j


def _route(context: CycleContext, cycle: TreeCycle) -> _Decided:
    """Lossless route, sampling: q verifies the first-sample chain plus one token u samples after
    it, each position against the distribution it was proposed from (p, then u)."""
    logits_processor = cycle.draft.logits_processor
    u_nodes = warp(cycle.slim_logits, logits_processor).cpu()
    tree = _tree(context, cycle, u_nodes.shape[-1])
    j = first_child_chain(context.retrieve, cycle.draft.tree_indices.cpu(), context.topk)
    nodes, drafts, p = _path(context, tree, j)
    verifiers = Verifiers(full=_lazy_full(context, cycle, tree.root, drafts, nodes), slim=lambda _: u_nodes[nodes])
    outcome = context.step.decide(drafts, p, verifiers, policy=_policy(context, tree.greedy, slim_extends_only=True))
    return outcome, _plan(context, cycle, outcome, tree.root, drafts, nodes), j


def _route_two_paths(context: CycleContext, cycle: TreeCycle) -> _Decided:
    """Lossless route, greedy: q verifies a two-path sub-tree in one forward, the path u prefers
    (plus u's own next token after it) and the head's top-1 chain, with eagle's tree attention;
    the path q accepts further wins (u's on ties). A poor slim verifier thus costs at most its
    extra token: the head's best guess is always checked. q's cache is compacted here to hold
    exactly the committed tokens."""
    u_nodes = warp(cycle.slim_logits, None).cpu()
    tree = _tree(context, cycle, u_nodes.shape[-1])
    u_paths = u_nodes[context.retrieve.clamp_min(0)]
    j_u = _choose(context, cycle, tree, u_paths)
    j_chain = first_child_chain(context.retrieve, cycle.draft.tree_indices.cpu(), context.topk)
    paths = [context.retrieve[j, : path_length(context.retrieve[j]) + 1] for j in (j_u, j_chain)]
    sub = two_path_subtree(context.tree_mask, context.tree_positions, paths[0], paths[1])
    extra = int(u_nodes[int(paths[0][-1])].argmax())
    fed = torch.cat([cycle.draft.tree_tokens.cpu()[sub.nodes], torch.tensor([extra])])
    logits, hidden = context.full.forward(cycle.input_ids, fed.tolist(), sub.mask[None, None], sub.positions)
    q_rows = warp(logits, None).cpu()
    # u's path is the cascade with u's extra token; the head's chain is verified by q alone
    policies = (_policy(context, True, slim_extends_only=True), _policy(context, True, settings=context.settings.with_(mode="none")))
    best = None
    for k, (rows, policy) in enumerate(zip(sub.rows, policies)):
        drafts = fed[rows[1 : paths[k].numel()]]
        verifiers = Verifiers(full=lambda _, rows=rows: q_rows[rows], slim=lambda _, k=k: u_nodes[paths[k]])
        outcome = context.step.decide(drafts, tree.p_nodes[paths[k][1:]], verifiers, policy=policy)
        if best is None or len(outcome.result.tokens) > len(best[1].result.tokens):
            best = (k, outcome, rows)
    k, outcome, rows = best
    n, g = len(outcome.result.tokens) - 1, paths[k].numel() - 1
    committed_rows = torch.tensor(rows[: n + 1])
    length = cycle.input_ids.shape[1]
    context.full.compact(committed_rows + length, length)
    committed = [tree.root] + outcome.result.tokens[:-1]
    plan = CommitPlan(committed, outcome.result.tokens[-1], paths[k][: min(n, g) + 1], hidden[committed_rows], QCache.HOLDS)
    return outcome, plan, (j_u, j_chain)[k]


def _cascade(context: CycleContext, cycle: TreeCycle) -> _Decided:
    """The cascade path (lossless): as the other tier paths, on one path of u over the tree, or with
    the ``route`` strategy, u only extending (two paths when greedy)."""
    if context.lossless_strategy is LosslessStrategy.ROUTE:
        return _route_two_paths(context, cycle) if cycle.draft.greedy else _route(context, cycle)
    return _on_one_path(context, cycle)


#: Each cycle path's decision on the tree (the mode's row says which path it runs).
_BY_PATH = {CyclePath.FULL_ONLY: _on_full_tree, CyclePath.CASCADE: _cascade, CyclePath.THREE_TIERS: _on_one_path}


__all__ = ["CycleContext", "Decision", "common_prefix", "decide", "drafter_probs", "first_rule", "warp"]
