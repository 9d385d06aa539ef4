"""Entry point of the ``viasd`` console script.

Each sub-command lives in its own module and is attached here, so adding one is a one-line change.

What every command gets at this edge, so that no command handles it itself:

* a :class:`ViasdError` ends in one line, ``error: ...``, and exit status 2;
* an interrupt (Ctrl-C, SIGINT) ends in click's one line, ``Aborted!``, and exit status 1, at any
  moment, start-up included: the sub-commands' modules (and torch, transformers, which they import
  and which can take many seconds to load on a busy machine) are imported only once click runs,
  inside its handling, never when this module is imported;
* output that cannot be written ends in one line and exit status 1 (:mod:`viasd_adapt.cli.output`).
"""

from __future__ import annotations

import importlib
import sys

import click

from viasd_adapt import __version__
from viasd_adapt.cli.output import run_guarded
from viasd_adapt.errors import ViasdError

# name -> (module, attribute) of each sub-command, imported when click asks for it (module
# docstring); a module that is missing is simply not offered.
_SUBCOMMANDS = {
    "models": ("viasd_adapt.cli.models", "models"),
    "search": ("viasd_adapt.cli.search", "search"),
    "generate": ("viasd_adapt.cli.generate", "generate"),
    "bench": ("viasd_adapt.cli.bench", "bench"),
    "tune": ("viasd_adapt.cli.tune", "tune"),
    "demo": ("viasd_adapt.cli.demo", "demo"),
}


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
        return run_guarded(lambda: super(_CleanErrors, self).main(args, *rest, **kwargs))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in _SUBCOMMANDS if self.get_command(ctx, name) is not None)

    def get_command(self, ctx: click.Context, name: str):
        """The sub-command ``name``, its module imported on first use (module docstring)."""
        if name not in self.commands and name in _SUBCOMMANDS:
            module, attribute = _SUBCOMMANDS[name]
            try:
                self.add_command(getattr(importlib.import_module(module), attribute), name)
            except ModuleNotFoundError as err:
                if err.name != module:
                    raise
                return None
        return self.commands.get(name)

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
