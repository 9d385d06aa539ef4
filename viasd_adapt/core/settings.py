"""Validated settings of the VIA-SD tier.

The defaults are the paper's (alpha1 = 0.5, alpha2 = 0.3, gamma = 5, r = 0.45). Everything is checked
up front so that a bad value fails with a sentence naming the setting, not with a NaN three layers
down in a probability ratio.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

from viasd_adapt.core.modes import Mode, adaptive_modes, mode_row
from viasd_adapt.errors import ConfigError


@dataclass(frozen=True)
class TierSettings:
    """Thresholds and sizes of the three-tier verifier.

    Attributes:
        alpha1: tolerance of gate 1 (p -> u). A draft token x is accepted when
            ``u(x) >= (1 - alpha1) * p(x)``. In [0, 1).
        alpha2: tolerance of gate 2 (u -> q). The slim verifier resolves a rejected position on its
            own when ``max_v u(v) >= 1 - alpha2``; in lossy escalation q accepts x when
            ``q(x) >= (1 - alpha2) * p(x)``. In [0, 1).
        gamma: draft block length, >= 1.
        ratio: routing ratio r, the fraction of decoder layers the slim verifier skips. In (0, 1).
        beta: residual-borrowing tolerance of the KL-style cost, >= 1.
        mode: see :class:`Mode`.
        escalation_rule: ``"framework"`` verifies escalated positions with the lossless SD rule,
            ``"tolerant"`` with tolerance alpha2 (the paper's lossy reading). Only used when lossy.
        lenience: tolerance ``a`` of the ``lenient`` baseline mode (q accepts x when
            ``q(x) >= (1 - a) p(x)``). In [0, 1); 0 is plain lossless SD.
        greedy_gates: what the tolerant gates compare a draft with in *greedy* decoding.
            ``"proposer"`` (the paper's reading): ``v(x) >= (1 - alpha) p(x)``. ``"top"``: the
            verifier's own top token, ``v(x) >= (1 - alpha) max v``, so ``alpha = 0`` accepts
            exactly the verifier's argmax and alpha is a fidelity knob in greedy decoding too
            (with the paper's reading a sharp drafter fails the gate on the verifier's argmax,
            and a flat one passes tokens the verifier ranks low). Sampling always uses the
            paper's ratio test.
        adaptive: whether the adaptive tier decides, cycle by cycle, between the slim tier and
            untiered verification (:mod:`viasd_adapt.core.adaptive`), for the modes it applies to
            (:attr:`adapts`: lossless and lossy). On by default, because the slim tier often does
            not pay and then costs: each arm is exact on its own and the choice reads only past
            cycles, so lossless stays exact and lossy can only gain fidelity. False runs the tier
            on every cycle, exactly as before the controller existed.
    """

    alpha1: float = 0.5
    alpha2: float = 0.3
    gamma: int = 5
    ratio: float = 0.45
    beta: float = 1.0
    mode: Mode = Mode.LOSSY
    escalation_rule: str = "tolerant"
    lenience: float = 0.5
    greedy_gates: str = "proposer"
    adaptive: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode.parse(self.mode))
        _check_unit_interval("alpha1", self.alpha1, "the strict early gate p -> u")
        _check_unit_interval("alpha2", self.alpha2, "the permissive later gate u -> q")
        _check_unit_interval("lenience", self.lenience, "q's tolerance in the lenient baseline")
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
            raise ConfigError(f"gamma (draft block length) must be an integer >= 1, got {self.gamma!r}")
        if not _is_real(self.ratio) or not 0.0 < self.ratio < 1.0:
            raise ConfigError(f"ratio (fraction of layers skipped) must be in (0, 1), got {self.ratio!r}")
        if not _is_real(self.beta) or self.beta < 1.0:
            raise ConfigError(f"beta (residual tolerance of the cost) must be >= 1, got {self.beta!r}")
        if self.greedy_gates not in ("proposer", "top"):
            raise ConfigError(f"greedy_gates must be 'proposer' or 'top', got {self.greedy_gates!r}")
        if self.escalation_rule not in ("framework", "tolerant"):
            raise ConfigError(
                f"escalation_rule must be 'framework' or 'tolerant', got {self.escalation_rule!r}"
            )
        if not isinstance(self.adaptive, bool):
            raise ConfigError(f"adaptive (the tier chosen cycle by cycle) must be True or False, got {self.adaptive!r}")

    @property
    def adapts(self) -> bool:
        """Whether a controller chooses each cycle's arm (tier or untiered): ``adaptive`` in lossless
        and lossy mode. Audit is a measurement of lossy, so it keeps the tier on every cycle; none
        and lenient run no slim tier to switch off."""
        return self.adaptive and mode_row(self.mode).adaptive

    @property
    def escalation_tolerance(self) -> float:
        """Tolerance q applies to escalated positions: 0 means the lossless SD rule."""
        if "escalation_rule" in mode_row(self.mode).reads and self.escalation_rule == "tolerant":
            return self.alpha2
        return 0.0

    def with_(self, **changes: Any) -> "TierSettings":
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON object. ``adaptive`` is written only when it is off: on is its
        default, and what a file written before it existed means, so such files keep their shape
        and a tuned.json records ``"adaptive": false`` for a choice measured with the tier on every
        cycle (:meth:`values` has every field)."""
        data = self.values()
        if self.adaptive:
            del data["adaptive"]
        return data

    def values(self) -> dict[str, Any]:
        """Every setting by name (the mode as its name)."""
        data = asdict(self)
        data["mode"] = self.mode.value
        return data


#: The built-in modes the adaptive tier applies to (:attr:`TierSettings.adapts`; the table's
#: :func:`~viasd_adapt.core.modes.adaptive_modes` has the added ones too).
ADAPTIVE_MODES = (Mode.LOSSLESS, Mode.LOSSY)
#: How a row (bench) that runs a mode with the tier on every cycle is named: the mode's name and
#: this suffix, ``lossless-fixed``. The bare mode names what a default run does: the adaptive tier.
FIXED_SUFFIX = "-fixed"
#: How reports written before the default rows took the bare names named the adaptive rows
#: (``lossless-adaptive``); still read (:func:`label_settings`, :func:`renamed_row`).
ADAPTIVE_SUFFIX = "-adaptive"


def mode_label(settings: "TierSettings") -> str:
    """The row name of ``settings``: its mode, with :data:`FIXED_SUFFIX` when a mode that can adapt
    runs the tier on every cycle."""
    fixed = mode_row(settings.mode).adaptive and not settings.adapts
    return settings.mode.value + (FIXED_SUFFIX if fixed else "")


def fixed_label(mode: "Mode | str") -> str:
    """The row name of ``mode`` run with the tier on every cycle (``lossless-fixed``): what
    tuned.json names the points the adaptive tier's priors read."""
    return Mode.parse(mode).value + FIXED_SUFFIX


def label_settings(label: str) -> dict[str, Any]:
    """The settings a row named ``label`` runs (:func:`mode_label`'s inverse): ``{"mode": ...,
    "adaptive": ...}``. A bare lossless or lossy row is the default, adaptive; ``-fixed`` is the tier
    on every cycle; the older ``-adaptive`` names still read as the adaptive tier."""
    for suffix, adaptive in ((FIXED_SUFFIX, False), (ADAPTIVE_SUFFIX, True)):
        if label.endswith(suffix):
            mode = Mode.parse(label[: -len(suffix)])
            if not mode_row(mode).adaptive:
                choices = ", ".join(m.value + suffix for m in adaptive_modes())
                raise ConfigError(f"{label!r}: only {choices} exist (audit keeps the tier on every cycle; "
                                  "none and lenient run no slim tier)")
            return {"mode": mode, "adaptive": adaptive}
    mode = Mode.parse(label)
    return {"mode": mode, "adaptive": mode_row(mode).adaptive}


def renamed_row(label: str) -> str:
    """A row name of a report written before the default rows took the bare names (bench reports
    up to version 2, tune points whose family ends in ``-adaptive``) as it is named now: the bare
    ``lossless`` / ``lossy`` were the tier on every cycle (now ``-fixed``), ``-adaptive`` the default."""
    if label.endswith(ADAPTIVE_SUFFIX):
        return label[: -len(ADAPTIVE_SUFFIX)]
    if label in tuple(mode.value for mode in adaptive_modes()):
        return label + FIXED_SUFFIX
    return label


# A documented preset that trades some speed for fidelity: a stricter gate 1 and a slim tier that
# only acts when it is nearly certain.
CONSERVATIVE = dict(alpha1=0.2, alpha2=0.1)


def check_settings(settings: Any) -> "TierSettings":
    """``settings`` must be a :class:`TierSettings` (a dict or a mode name is refused by name)."""
    if not isinstance(settings, TierSettings):
        raise ConfigError(f"settings must be a TierSettings, got {type(settings).__name__}")
    return settings


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_unit_interval(name: str, value: Any, role: str) -> None:
    if not _is_real(value) or not 0.0 <= value < 1.0:
        raise ConfigError(f"{name} ({role}) must be in [0, 1), got {value!r}")


def check_real(name: str, value: Any, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number within the given bounds (NaN and infinities are refused by name). Here,
    beside the settings, because it is the value check everything shares, torch-free: the search
    config and the artifacts use it before torch is loaded."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if low is not None and (value <= low if low_open else value < low):
        raise ConfigError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (value >= high if high_open else value > high):
        raise ConfigError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")
    return float(value)


__all__ = ["Mode", "TierSettings"]
