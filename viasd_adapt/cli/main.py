"""Entry point of the ``viasd`` console script.

Each sub-command lives in its own module and is attached here, so adding one is a one-line change.
"""

from __future__ import annotations

import importlib
import sys

import click

from viasd_adapt import __version__
from viasd_adapt.errors import ViasdError

# (module, attribute) of each sub-command; a module that is missing is simply not offered.
_SUBCOMMANDS = [
    ("viasd_adapt.cli.models", "models"),
    ("viasd_adapt.cli.search", "search"),
    ("viasd_adapt.cli.generate", "generate"),
    ("viasd_adapt.cli.bench", "bench"),
    ("viasd_adapt.cli.tune", "tune"),
    ("viasd_adapt.cli.demo", "demo"),
]


def _not_utf8(argument: str) -> bool:
    """Python hands undecodable argv bytes over as lone surrogates (PEP 383)."""
    return any("\udc80" <= ch <= "\udcff" for ch in argument)


class _CleanErrors(click.Group):
    """Turns :class:`ViasdError` into a one-line message and exit code 2.

    Arguments that are not valid UTF-8 are refused up front, by position: they would otherwise
    reach the tokenizer or a ``print`` as lone surrogates and fail deep inside with a traceback
    (file names included: viasd-adapt writes and reads UTF-8 paths only).
    """

    def main(self, args=None, *rest, **kwargs):
        argv = list(sys.argv[1:] if args is None else args)
        for position, argument in enumerate(argv, start=1):
            if isinstance(argument, str) and _not_utf8(argument):
                shown = argument.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
                click.secho(f"error: argument {position} ({shown!r}) is not valid UTF-8 text", fg="red", err=True)
                sys.exit(2)
        return super().main(args, *rest, **kwargs)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ViasdError as err:
            click.secho(f"error: {err}", fg="red", err=True)
            sys.exit(2)


@click.group(cls=_CleanErrors)
@click.version_option(__version__, prog_name="viasd")  # the one version: viasd_adapt/__init__.py
def cli() -> None:
    """viasd: add a slim-verifier tier (VIA-SD) to speculative decoding."""


for _module, _attr in _SUBCOMMANDS:
    try:
        cli.add_command(getattr(importlib.import_module(_module), _attr))
    except ModuleNotFoundError as _err:
        if _err.name != _module:
            raise
