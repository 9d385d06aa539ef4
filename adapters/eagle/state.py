"""The typed state one generation's patched functions hand each other, explicitly.

eagle's loop calls five functions per cycle with fixed signatures. Each patched function receives
the thread's :class:`Generation` as an argument (the dispatch in :mod:`.patches` looks it up) and
reads or fills the declared fields of the cycle in progress:

``generate_candidates`` -> :class:`TreeDraft` -> ``tree_decoding`` -> :class:`TreeCycle` (u or q over
the tree) -> ``evaluate_posterior`` -> :class:`CommitPlan` -> ``update_inference_inputs`` (commits,
moves caches, asks the head for the next tree).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from viasd_adapt.core.adaptive import Arm
from viasd_adapt.core.ledger import CycleLedger


class QCache(Enum):
    """What q's cache holds after a cycle's decision (how ``update_inference_inputs`` moves it)."""

    BEHIND = "behind"  # q did not process the committed tokens (lossy tiers 1-2): they become its lag
    FED = "fed"  # q was fed lag + root + a continuation that starts with the committed tokens
    HOLDS = "holds"  # q's cache already holds exactly the committed tokens (compacted by the decision)
    TREE = "tree"  # q ran over the whole tree (lenient): compact its path entries like eagle does


@dataclass
class TreeDraft:
    """The head's tree of one cycle (``generate_candidates``)."""

    tree_logits: Any  # eagle's (top-k tokens, top-k values, warped distributions per row)
    tree_indices: torch.Tensor
    logits_processor: Any
    head_logits: list[torch.Tensor]  # the head's full logits per expansion row (greedy p)
    candidates: torch.Tensor  # (paths, depth + 1) token ids, -1 padded
    tree_tokens: torch.Tensor  # (tree_len,) token of every node

    @property
    def greedy(self) -> bool:
        return self.logits_processor is None


@dataclass
class QPass:
    """A q forward made during the decision: the tokens after the lag (the root first) and q's
    final hidden states there (the head's features for whatever of them is committed)."""

    tokens: list[int]
    hidden: torch.Tensor


@dataclass
class CommitPlan:
    """What the cycle commits and how each cache follows (``evaluate_posterior`` -> ``update``)."""

    committed: list[int]  # root + committed drafts: appended to the sequence
    next_root: int  # the token decided last: the next tree's root
    slim_nodes: torch.Tensor  # tree nodes holding the leading committed tokens in u's tree pass
    features: torch.Tensor  # (len(committed), H): hidden states the head drafts the next tree from
    q_cache: QCache
    q_nodes: torch.Tensor | None = None  # QCache.TREE: q's tree nodes of the committed tokens


@dataclass
class TreeCycle:
    """One cycle in progress."""

    draft: TreeDraft
    input_ids: torch.Tensor | None = None  # the committed sequence (eagle passes it to tree_decoding only)
    slim_logits: torch.Tensor | None = None  # (tree_len, V) u at every node
    slim_hidden: torch.Tensor | None = None  # (tree_len, H)
    full_paths: torch.Tensor | None = None  # lenient: (paths, depth + 1, V) q's logits along every path
    full_hidden: torch.Tensor | None = None  # lenient: (tree_len, H)
    q_pass: QPass | None = None
    plan: CommitPlan | None = None
    arm: Arm | None = None  # the adaptive tier's arm of this cycle, asked before any verifier ran

    @property
    def tree_passes(self) -> tuple[int, int]:
        """``(slim, full)``: the forwards over the whole tree this cycle ran, u's (``slim_logits``) or,
        in lenient mode, q's as eagle runs it (``full_paths``); one forward fills each."""
        return int(self.slim_logits is not None), int(self.full_paths is not None)


@dataclass
class PlainVerdict:
    """Mode none: what eagle's own ``evaluate_posterior`` decided (observed, then recorded)."""

    drafted: int
    path_drafts: int
    accepted: list[int]


@dataclass
class Generation:
    """One ``eagenerate`` call inside a scope: its ledger and the cycle in progress."""

    ledger: CycleLedger
    next_head_logits: list[torch.Tensor] = field(default_factory=list)
    cycle: TreeCycle | None = None
    plain: PlainVerdict | None = None
    tree_size: int = 0


__all__ = ["CommitPlan", "Generation", "PlainVerdict", "QCache", "QPass", "TreeCycle", "TreeDraft"]
