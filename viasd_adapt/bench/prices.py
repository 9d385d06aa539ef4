"""One price list per run: every forward kind timed once, interleaved, and every setting priced from it.

A verdict compares settings by their pass counts priced in full-equivalent passes
(:mod:`viasd_adapt.bench.costs`). If each setting were priced from forwards timed at its own
moment, two settings that ran exactly the same passes would cost a few percent apart, and a
verdict could "find" a saving that is only the machine's load at two moments. So a run (``viasd
bench``, ``viasd tune``, the tune stage of ``viasd models add``) times every forward kind it needs
once, in rounds: each round times one full block pass, one 1-token pass, one drafter pass and, per
mask, one slim and one resumed pass, back to back, so that load from other processes hits them
alike. The price of each kind is its median over the rounds; every row and every tuning point is
priced from these medians, so settings with the same pass counts cost exactly the same.

The rounds are kept (:attr:`PriceList.rounds`): the spread of the prices is part of the report,
and the verdicts' bootstrap resamples the rounds beside the prompts
(:func:`price_replicates`), so a saving must stand out of the price noise as well as out of the
prompt-to-prompt noise.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from torch import nn

from viasd_adapt.bench.costs import ForwardCosts, PassCounts, forward_probes, kind_name, time_rounds
from viasd_adapt.routing.slim import SlimVerifier

#: The target's and drafter's kinds (shared by every mask) and each mask's own kinds.
SHARED_KINDS = ("c_full_block", "c_full", "c_draft")
MASK_KINDS = ("c_slim", "c_resume")
#: The columns of a price vector, in the order of :data:`PASS_KINDS` (what one pass of each kind
#: costs, in full block passes): a resumed pass is counted among the full passes too, so its column
#: is what it costs beyond a full block pass.
PASS_KINDS = ("draft", "slim", "full", "resumed", "single")


@dataclass(frozen=True)
class PriceList:
    """The forward times (seconds) of one run, per kind, one entry per round (module docstring).

    ``rounds`` maps :func:`kind_name` keys to equally long lists; ``masks`` names the masks whose
    slim (and, with a shared prefix, resumed) passes were timed."""

    rounds: dict[str, list[float]]
    masks: tuple[str, ...]
    context_length: int
    block_length: int

    def __post_init__(self) -> None:
        lengths = {len(values) for values in self.rounds.values()}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError("a price list needs the same, non-zero number of rounds for every forward kind")

    @property
    def repeats(self) -> int:
        return len(next(iter(self.rounds.values())))

    def median(self, kind: str, mask: str | None = None) -> float | None:
        values = self.rounds.get(kind_name(kind, mask))
        return statistics.median(values) if values else None

    def costs(self, mask: str | None = None) -> ForwardCosts:
        """The medians as :class:`ForwardCosts` for the runs on ``mask`` (None: no slim verifier)."""
        return ForwardCosts(
            c_draft=self.median("c_draft") or 0.0,
            c_slim=self.median("c_slim", mask) if mask is not None else None,
            c_resume=self.median("c_resume", mask) if mask is not None else None,
            c_full_block=self.median("c_full_block"),
            c_full=self.median("c_full"),
            context_length=self.context_length,
            block_length=self.block_length,
        )

    def costs_by_mask(self) -> dict[str | None, ForwardCosts]:
        """Per mask (None: no slim verifier): one set of medians, the shared kinds the same in all."""
        return {None: self.costs(None), **{mask: self.costs(mask) for mask in self.masks}}

    def vectors(self, mask: str | None = None) -> np.ndarray:
        """``(rounds, 5)`` seconds per round: drafter, slim, full block, resumed, 1-token pass (a kind
        not timed: 0 for the drafter and slim, a full block pass for a resumed pass)."""
        block = np.asarray(self.rounds["c_full_block"], dtype=float)

        def column(kind: str, fallback: np.ndarray) -> np.ndarray:
            values = self.rounds.get(kind)
            return np.asarray(values, dtype=float) if values else fallback

        zero = np.zeros_like(block)
        slim = column(kind_name("c_slim", mask), zero) if mask is not None else zero
        resume = column(kind_name("c_resume", mask), block) if mask is not None else block
        return np.column_stack([column("c_draft", zero), slim, block, resume, column("c_full", block)])

    def spread(self) -> dict[str, dict[str, float]]:
        """Per kind: the median, the quartiles (seconds) and the interquartile range over the median."""
        out = {}
        for kind, values in self.rounds.items():
            q1, median, q3 = (float(v) for v in np.quantile(np.asarray(values, dtype=float), (0.25, 0.5, 0.75)))
            out[kind] = {"median": median, "q1": q1, "q3": q3, "relative_iqr": (q3 - q1) / median if median > 0 else 0.0}
        return out

    def renamed(self, names: Mapping[str, str]) -> "PriceList":
        """The same list with masks renamed (``names``: old -> new; others kept)."""
        def rename(key: str) -> str:
            kind, _, mask = key.partition("@")
            return kind_name(kind, names.get(mask, mask)) if mask else key

        return PriceList({rename(k): v for k, v in self.rounds.items()}, tuple(names.get(m, m) for m in self.masks),
                         self.context_length, self.block_length)

    def to_dict(self) -> dict[str, Any]:
        return {"rounds": {k: list(v) for k, v in self.rounds.items()}, "masks": list(self.masks),
                "context_length": self.context_length, "block_length": self.block_length,
                "medians": {k: statistics.median(v) for k, v in self.rounds.items()}, "spread": self.spread()}

    @classmethod
    def from_dict(cls, data: Any) -> "PriceList | None":
        """A price list back from a report; None for a missing or malformed one (an older report)."""
        try:
            return cls({str(k): [float(x) for x in v] for k, v in data["rounds"].items()}, tuple(data.get("masks", ())),
                       int(data["context_length"]), int(data["block_length"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def measure_prices(target: nn.Module, draft: nn.Module | None, slims: dict[str, SlimVerifier] | None = None,
                   context: list[int] | None = None, gamma: int = 5, repeats: int = 15,
                   source: list[int] | None = None) -> PriceList:
    """The run's one price list: single forwards of every kind (the target's, the drafter's, and each
    mask's in ``slims``) timed in interleaved rounds (:func:`~viasd_adapt.bench.costs.time_rounds`);
    every round is kept. ``source``: an encoder-decoder target's encoder input
    (:func:`~viasd_adapt.bench.costs.forward_probes`)."""
    context = context or list(range(1, 65))
    slims = slims or {}
    rounds = time_rounds(forward_probes(target, draft, slims, context, gamma, source), repeats)
    return PriceList(rounds, tuple(slims), len(context), gamma + 1)


def pass_vector(passes: PassCounts | Mapping[str, float]) -> np.ndarray:
    """A pass count as the ``(5,)`` vector :data:`PASS_KINDS` (a mapping may leave kinds out: 0)."""
    get = (lambda k: getattr(passes, k)) if isinstance(passes, PassCounts) else (lambda k: passes.get(k, 0.0) or 0.0)
    return np.array([float(get(kind)) for kind in PASS_KINDS])


def unit_prices(seconds: np.ndarray) -> np.ndarray:
    """``(..., 5)`` seconds per kind -> what each counted pass costs in full block passes (the resumed
    column: beyond the full block pass it is also counted as)."""
    block = seconds[..., 2:3]
    prices = seconds / block
    prices[..., 3] = prices[..., 3] - 1.0
    return prices


def price_replicates(vectors: np.ndarray, replicates: int, seed: int) -> np.ndarray:
    """``(replicates + 1, 5)`` unit prices (:func:`unit_prices`): row 0 from the medians of every
    round, each further row from the medians of the rounds resampled with replacement (a round's
    kinds stay together: they were timed back to back)."""
    rounds = vectors.shape[0]
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, rounds, size=(replicates, rounds))
    medians = np.vstack([np.median(vectors, axis=0)[None, :], np.median(vectors[draws], axis=1)])
    return unit_prices(medians)


def _short(kind: str) -> str:
    """A kind with its mask by the file name, not the path of this machine."""
    name, _, mask = kind.partition("@")
    return f"{name}@{Path(mask).name}" if mask else name


def format_price_list(prices: PriceList) -> str:
    """One line per price list: each kind's median (ms), its share of a full block pass, and its spread."""
    spread = prices.spread()
    block = spread["c_full_block"]["median"]
    parts = [f"{_short(kind)} {s['median'] * 1e3:.2f} ms ({s['median'] / block:.2f}, IQR {s['relative_iqr']:.0%})"
             for kind, s in spread.items()]
    return (f"price list ({prices.repeats} interleaved rounds, context {prices.context_length} tokens, blocks of "
            f"{prices.block_length}; in parentheses: share of a full block pass, IQR over the median): " + ", ".join(parts))


#: A price list whose widest spread (IQR over the median) is above this was timed on a busy machine.
WIDE_SPREAD = 0.25
#: Each forward kind in words.
KIND_WORDS = {"c_full_block": "a full block pass", "c_full": "a 1-token target pass", "c_draft": "a drafter pass",
              "c_slim": "a slim pass", "c_resume": "a resumed pass"}


def widest_spread(prices: PriceList) -> tuple[str, float]:
    """The forward kind whose rounds spread widest (IQR over the median), and that spread."""
    spread = prices.spread()
    kind = max(spread, key=lambda k: spread[k]["relative_iqr"])
    return kind, spread[kind]["relative_iqr"]


def spread_line(prices: PriceList | None, threshold: float = WIDE_SPREAD) -> str | None:
    """One line for a verdict when the price list's spread is wide (its widest kind's IQR above
    ``threshold`` of its median): the machine was busy while the prices were timed, so the noise
    floor is high and the verdict may keep the simpler setting where a quiet machine would not.
    None for a narrow list (or none)."""
    if prices is None:
        return None
    kind, relative = widest_spread(prices)
    if relative <= threshold:
        return None
    words = KIND_WORDS.get(kind.partition("@")[0], "a forward")
    return (f"BUSY MACHINE: the price list's spread is wide: {_short(kind)} ({words}) has an IQR of {relative:.0%} of "
            f"its median (above {threshold:.0%}); the machine was busy while the prices were timed, so the verdict may "
            "keep the simpler setting where a quiet machine would not: run it again on a quiet machine to decide")


__all__ = ["MASK_KINDS", "PASS_KINDS", "SHARED_KINDS", "WIDE_SPREAD", "PriceList", "format_price_list", "kind_name",
           "measure_prices", "pass_vector", "price_replicates", "spread_line", "unit_prices", "widest_spread"]
