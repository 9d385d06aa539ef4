"""Entry point of the ``viasd`` console script.

Each sub-command lives in its own module and is attached here, so adding one is a one-line change.
"""

from __future__ import annotations

import importlib
import sys

import click

from viasd_adapt.errors import ViasdError

# (module, attribute) of each sub-command; a module that is missing is simply not offered.
_SUBCOMMANDS = [
    ("viasd_adapt.cli.models", "models"),
    ("viasd_adapt.cli.search", "search"),
    ("viasd_adapt.cli.generate", "generate"),
    ("viasd_adapt.cli.bench", "bench"),
    ("viasd_adapt.cli.demo", "demo"),
]


class _CleanErrors(click.Group):
    """Turns :class:`ViasdError` into a one-line message and exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ViasdError as err:
            click.secho(f"error: {err}", fg="red", err=True)
            sys.exit(2)


@click.group(cls=_CleanErrors)
@click.version_option(package_name="viasd-adapt")
def cli() -> None:
    """viasd: add a slim-verifier tier (VIA-SD) to speculative decoding."""


for _module, _attr in _SUBCOMMANDS:
    try:
        cli.add_command(getattr(importlib.import_module(_module), _attr))
    except ModuleNotFoundError as _err:
        if _err.name != _module:
            raise
