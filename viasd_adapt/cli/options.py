"""Option types shared by the commands.

Model paths (``--target``, ``--draft``): a model directory, a ``.gguf`` file, or (drafter only)
``prompt-lookup``; ``--chat``: how prompt text becomes ids (:mod:`viasd_adapt.chat`).

Floats: click's ``float`` and ``FloatRange`` accept ``nan`` and ``inf``: every comparison with NaN is false,
so ``FloatRange(min=0)`` lets ``nan`` through, and code that reads "not >= 0" as "no bound" turns a
typo into no bound at all (``viasd tune --max-regret nan`` once did). Every float option of the
CLI uses :func:`finite` instead, so NaN and infinities are refused by option name, before any
model is loaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import click
from click.types import FloatParamType

from viasd_adapt.chat import CHAT_CHOICES
from viasd_adapt.models.registry import PROMPT_LOOKUP


TARGET_HELP = "Target model: a directory saved with save_pretrained, or a .gguf file."
DRAFT_HELP = (f"Drafter model: a directory saved with save_pretrained, a .gguf file, or {PROMPT_LOOKUP!r} "
              "(n-grams copied from the text, no model).")


class ModelPath(click.Path):
    """An existing model directory, or an existing ``.gguf`` file."""

    name = "model"

    def __init__(self) -> None:
        super().__init__(exists=True, path_type=Path)

    def convert(self, value, param, ctx):
        from viasd_adapt.models.gguf import is_gguf_path

        path = super().convert(value, param, ctx)
        if not Path(path).is_dir() and not is_gguf_path(path):
            self.fail(f"{value!r} is neither a model directory nor a .gguf file", param, ctx)
        return path


class DraftPath(ModelPath):
    """A :class:`ModelPath`, or ``prompt-lookup`` (no drafter model)."""

    name = "drafter"

    def convert(self, value, param, ctx):
        if str(value) == PROMPT_LOOKUP:
            return PROMPT_LOOKUP
        return super().convert(value, param, ctx)


def pair_option_paths(pair: str, target_path, draft_path):
    """``(PairPaths, target, drafter)`` for ``--pair NAME``: the pair's target, and its drafter unless
    ``--draft`` names another (``--pair smollm2 --draft prompt-lookup``). ``--target`` with ``--pair``
    is refused: the pair's mask and tuned settings belong to its target."""
    from viasd_adapt.errors import ConfigError
    from viasd_adapt.models.registry import resolve_pair

    if target_path:
        raise ConfigError("give either --pair or --target, not both (--draft may replace the pair's drafter)")
    paths = resolve_pair(pair)
    return paths, paths.target, draft_path or paths.draft


chat_option = click.option(
    "--chat", type=click.Choice(CHAT_CHOICES), default="auto", show_default=True,
    help="Prompts through the tokenizer's chat template: auto (when it has one), on, or off (plain text).")


class FiniteFloat(click.FloatRange):
    """A finite float, optionally within bounds (as :class:`click.FloatRange`)."""

    name = "finite float"

    def convert(self, value, param, ctx):
        number = FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def finite(min: float | None = None, max: float | None = None, min_open: bool = False,
           max_open: bool = False) -> FiniteFloat:
    """The type of a float option: finite, and within ``[min, max]`` when given."""
    return FiniteFloat(min=min, max=max, min_open=min_open, max_open=max_open)


__all__ = ["DRAFT_HELP", "TARGET_HELP", "DraftPath", "FiniteFloat", "ModelPath", "chat_option", "finite", "pair_option_paths"]
