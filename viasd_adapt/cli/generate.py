"""``viasd generate``: one completion from any framework, with each token's tier visible.

Frameworks come from the one registry, :mod:`viasd_adapt.frameworks`. Heavy imports (torch,
transformers) happen inside the command, so ``viasd --help`` stays fast.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from viasd_adapt.cli.options import (DRAFT_HELP, TARGET_HELP, DraftPath, ModelPath, adaptive_option, chat_option, choose_pair,
                                     finite, pair_option, preset_option, registered_pair)
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.settings import Mode
from viasd_adapt.engine.tier import check_spec_model

if TYPE_CHECKING:
    from viasd_adapt.cli.options import PairChoice
    from viasd_adapt.config.resolve import RunSpec


def _registered_pair(name: str | None):
    """The pair called ``name``, or the shipped demo pair (None when it is not installed)."""
    return registered_pair(name)


def resolve_run(framework: str, target: Path | None, draft: Path | None, mask: Path | None, eagle_head: Path | None,
                pair: str | None = None, preset: str = "default", **flags) -> tuple[RunSpec, PairChoice]:
    """``(RunSpec, PairChoice)``: the paths from ``--pair`` (or the demo pair), and the settings and
    mask from :func:`viasd_adapt.config.resolve.resolve_settings` (``preset``: ``--preset``; ``flags``:
    the tier settings given as options), which reads the pair's tuned.json once."""
    from viasd_adapt.config.resolve import resolve_settings

    choice = choose_pair(pair, target, draft, eagle_head, demo_default=True,
                         lookup=lambda name: _registered_pair(name))
    if framework not in ("ar", "eagle") and choice.draft is None:
        raise ConfigError(f"--framework {framework} needs --draft")
    spec = resolve_settings(mask, pair_mask=choice.mask if mask is None else None, framework=framework, preset=preset,
                            flags=flags)
    if spec.settings.mode.uses_slim and spec.mask_path is None:
        raise ConfigError(f"--mode {spec.settings.mode.value} needs --mask (a mask.json searched for this target)")
    return spec, choice


def _tier_cycles(settings, metrics) -> str:
    """``, tier on 12 of 40 cycles (adaptive)``: how many cycles a tiered mode ran its slim tier (all
    but the prefill's when it does not adapt; those the controller gave it when it does)."""
    if metrics is None or not settings.mode.uses_slim:
        return ""
    return f", tier on {metrics.tier_cycles} of {metrics.cycles} cycles" + (" (adaptive)" if settings.adapts else "")


_PATH = click.Path(exists=True, path_type=Path)


@click.command()
@click.option("--framework", type=click.Choice(["ar", "engine", "hf", "pearl", "eagle"]), default="hf", show_default=True,
              help="ar = plain target decoding; hf = transformers assisted generation; engine = the tier's own SD loop.")
@pair_option(default_help="the shipped demo pair")
@click.option("--target", type=ModelPath(), default=None, help=TARGET_HELP + " [default: the shipped demo pair]")
@click.option("--draft", type=DraftPath(), default=None, help=DRAFT_HELP + " [default: the pair's]")
@click.option("--eagle-head", type=_PATH, default=None, help="EAGLE head directory (--framework eagle).")
@click.option("--mask", type=click.Path(path_type=Path), default=None, help="Routing mask artifact (mask.json) [default: the demo pair's].")
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=None,
              help="Tier mode [default: the tuned choice beside the mask, else lossless; none for --framework ar].")
@click.option("--prompt", default="", help="Text to continue; for an encoder-decoder target, the source text.")
@click.option("--input-features", type=_PATH, default=None,
              help="Encoder input features (.npy or .pt, (mel, frames)) for a target that reads features (Whisper).")
@click.option("--max-new-tokens", type=int, default=64, show_default=True)
@click.option("--temperature", type=finite(), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=finite(), default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@preset_option
@click.option("--gamma", type=int, default=None, help="Draft block length.")
@click.option("--alpha1", type=finite(), default=None, help="Gate-1 tolerance (lossy/audit).")
@click.option("--alpha2", type=finite(), default=None, help="Gate-2 tolerance (lossy/audit).")
@click.option("--lenience", type=finite(), default=None, help="q's tolerance in the lenient baseline mode.")
@adaptive_option("Lossless and lossy: choose, cycle by cycle, between the slim tier and untiered verification "
                 "[default: the tuned choice's, else on]; --no-adaptive runs the tier on every cycle.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write tokens, text and metrics here.")
@click.option("--color/--no-color", "colour", default=None, help="Colour by tier [default: when stdout is a terminal].")
@chat_option
@click.option("--explain", is_flag=True, help="First print each setting, its value and where it came from (default, "
              "tuned.json, preset, flag), the mask and which framework the tuned settings were measured on; then generate.")
def generate(framework, pair, target, draft, eagle_head, mask, mode, prompt, input_features, max_new_tokens, temperature, top_p,
             seed, preset, gamma, alpha1, alpha2, lenience, adaptive, json_path, colour, chat, explain) -> None:
    """Generate a completion and show which tier committed each token."""
    import torch

    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.checks import check_max_new_tokens
    from viasd_adapt.bench.display import legend, metrics_summary, render_tiers, token_pieces
    from viasd_adapt.io import write_json
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.core.sampling import SamplingConfig

    check_max_new_tokens(max_new_tokens)
    if json_path is not None:
        from viasd_adapt.io import ensure_writable

        ensure_writable(json_path, "--json")  # before any model loads
    sampling = SamplingConfig.from_temperature(temperature, top_p)
    spec, choice = resolve_run(framework, target, draft, mask, eagle_head, pair, preset, mode=mode, gamma=gamma, alpha1=alpha1,
                               alpha2=alpha2, lenience=lenience, adaptive=adaptive)
    target, draft, mask, eagle_head = choice.target, choice.draft, spec.mask_path, choice.eagle_head
    settings = spec.settings
    if explain:
        for line in spec.explain():
            click.echo(line)
    pair = load_pair(target, draft if framework != "ar" else None, mask, need_mask=settings.mode.uses_slim,
                     device="cpu", eagle_head=eagle_head, ratio=settings.ratio, read_masks=spec.masks)
    check_spec_model(spec, pair.target)  # its settings were applied above: refused for another model, like bench
    from viasd_adapt.frameworks.baselines import TUNED_KEY

    pair.loaded[TUNED_KEY] = spec.tuned  # the adaptive tier's prices and priors: the file already read
    from viasd_adapt.model_kind import model_kind

    kind = model_kind(pair.target)
    encoder_decoder = kind.prompt_is_source
    features = None
    if input_features is not None:
        from viasd_adapt.frameworks.seq2seq import load_input_features

        if not encoder_decoder:
            raise ConfigError("--input-features is for encoder-decoder targets that read features (Whisper)")
        features = load_input_features(input_features)
    prompt_ids = kind.encode_text(pair.tokenizer, prompt, chat)  # a chat prompt, or the source as the encoder reads it
    if not prompt_ids and features is None:
        raise ConfigError("the prompt is empty: pass --prompt with some text" + (" (the source), or --input-features"
                                                                                   if encoder_decoder else ""))
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    request = RunRequest.tiered(prompt_ids, max_new_tokens, settings, sampling=sampling, seed=seed, input_features=features)
    start = time.perf_counter()
    result = frameworks.run(framework, pair, request)
    seconds = time.perf_counter() - start
    tokenizer = pair.tokenizer
    text = tokenizer.decode(result.tokens, skip_special_tokens=False)
    colour = sys.stdout.isatty() if colour is None else colour
    tiers = result.tiers or []
    click.echo(f"[{framework} / {settings.mode.value}] {len(result.tokens)} tokens in {seconds:.2f}s"
               + _tier_cycles(settings, result.metrics))
    shown = f"source: {prompt or input_features}\noutput: " if encoder_decoder else prompt
    click.echo(click.style(shown, dim=True) if colour else shown, nl=False, color=colour)
    click.echo(render_tiers(token_pieces(tokenizer, result.tokens), tiers, colour), color=colour)
    click.echo(legend(colour), color=colour)
    if result.metrics is not None:
        click.echo(metrics_summary(result.metrics))
    for note in result.notes:
        click.echo(f"note: {note}")
    if json_path is not None:
        data = {
            "framework": framework,
            "mode": settings.mode.value,
            "prompt": prompt,
            "prompt_ids": prompt_ids,
            "tokens": result.tokens,
            "tiers": tiers,
            "text": text,
            "metrics": result.metrics.to_dict() if result.metrics is not None else None,
            "settings": settings.to_dict(),
            "sampling": {"temperature": temperature, "top_p": top_p, "seed": seed},
            "paths": {k: (str(v) if v else None) for k, v in
                      dict(target=target, draft=draft, mask=mask, eagle_head=eagle_head).items()},
            "seconds": seconds,
        }
        click.echo(f"wrote {write_json(json_path, data)}")
