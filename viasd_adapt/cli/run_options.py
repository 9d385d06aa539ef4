"""Which run input each command-line option sets, for :func:`viasd_adapt.frameworks.registry.refuse_unhonoured`.

The frameworks declare what they cannot honour (:attr:`~viasd_adapt.frameworks.registry.Framework.ignores`);
this module only maps the options of ``viasd generate`` and ``viasd bench`` onto those run inputs,
so that every command refuses an option the same way, by the name the user typed.
"""

from __future__ import annotations

from typing import Any

from viasd_adapt.frameworks.registry import BLOCK_LENGTH, DRAFTER, EAGLE_HEAD, MASK, SAMPLING, TIER

#: option name (the command's parameter) -> (run input, the option as typed)
OPTION_INPUTS: dict[str, tuple[str, str]] = {
    "draft": (DRAFTER, "--draft"),
    "eagle_head": (EAGLE_HEAD, "--eagle-head"),
    "mask": (MASK, "--mask"),
    "mode": (TIER, "--mode"),
    "alpha1": (TIER, "--alpha1"),
    "alpha2": (TIER, "--alpha2"),
    "lenience": (TIER, "--lenience"),
    "preset": (TIER, "--preset"),
    "adaptive": (TIER, "--adaptive"),
    "gamma": (BLOCK_LENGTH, "--gamma"),
    "temperature": (SAMPLING, "--temperature"),
    "top_p": (SAMPLING, "--top-p"),
}

#: Values that mean "not given" (or ask for nothing a framework could drop): a default preset, and
#: mode none, which every framework runs (without a tier, it is what they do).
_NOT_GIVEN = {"preset": ("default",), "mode": ("none",)}


def given_inputs(**options: Any) -> list[tuple[str, str]]:
    """``(run input, "--option value")`` for each option of :data:`OPTION_INPUTS` that was given
    (not None, and not a value of :data:`_NOT_GIVEN`)."""
    given = []
    for name, value in options.items():
        if name not in OPTION_INPUTS:
            raise ValueError(f"no run input is known for the option {name!r}")
        if value is None or value in _NOT_GIVEN.get(name, ()):
            continue
        run_input, option = OPTION_INPUTS[name]
        if isinstance(value, bool):  # an on/off flag, as typed: --adaptive or --no-adaptive
            given.append((run_input, option if value else f"--no-{option.removeprefix('--')}"))
        else:
            given.append((run_input, f"{option} {value}"))
    return given


__all__ = ["OPTION_INPUTS", "given_inputs"]
