"""Prompt-lookup drafting: a token-only drafter, verified by the tier as a point mass.

Prompt-lookup decoding (HF ``generate(prompt_lookup_num_tokens=...)``, vLLM's n-gram proposer)
drafts by copying: it finds the latest n-gram of the text earlier in the text and proposes what
followed it there. It runs no model and has no distribution, which on a CPU matters: a drafter
forward is not free there, a list search is.

The tier needs a drafter distribution p for its rules, so a looked-up token x is proposed with the
point mass ``p = one_hot(x)``. That is exact, not an approximation: the drafter *is* deterministic
given the text. How each rule reads then (the tier's rules are unchanged):

* lossless SD (modes none, lossless; the cascade's first stage): accept x with probability
  ``min(1, q(x) / 1) = q(x)``; on rejection resample from ``max(0, q - p)`` = q without x. The output
  is exactly q-distributed, as for any drafter; greedy accepts x iff it is q's argmax.
* gate 1 (lossy, ``greedy_gates="proposer"``, the paper's reading): ``u(x) >= (1 - alpha1) * 1``,
  i.e. the slim verifier itself must be confident in x; ``greedy_gates="top"`` reads
  ``u(x) >= (1 - alpha1) max u`` and ignores p, as before.
* the router's tier-2 token when sampling: from u's residual, u without x.
* lenient: sampling accepts with ``min(1, q(x) / (1 - a))``; greedy ``q(x) >= (1 - a) max q``.

Which n-gram is used follows transformers' prompt lookup, so stock and tiered rows draft alike:
the longest suffix n-gram first (``max_ngram`` down to 1), its earliest occurrence whose
continuation is not empty, at most ``num_tokens`` tokens, cut before the first EOS. When nothing
matches, the block is empty and the cycle is one plain target step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch

from viasd_adapt.errors import ConfigError
from viasd_adapt.config.pair_file import PROMPT_LOOKUP

DEFAULT_MAX_NGRAM = 2  # transformers' default max_matching_ngram_size for prompt lookup
DRAFT_NAME = PROMPT_LOOKUP


def lookup_continuation(sequence: list[int], num_tokens: int, max_ngram: int = DEFAULT_MAX_NGRAM,
                        eos: Iterable[int] = ()) -> list[int]:
    """The tokens prompt lookup proposes after ``sequence`` (module docstring); may be empty."""
    if num_tokens < 1 or max_ngram < 1:
        return []
    n = len(sequence)
    stop = frozenset(eos)
    for size in range(min(max_ngram, n - 1), 0, -1):
        suffix = sequence[n - size:]
        for start in range(0, n - size):  # occurrences before the suffix itself, earliest first
            if sequence[start:start + size] == suffix:
                window = sequence[start + size:start + size + num_tokens]
                if window:  # the first non-empty window is the answer, even if the EOS cut empties it
                    cut = next((i for i, token in enumerate(window) if token in stop), len(window))
                    return window[:cut]
    return []


def point_mass(tokens: list[int], vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(len(tokens), vocab_size)`` one-hot rows: the distribution of a deterministic drafter."""
    p = torch.zeros(len(tokens), vocab_size, dtype=torch.float32, device=device)
    if tokens:
        p[torch.arange(len(tokens), device=device), torch.tensor(tokens, device=device)] = 1.0
    return p


@dataclass(frozen=True)
class PromptLookupSpec:
    """A pair's drafter when it is prompt lookup (``--draft prompt-lookup``): no model, only its n-gram size."""

    max_ngram: int = DEFAULT_MAX_NGRAM

    def drafter(self, vocab_size: int, eos_token_ids: Iterable[int] = (), device: torch.device | str = "cpu") -> "PromptLookupDrafter":
        return PromptLookupDrafter(vocab_size, self.max_ngram, tuple(int(e) for e in eos_token_ids), device)


@dataclass
class PromptLookupDrafter:
    """The :class:`~viasd_adapt.engine.drafters.Drafter` of prompt lookup: ids copied from the text, point-mass p.

    ``passes`` stays 0: no model runs, so no drafter pass is priced.
    """

    vocab_size: int
    max_ngram: int = DEFAULT_MAX_NGRAM
    eos_token_ids: tuple[int, ...] = ()
    device: torch.device | str = "cpu"
    passes: int = field(default=0, init=False)
    proposed: int = field(default=0, init=False)
    lookups: int = field(default=0, init=False)
    misses: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.max_ngram < 1:
            raise ConfigError(f"prompt lookup needs max_ngram >= 1, got {self.max_ngram}")
        if self.vocab_size < 1:
            raise ConfigError(f"prompt lookup needs the target's vocabulary size, got {self.vocab_size}")

    def draft(self, sequence: list[int], gamma: int, generator: torch.Generator | None = None) -> tuple[list[int], torch.Tensor]:
        ids = lookup_continuation(sequence, gamma, self.max_ngram, self.eos_token_ids)
        self.lookups += 1
        self.misses += not ids
        self.proposed += len(ids)
        return ids, point_mass(ids, self.vocab_size, self.device)

    def propose(self, sequence: list[int], gamma: int, generator: torch.Generator | None = None):
        ids, p = self.draft(sequence, gamma, generator)
        return torch.tensor(ids, dtype=torch.long, device=p.device), p


__all__ = ["DEFAULT_MAX_NGRAM", "DRAFT_NAME", "PromptLookupDrafter", "PromptLookupSpec", "lookup_continuation", "point_mass"]
