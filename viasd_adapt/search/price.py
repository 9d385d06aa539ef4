"""What a mask costs in decoder layers: pure arithmetic on its bits, kept apart from the search.

The report (and ``benchmarks/mask_frontier.py``) prices every searched mask the same way, with the
target resuming at the mask's first skipped layer s1.
"""

from __future__ import annotations

from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.search.candidates import first_skipped, marginal_layers


def mask_price(mask: RoutingMask) -> dict:
    """What a mask costs in decoder layers, with the target resuming at its first skipped layer.

    ``slim_layers``: layers the slim pass runs; ``resume_layers``: layers a resumed target pass
    runs (from s1 on); ``marginal_layers``: the slim pass's layers the target cannot reuse (its
    retained layers at or after s1). Fractions are of the target's layer count.
    """
    bits = tuple(mask.bits())
    L = mask.num_layers
    s1 = first_skipped(bits)
    slim = len(mask.retained)
    marginal = marginal_layers(bits)
    return {"s1": s1, "slim_layers": slim, "resume_layers": L - s1, "marginal_layers": marginal,
            "slim_fraction": round(slim / L, 4), "resume_fraction": round((L - s1) / L, 4),
            "marginal_fraction": round(marginal / L, 4)}


def cycle_price(mask: RoutingMask, escalation: float | None) -> float | None:
    """Expected verification cost of one cycle, as a fraction of a full target pass: the slim pass
    (its retained layers) plus, on the share ``escalation`` of cycles that call q, q resumed at s1
    (layers s1..L-1). See :meth:`~viasd_adapt.search.candidates.BudgetSpace.cycle_price`."""
    if escalation is None:
        return None
    price = mask_price(mask)
    return (price["slim_layers"] + escalation * price["resume_layers"]) / mask.num_layers


__all__ = ["cycle_price", "mask_price"]
