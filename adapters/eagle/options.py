"""Typed options of the EAGLE adapter, validated up front with errors that name the choices."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from viasd_adapt.errors import ConfigError


class HeadFeatures(str, Enum):
    """Which hidden states the EAGLE head gets for tokens that q never processed (lossy/audit).

    * ``SLIM``: the slim verifier's final hidden state (after the shared final norm). Free.
    * ``FULL``: q runs over the committed tokens every cycle just to give the head true features;
      a measurement device (costs a full pass per cycle, counted in ``full_passes``).
    """

    SLIM = "slim"
    FULL = "full"


class LosslessStrategy(str, Enum):
    """How lossless mode uses the slim verifier (package docstring, "Modes").

    * ``ROUTE``: u picks the path and proposes one extra token; q verifies the head's path (and,
      greedy, the head's top-1 chain beside it) plus that token.
    * ``CASCADE``: p -> u -> q (:func:`viasd_adapt.core.cycle.decide_cycle` in lossless mode).
    """

    ROUTE = "route"
    CASCADE = "cascade"


def _parse(enum: type[Enum], value: object, name: str) -> Enum:
    if isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in enum)
        raise ConfigError(f"{name} must be one of {choices}, got {value!r}") from None


@dataclass(frozen=True)
class EagleOptions:
    """EAGLE-specific choices of a :func:`~viasd_adapt.adapters.eagle.tiered` scope.

    Attributes:
        head_features: see :class:`HeadFeatures` (strings are accepted and parsed).
        lossless_strategy: see :class:`LosslessStrategy` (strings are accepted and parsed).
        share_prefix: in lossy/audit mode, q's passes resume at the mask's first skipped layer s1
            from the hidden states the slim tree pass produced there (package docstring,
            "Prefix sharing"); False runs every q pass from layer 0 (the reference).
    """

    head_features: HeadFeatures = HeadFeatures.SLIM
    lossless_strategy: LosslessStrategy = LosslessStrategy.ROUTE
    share_prefix: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "head_features", _parse(HeadFeatures, self.head_features, "head_features"))
        object.__setattr__(
            self, "lossless_strategy", _parse(LosslessStrategy, self.lossless_strategy, "lossless_strategy")
        )
        if not isinstance(self.share_prefix, bool):
            raise ConfigError(f"share_prefix must be True or False, got {self.share_prefix!r}")


def as_options(options: EagleOptions | None) -> EagleOptions:
    """``options`` checked to be an :class:`EagleOptions` (None: the defaults)."""
    if options is None:
        return EagleOptions()
    if not isinstance(options, EagleOptions):
        raise ConfigError(f"options must be an EagleOptions, got {type(options).__name__}")
    return options


__all__ = ["EagleOptions", "HeadFeatures", "LosslessStrategy", "as_options"]
