"""Fixed-cardinality mask generators: random k-subsets and swap neighbours.

Every generator here returns masks with exactly ``k`` skipped layers by construction (never
Bernoulli sampling with rejection, which wastes draws and biases nothing useful). Masks are plain
tuples of 0/1 keep-bits so that exact deduplication is a set lookup.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable, Iterator

import torch

Bits = tuple[int, ...]

# Below this many masks in the whole space, picking an unseen one enumerates the space instead of
# drawing blindly (a small space fills up and blind draws would mostly hit seen masks).
ENUMERATE_BELOW = 20_000


def bits_from_skipped(num_layers: int, skipped: Iterable[int]) -> Bits:
    skip = set(int(i) for i in skipped)
    return tuple(0 if i in skip else 1 for i in range(num_layers))


def skipped_of(bits: Bits) -> tuple[int, ...]:
    return tuple(i for i, b in enumerate(bits) if b == 0)


def space_size(num_layers: int, k: int) -> int:
    return math.comb(num_layers, k)


def random_mask(num_layers: int, k: int, generator: torch.Generator) -> Bits:
    """A uniform k-subset of skipped layers."""
    return bits_from_skipped(num_layers, torch.randperm(num_layers, generator=generator)[:k].tolist())


def random_unseen(num_layers: int, k: int, seen: set[Bits], generator: torch.Generator, tries: int = 200) -> Bits | None:
    """A uniform mask not in ``seen``, or None when every mask has been seen."""
    total = space_size(num_layers, k)
    if len(seen) >= total:
        return None
    if total > ENUMERATE_BELOW or len(seen) < total // 2:
        for _ in range(tries):
            bits = random_mask(num_layers, k, generator)
            if bits not in seen:
                return bits
    remaining = [b for b in all_masks(num_layers, k) if b not in seen]
    if not remaining:
        return None
    return remaining[int(torch.randint(len(remaining), (1,), generator=generator))]


def all_masks(num_layers: int, k: int) -> Iterator[Bits]:
    for skipped in itertools.combinations(range(num_layers), k):
        yield bits_from_skipped(num_layers, skipped)


def one_swaps(bits: Bits) -> list[Bits]:
    """Every mask reached by keeping one skipped layer and skipping one kept layer."""
    skipped = [i for i, b in enumerate(bits) if b == 0]
    kept = [i for i, b in enumerate(bits) if b == 1]
    out = []
    for s in skipped:
        for r in kept:
            new = list(bits)
            new[s], new[r] = 1, 0
            out.append(tuple(new))
    return out


def random_swaps(bits: Bits, swaps: int, count: int, generator: torch.Generator) -> list[Bits]:
    """``count`` masks, each ``swaps`` one-in-one-out swaps away from ``bits`` (when possible)."""
    skipped = [i for i, b in enumerate(bits) if b == 0]
    kept = [i for i, b in enumerate(bits) if b == 1]
    n = min(swaps, len(skipped), len(kept))
    out = []
    for _ in range(count):
        outs = torch.randperm(len(skipped), generator=generator)[:n].tolist()
        ins = torch.randperm(len(kept), generator=generator)[:n].tolist()
        new = list(bits)
        for a, b in zip(outs, ins):
            new[skipped[a]], new[kept[b]] = 1, 0
        out.append(tuple(new))
    return out


def unique_unseen(masks: Iterable[Bits], seen: set[Bits]) -> list[Bits]:
    """Masks in first-seen order, dropping duplicates and anything in ``seen`` (exact test)."""
    out, taken = [], set(seen)
    for bits in masks:
        if bits not in taken:
            taken.add(bits)
            out.append(bits)
    return out
