"""``--framework``'s choices: the registry's names, read when the option is parsed or shown.

A list written into the option would have to name every framework a second time, and a framework
registered after the CLI was imported (a plugin, a test) would be refused as unknown; the choices
are the registry's instead (:func:`viasd_adapt.frameworks.registry.names`).
"""

from __future__ import annotations

from typing import Sequence

import click


class FrameworkChoice(click.Choice):
    """A :class:`click.Choice` of the registered frameworks, looked up each time click asks."""

    def __init__(self) -> None:
        super().__init__((), case_sensitive=True)

    @property
    def choices(self) -> Sequence[str]:  # type: ignore[override]
        from viasd_adapt.frameworks.registry import names

        return names()

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:
        """click's constructor sets the choices; the registry holds them, so the value is not kept."""


__all__ = ["FrameworkChoice"]
