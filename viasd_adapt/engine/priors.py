"""Where the adaptive tier's prices and priors come from (:class:`~viasd_adapt.core.adaptive.AdaptivePlan`).

The controller (:mod:`viasd_adapt.core.adaptive`) compares the two arms on priced passes per
committed token, so it needs what a pass costs and, to decide its first cycles well, what each arm
is believed to cost per token before the sequence shows it. Both come from the best evidence at hand:

**Prices** (:class:`~viasd_adapt.core.adaptive.PassPrices`, in full-equivalent passes):

1. ``tuned.json``'s forward costs for the mask in use (``report.costs[<mask file>]``: ``c_draft``,
   ``c_slim``, ``c_resume``, ``c_full_block`` seconds, measured by ``viasd tune`` on this machine
   or one like it): the same prices the bench's ``full_equivalent`` column uses, so the controller
   minimises exactly what the bench reports;
2. else the mask's layer counts: a slim pass runs ``retained / L`` of the layers, a resumed pass
   ``(L - s1) / L``; the drafter costs its parameter count over the target's (0 for prompt
   lookup, which runs no model). Forward time on small batches grows with the weights a pass
   reads, so that is the best guess with nothing timed.

**Priors**, for the first cycles (relative, worth :data:`PRIOR_WEIGHT` cycles, fading):

1. ``tuned.json``'s measured points (``report.best_within_budget``), when they describe this run:
   the ``none`` point and the mode's point with the tier on every cycle (``lossless-fixed``,
   ``lossy-fixed``) measured with this
   mask and the same block length (and, for lossy, the same tolerances). The tier is stated against
   the untiered arm as the sequence measures it, by the differences per cycle the two points show
   in priced passes and in tokens (:class:`~viasd_adapt.core.adaptive.RelativePrior`; the extra
   tokens bounded to one either way). No absolute level is taken from the calibration: its prompts
   are not the run's and it ran under another load, so the level the untiered arm's own cycles
   measure is the run's; the difference between the arms is what the calibration measured best.
   It is worth 2 cycles, however many the calibration ran, so the sequence's own cycles outweigh it
   after a few cycles (``docs/adaptive.md``: how the weight was chosen). Points measured with
   another kind of drafter (a model against prompt lookup) do not describe this run and are not used;
2. else :class:`~viasd_adapt.core.adaptive.RelativePrior` with the slim pass as its extra cost and
   no extra tokens: the tier must show that it buys its slim pass. For lossless that is close to
   the truth (the cascade pays a slim pass per cycle for at most one more token). For lossy it is a
   cautious guess: a lossy cycle may commit more tokens, or skip q altogether. It sets only where
   the controller starts: the tier is probed once the prior's gap allows
   (:class:`~viasd_adapt.core.adaptive.AdaptiveSettings`), and where it pays it runs from then on.

Why not always the measured points: ``tuned.json`` measures the engine's loop with the pair's own
drafter. EAGLE drafts a tree with its head, so those points describe other cycles; it takes its
prices by layer counts and no measured prior. A drafter model other than the tuned one cannot be
told apart here; its priors are then a little off, and fade with the controller's discount.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.config.tuned import TunedPoint, TunedSettings
from viasd_adapt.core.adaptive import AdaptivePlan, ArmPrior, PassPrices, RelativePrior
from viasd_adapt.core.modes import mode_row
from viasd_adapt.core.settings import Mode, TierSettings, fixed_label
from viasd_adapt.errors import ConfigError
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.mask import model_mismatches



def prior_fields(mode: Mode) -> tuple[str, ...]:
    """The settings a measured tier point must share with the run to be its prior: the block length,
    and what the mode's row says it reads (:mod:`viasd_adapt.core.modes`), ``adaptive`` aside (the
    point measured the tier on every cycle)."""
    return ("gamma", *(name for name in mode_row(mode).reads if name != "adaptive"))


def parameter_count(model: nn.Module) -> int:
    """Parameters of ``model``, each shared tensor once (tied embeddings)."""
    seen: dict[int, int] = {}
    for parameter in model.parameters():
        seen.setdefault(id(parameter), parameter.numel())
    return sum(seen.values())


def drafter_price(target: nn.Module, drafter: nn.Module | None) -> float:
    """A drafter forward in full target passes, by parameter counts (0: no drafter model)."""
    if not isinstance(drafter, nn.Module):
        return 0.0
    return parameter_count(drafter) / max(1, parameter_count(target))


def tuned_mask_name(tuned: TunedSettings | None, routing: RoutingMask | None) -> str | None:
    """The name ``tuned.json``'s report gives the mask ``routing`` (matched by the layers it skips),
    or None when it measured no such mask."""
    if tuned is None or routing is None:
        return None
    bits = routing.bits()
    for name, info in tuned.report.masks.items():
        if isinstance(info, dict) and list(info.get("bits") or []) == bits:
            return name
    return None


def layer_prices(target: nn.Module, routing: RoutingMask, draft: float) -> PassPrices:
    """Prices by the mask's layer counts (module docstring)."""
    num_layers = find_decoder_stack(target).num_layers
    return PassPrices.from_layers(num_layers, len(routing.retained), routing.first_skipped, draft=draft)


def _measured_prices(costs: Any) -> PassPrices | None:
    if not isinstance(costs, dict) or not costs.get("c_full_block"):
        return None
    try:
        return PassPrices.from_seconds(costs.get("c_draft") or 0.0, costs.get("c_slim"), costs.get("c_resume"),
                                       costs["c_full_block"])
    except (ConfigError, TypeError):
        return None


#: How many cycles a calibration point is worth as a prior: a few, so that the sequence's own cycles
#: outweigh it after a few cycles (docs/adaptive.md: how it was chosen, on synthetic arms and on the
#: bench's mixed prompts). The calibration ran other prompts, often under another load.
PRIOR_WEIGHT = 2.0


def prior_weight(point: TunedPoint) -> float:
    """How many cycles a measured point is worth: :data:`PRIOR_WEIGHT`, or fewer when the point
    measured fewer cycles (written by hand with one or two, say)."""
    cycles = point.metrics.get("cycles") if isinstance(point.metrics, dict) else None
    if isinstance(cycles, bool) or not isinstance(cycles, (int, float)) or not cycles > 0:
        return PRIOR_WEIGHT
    return float(min(cycles, PRIOR_WEIGHT))


def _prior(point: TunedPoint | None) -> ArmPrior | None:
    if point is None or not point.full_equivalent:
        return None
    tokens = point.metrics.get("mean_accepted_length") if isinstance(point.metrics, dict) else None
    try:
        return ArmPrior(point.full_equivalent, prior_weight(point), float(tokens) if tokens else 2.0)
    except (ConfigError, TypeError, ValueError):
        return None


def _relative(plain: ArmPrior, tier: ArmPrior) -> RelativePrior:
    """The tier stated against the untiered arm by two measured points: the difference per cycle in
    priced passes and in tokens (module docstring), worth as many cycles as a measured prior."""
    plain_cycle = plain.cost_per_token * plain.tokens_per_cycle
    extra_cost = tier.cost_per_token * tier.tokens_per_cycle - plain_cycle
    extra_tokens = min(1.0, max(-1.0, tier.tokens_per_cycle - plain.tokens_per_cycle))
    return RelativePrior(extra_cost=extra_cost, extra_tokens=extra_tokens, weight=min(plain.weight, tier.weight),
                         reference=(plain_cycle, plain.tokens_per_cycle))


def _describes(point: TunedPoint | None, settings: TierSettings, fields: tuple[str, ...]) -> bool:
    return point is not None and all(getattr(point.settings, name) == getattr(settings, name) for name in fields)


def adaptive_plan(settings: TierSettings, target: nn.Module, routing: RoutingMask | None,
                  tuned: TunedSettings | None = None, drafter: nn.Module | None = None,
                  use_measured: bool = True) -> AdaptivePlan | None:
    """The plan of a run's controllers (module docstring); None when ``settings`` do not adapt.

    Args:
        routing: the mask in use (the slim verifier's).
        tuned: ``tuned.json`` beside the mask, or None; used only when it was measured on ``target``.
        drafter: the drafter model, or None for a drafter that runs no model (prompt lookup).
        use_measured: False for a framework whose cycles ``tuned.json``'s points do not describe (EAGLE).
    """
    if not settings.adapts or routing is None:
        return None
    if tuned is not None and model_mismatches(tuned.fingerprint, target):
        tuned = None
    name = tuned_mask_name(tuned, routing) if use_measured else None
    costs = tuned.report.costs.get(name) if name is not None else None
    measured = _measured_prices(costs)
    has_model = isinstance(drafter, nn.Module)
    # points measured with a drafter model do not describe prompt lookup, nor the other way round
    same_drafter = measured is not None and (measured.draft > 0) == has_model
    sources = []
    if measured is not None:
        prices = measured if same_drafter else PassPrices(drafter_price(target, drafter), measured.slim, measured.resumed)
        sources.append(f"prices: forward costs measured with {name} (tuned.json)"
                       + ("" if same_drafter else "; the drafter by parameter counts"))
    else:
        prices = layer_prices(target, routing, drafter_price(target, drafter))
        sources.append("prices: by layer counts of the mask and parameter counts of the drafter")
    relative = None
    if same_drafter:
        plain, tier = tuned.best(Mode.NONE.value), tuned.best(fixed_label(settings.mode))
        if _describes(plain, settings, ("gamma",)) and _prior(plain) is not None \
                and _describes(tier, settings, prior_fields(settings.mode)) and tier.mask is not None \
                and Path(tier.mask).name == Path(name).name and _prior(tier) is not None:
            relative = _relative(_prior(plain), _prior(tier))
            sources.append("priors: the tier stated against the untiered arm by the measured points of tuned.json "
                           f"(worth {relative.weight:g} cycles)")
    if relative is None:
        relative = RelativePrior(extra_cost=prices.slim, weight=PRIOR_WEIGHT)
        sources.append("priors: the tier stated against the untiered arm (a slim pass more per cycle, "
                       "nothing measured)")
    return AdaptivePlan(prices, {}, relative, settings.gamma + 1, sources=tuple(sources))


__all__ = ["PRIOR_WEIGHT", "adaptive_plan", "drafter_price", "layer_prices", "parameter_count", "prior_weight", "tuned_mask_name"]
