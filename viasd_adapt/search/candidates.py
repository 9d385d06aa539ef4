"""Mask generators and the two search spaces of DIMR.

* :class:`FixedCountSpace`: exactly ``k`` skipped layers (the paper's space, ``r = k / L``).
* :class:`BudgetSpace`: any number of skipped layers, priced by what a mask costs with a shared
  prefix (its retained layers at or after the first skipped one), within a budget.

Generators return valid masks by construction (never Bernoulli sampling with rejection, which
wastes draws). Masks are plain tuples of 0/1 keep-bits so that exact deduplication is a set lookup.
"""

from __future__ import annotations

import itertools
import math
from typing import Iterable, Iterator, Union

import torch

from viasd_adapt.errors import ConfigError

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


def one_flips(bits: Bits) -> list[Bits]:
    """Every mask one bit away (one layer more or less skipped)."""
    return [tuple(1 - b if i == j else b for j, b in enumerate(bits)) for i in range(len(bits))]


# ----------------------------------------------------------------------------- search spaces


def first_skipped(bits: Bits) -> int:
    """s1: the first skipped layer (``len(bits)`` when none is)."""
    return next((i for i, b in enumerate(bits) if b == 0), len(bits))


def marginal_layers(bits: Bits) -> int:
    """Retained layers at or after s1: the slim verifier's work the target cannot reuse when it
    resumes at s1 (everything below s1 is shared, see viasd_adapt.routing.shared)."""
    return sum(bits[first_skipped(bits):])


def check_cardinality(num_layers: int, k: int) -> None:
    """Refuses a fixed-count space with no mask: fewer than 2 layers, nothing or everything skipped."""
    if not isinstance(num_layers, int) or num_layers < 2:
        raise ConfigError(f"mask search needs a model with at least 2 decoder layers, got {num_layers}")
    if k < 1:
        raise ConfigError(
            f"the ratio skips 0 of {num_layers} layers; a slim verifier must skip at least one layer (raise --ratio)"
        )
    if k >= num_layers:
        raise ConfigError(f"cannot skip {k} of {num_layers} layers; at least one layer must remain")


class FixedCountSpace:
    """Masks with exactly ``k`` skipped layers (the paper's space: r = k / L)."""

    def __init__(self, num_layers: int, k: int):
        self.num_layers, self.k = num_layers, k

    def contains(self, bits: Bits) -> bool:
        return len(bits) == self.num_layers and sum(1 for b in bits if b == 0) == self.k

    def random(self, generator: torch.Generator) -> Bits:
        return random_mask(self.num_layers, self.k, generator)

    def size(self) -> int:
        return space_size(self.num_layers, self.k)

    def enumerate(self) -> Iterator[Bits]:
        return all_masks(self.num_layers, self.k)

    def describe(self) -> dict:
        return {"space": "ratio", "num_layers": self.num_layers, "skipped": self.k, "ratio": self.k / self.num_layers}


class BudgetSpace:
    """Masks whose price is within a budget, whatever their number of skipped layers.

    Two prices, in decoder layers (:meth:`price`):

    * ``escalation=None`` (the marginal price): a mask costs, on top of the target pass that resumes
      at its first skipped layer s1, only its retained layers at or after s1
      (:func:`marginal_layers`); the layers below s1 are computed once for both. This prices only
      cycles where q runs, so on its own it favours masks that skip only the last layers (slim
      passes costing about a full pass).
    * ``escalation=e`` (the cycle price, :meth:`cycle_price`): what one verification cycle costs in
      expectation: the slim pass always (its retained layers), plus q resumed at s1 (layers s1..L-1)
      on the share e of cycles that escalate. e = 1 is the marginal price plus L; e = 0 prices the
      slim pass alone.

    The space holds every mask that keeps layer 0, skips at least one layer and is priced at most
    ``max_marginal`` layers (with ``escalation``: the most a cycle may cost, in layers).
    """

    def __init__(self, num_layers: int, max_marginal: float, escalation: float | None = None):
        if escalation is not None and not 0.0 <= escalation <= 1.0:
            raise ValueError(f"escalation rate must be in [0, 1], got {escalation}")
        self.num_layers, self.max_marginal, self.escalation = num_layers, max_marginal, escalation

    def cycle_price(self, bits: Bits, escalation: float | None = None) -> float:
        e = self.escalation if escalation is None else escalation
        s1 = first_skipped(bits)
        return sum(bits) + (e or 0.0) * (len(bits) - s1)

    def price(self, bits: Bits) -> float:
        return marginal_layers(bits) if self.escalation is None else self.cycle_price(bits)

    def _retained_after_max(self, s1: int) -> int:
        """Most layers a mask with first skipped layer s1 may retain after s1 (-1: none fits)."""
        later = self.num_layers - s1 - 1
        if self.escalation is None:
            cap = self.max_marginal
        else:
            cap = self.max_marginal - s1 - self.escalation * (self.num_layers - s1)
        return min(later, int(math.floor(cap + 1e-9))) if cap >= -1e-9 else -1

    def contains(self, bits: Bits) -> bool:
        return (len(bits) == self.num_layers and bits[0] == 1 and 0 in bits
                and self.price(bits) <= self.max_marginal + 1e-9)

    def _feasible_s1(self) -> list[int]:
        return [s1 for s1 in range(1, self.num_layers) if self._retained_after_max(s1) >= 0]

    def random(self, generator: torch.Generator) -> Bits:
        """s1 uniform over the feasible first skipped layers, then a uniform number of retained layers
        after it, placed at random (uniform over (s1, count) rather than over masks, which would
        almost never draw a late s1)."""
        feasible = self._feasible_s1()
        if not feasible:
            raise ValueError("the budget admits no mask: raise it")
        s1 = feasible[int(torch.randint(len(feasible), (1,), generator=generator))]
        later = list(range(s1 + 1, self.num_layers))
        count = int(torch.randint(self._retained_after_max(s1) + 1, (1,), generator=generator))
        chosen = {later[i] for i in torch.randperm(len(later), generator=generator)[:count].tolist()}
        return tuple(1 if i < s1 or i in chosen else 0 for i in range(self.num_layers))

    def size(self) -> int:
        total = 0
        for s1 in self._feasible_s1():
            later = self.num_layers - s1 - 1
            total += sum(math.comb(later, r) for r in range(self._retained_after_max(s1) + 1))
        return total

    def enumerate(self) -> Iterator[Bits]:
        for s1 in self._feasible_s1():
            later = list(range(s1 + 1, self.num_layers))
            for r in range(self._retained_after_max(s1) + 1):
                for chosen in itertools.combinations(later, r):
                    keep = set(chosen)
                    yield tuple(1 if i < s1 or i in keep else 0 for i in range(self.num_layers))

    def describe(self) -> dict:
        if self.escalation is None:
            return {"space": "budget", "price": "marginal", "num_layers": self.num_layers,
                    "max_marginal_layers": self.max_marginal, "slim_cost": self.max_marginal / self.num_layers}
        return {"space": "budget", "price": "cycle", "num_layers": self.num_layers, "escalation_rate": self.escalation,
                "max_cycle_layers": round(self.max_marginal, 4), "cycle_cost": round(self.max_marginal / self.num_layers, 4),
                "price_formula": "slim layers + escalation_rate x (L - s1), at most cycle_cost x L"}


MaskSpace = Union[FixedCountSpace, BudgetSpace]


def neighbours(bits: Bits, space: MaskSpace) -> list[Bits]:
    """Masks one flip or one swap away that stay in ``space``."""
    return [b for b in one_flips(bits) + one_swaps(bits) if space.contains(b)]


def random_neighbours(bits: Bits, space: MaskSpace, steps: int, count: int, generator: torch.Generator) -> list[Bits]:
    """``count`` random walks of ``steps`` moves (flips or swaps) inside ``space``."""
    out = []
    for _ in range(count):
        current = bits
        for _ in range(steps):
            options = neighbours(current, space)
            if not options:
                break
            current = options[int(torch.randint(len(options), (1,), generator=generator))]
        out.append(current)
    return out


def random_unseen_in(space: MaskSpace, seen: set[Bits], generator: torch.Generator, tries: int = 200) -> Bits | None:
    """A random mask of ``space`` not in ``seen``, or None when the space is exhausted."""
    total = space.size()
    if len(seen) >= total:
        return None
    if total > ENUMERATE_BELOW or len(seen) < total // 2:
        for _ in range(tries):
            bits = space.random(generator)
            if bits not in seen:
                return bits
    remaining = [b for b in space.enumerate() if b not in seen]
    if not remaining:
        return None
    return remaining[int(torch.randint(len(remaining), (1,), generator=generator))]
