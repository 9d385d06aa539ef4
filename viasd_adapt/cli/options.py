"""Option types shared by the commands.

Model paths (``--target``, ``--draft``): a model directory, a ``.gguf`` file, or (drafter only)
``prompt-lookup``; ``--chat``: how prompt text becomes ids (:mod:`viasd_adapt.prompts.chat`).

Floats: click's ``float`` and ``FloatRange`` accept ``nan`` and ``inf``: every comparison with NaN is false,
so ``FloatRange(min=0)`` lets ``nan`` through, and code that reads "not >= 0" as "no bound" turns a
typo into no bound at all (``viasd tune --max-regret nan`` once did). Every float option of the
CLI uses :func:`finite` instead, so NaN and infinities are refused by option name, before any
model is loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click
from click.types import FloatParamType

from viasd_adapt.config.placement_words import DEVICE_MAPS, DEVICE_PATTERN, DEVICE_WORDS, DTYPE_CHOICES
from viasd_adapt.config.resolve import PRESETS
from viasd_adapt.prompts.chat import CHAT_CHOICES
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


PAIR_HELP = "A pair name (viasd models list) or pair directory instead of --target/--draft"


def pair_option(extra_help: str = "", default_help: str = ""):
    """The ``--pair`` option of every command that loads a pair (generate, bench, tune, search):
    one name, one meaning. ``extra_help`` adds what the command does with the pair."""
    text = PAIR_HELP + (f"; {extra_help}" if extra_help else ".") + (f" [default: {default_help}]" if default_help else "")
    return click.option("--pair", "pair", default=None, help=text)


@dataclass(frozen=True)
class PairChoice:
    """What ``--pair`` (or ``--target``/``--draft``) resolved to: the paths a command loads."""

    paths: Any  # viasd_adapt.models.registry.PairPaths, or None without --pair
    target: Path | None
    draft: Path | str | None
    eagle_head: Path | None = None

    @property
    def mask(self) -> Path | None:
        """The pair's own ``mask.json`` (None without --pair, or when the pair has none)."""
        return self.paths.mask if self.paths is not None else None


def registered_pair(name: str | None):
    """The pair called ``name`` (a name or a pair directory), or the shipped demo pair when None
    (None when that is not installed). An unknown name raises, listing what exists."""
    from viasd_adapt.errors import ViasdError
    from viasd_adapt.models.registry import demo_pair_paths, resolve_pair

    if name is not None:
        return resolve_pair(name)
    try:
        return demo_pair_paths()
    except ViasdError:
        return None


def choose_pair(pair: str | None, target, draft, eagle_head=None, demo_default: bool = False,
                lookup: Callable[[str | None], Any] | None = None) -> PairChoice:
    """``--pair NAME`` (or, with ``demo_default`` and no ``--target``, the shipped demo pair) as paths:
    the pair's target, its drafter unless ``--draft`` names another (``--pair smollm2 --draft
    prompt-lookup``), its EAGLE head unless ``--eagle-head`` is given. ``--target`` with ``--pair`` is
    refused: the pair's mask and tuned settings belong to its target. ``lookup`` finds a pair by
    name (None: the demo pair); default :func:`registered_pair`."""
    from viasd_adapt.errors import ConfigError, ViasdError

    if pair is not None and target:
        raise ConfigError("give either --pair or --target, not both (--draft may replace the pair's drafter)")
    if pair is None and (target or not demo_default):
        return PairChoice(None, target, draft, eagle_head)
    paths = (lookup or registered_pair)(pair)
    if paths is None:
        raise ViasdError("no --target given and the shipped demo pair is not installed; pass --target and --draft")
    return PairChoice(paths, paths.target, draft or paths.draft, eagle_head if eagle_head is not None else paths.eagle_head)


def pair_dtype(choice: PairChoice, asked: str | None = None) -> str | None:
    """The dtype a run's weights load in: ``--dtype`` when it names one, else a ``--pair``'s (its
    ``pair.json``'s, the weights its mask was searched on; None: auto, float32 on the CPU)."""
    if asked not in (None, "auto"):
        return asked
    dtype = getattr(choice.paths, "dtype", "float32") if choice.paths is not None else "float32"
    return None if dtype == "float32" else dtype


class DeviceName(click.ParamType):
    """``--device``: auto, cpu, cuda or cuda:N, by its spelling; whether this machine has it is
    checked when the command runs (:func:`placement_of`), before any model loads."""

    name = "device"

    def convert(self, value, param, ctx):
        text = str(value).strip().lower()
        if not DEVICE_PATTERN.fullmatch(text):
            self.fail(f"{value!r} is not a device: use {DEVICE_WORDS}", param, ctx)
        return text


#: The three options of every command that loads a model (``--pair``/``--target``): one definition,
#: one meaning (:mod:`viasd_adapt.models.placement`); tests/cli/test_placement_options.py fails
#: for a command that lacks them.
PLACEMENT_OPTIONS = (
    click.option("--device", "device", type=DeviceName(), default="auto", show_default=True,
                 help=f"Where the models run: {DEVICE_WORDS} (auto: CUDA when available, else the CPU)."),
    click.option("--dtype", "dtype", type=click.Choice(DTYPE_CHOICES), default="auto", show_default=True,
                 help="The weights' dtype, as they load (no float32 copy on the way); auto: float32 on the CPU, the "
                      "checkpoint's own on a GPU (a --pair's: its pair.json's)."),
    click.option("--device-map", "device_map", type=click.Choice(DEVICE_MAPS), default=None,
                 help="Spread a target too large for one device over the GPUs, then the CPU, then the disk "
                      "(accelerate's big-model placement); not with --device cpu or cuda:N."),
)


def placement_options(function):
    """Adds :data:`PLACEMENT_OPTIONS` (``--device``, ``--dtype``, ``--device-map``) to a command."""
    for option in reversed(PLACEMENT_OPTIONS):
        function = option(function)
    return function


def placement_of(device: str = "auto", dtype: str | None = "auto", device_map: str | None = None):
    """The checked :class:`~viasd_adapt.models.placement.Placement` of the three options: CUDA asked
    without CUDA, a ``cuda:N`` this machine lacks or a device map beside one device fail here, in
    one line, before any model loads (imports torch: call it inside a command)."""
    from viasd_adapt.models.placement import placement

    return placement(device, dtype, device_map)


chat_option = click.option(
    "--chat", type=click.Choice(CHAT_CHOICES), default="auto", show_default=True,
    help="Prompts through the tokenizer's chat template: auto (when it has one), on, or off (plain text).")


def _preset_words() -> str:
    return "; ".join(f"{name}: {', '.join(f'{k}={v}' for k, v in values.items())}" for name, values in PRESETS.items())


#: ``--preset`` of ``viasd generate`` and ``viasd bench``: the resolver's preset layer
#: (:data:`viasd_adapt.config.resolve.PRESETS`), one name and one meaning in every command.
preset_option = click.option(
    "--preset", type=click.Choice(["default", *PRESETS]), default="default", show_default=True,
    help=f"Named tier thresholds over the tuned or default ones ({_preset_words()}); flags still win.")


#: ``--adaptive/--no-adaptive`` of ``viasd generate`` (the settings' ``adaptive``, a flag layer of the
#: resolver: unset, the tuned or default value stands), ``viasd bench`` and ``viasd tune`` (their
#: adaptive rows or points beside the fixed ones).
def adaptive_option(help_text: str, default: bool | None = None):
    return click.option("--adaptive/--no-adaptive", "adaptive", default=default, show_default=default is not None,
                        help=help_text)


class FiniteFloat(click.FloatRange):
    """A finite float, optionally within bounds (as :class:`click.FloatRange`)."""

    name = "finite float"

    def convert(self, value, param, ctx):
        number = FloatParamType.convert(self, value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        """The range as help shows it: nothing when unbounded (click's own text would read
        ``x<=None``), else click's wording (``x>=0.0``, ``0.0<=x<1.0``)."""
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


def finite(min: float | None = None, max: float | None = None, min_open: bool = False,
           max_open: bool = False) -> FiniteFloat:
    """The type of a float option: finite, and within ``[min, max]`` when given."""
    return FiniteFloat(min=min, max=max, min_open=min_open, max_open=max_open)


__all__ = ["DRAFT_HELP", "PAIR_HELP", "PLACEMENT_OPTIONS", "TARGET_HELP", "DeviceName", "DraftPath", "FiniteFloat", "ModelPath",
           "PairChoice", "adaptive_option", "chat_option", "choose_pair", "finite", "pair_dtype", "pair_option",
           "placement_of", "placement_options", "preset_option", "registered_pair"]
