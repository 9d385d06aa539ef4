"""``viasd generate``: one completion from any framework, streamed as it is committed, each token's
tier visible.

What goes where, so that the answer can be piped: **stdout** gets the answer text only (styled by
tier with ``--show-tiers``, the default: colour in a terminal, marks otherwise; plain with
``--no-show-tiers``), written token by token as the framework commits it; **stderr** gets the
prompt (or the chat turn, or the source), the legend, notes and the closing summary line.

Frameworks come from the one registry, :mod:`viasd_adapt.frameworks`; each streams through
``RunRequest.on_tokens`` (decoder-only targets). Heavy imports (torch, transformers) happen inside
the command, so ``viasd --help`` stays fast.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from viasd_adapt.cli.options import (DRAFT_HELP, TARGET_HELP, DraftPath, ModelPath, adaptive_option, chat_option, choose_pair,
                                     finite, pair_option, placement_of, placement_options, preset_option, registered_pair)
from viasd_adapt.cli.framework_choice import FrameworkChoice
from viasd_adapt.cli.threads import threads_option, use_threads
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.settings import Mode, TierSettings

_DEFAULTS = TierSettings()

if TYPE_CHECKING:
    from viasd_adapt.cli.options import PairChoice
    from viasd_adapt.frameworks.planning import RunOptions


def _registered_pair(name: str | None):
    """The pair called ``name``, or the shipped demo pair (None when it is not installed)."""
    return registered_pair(name)


def run_options(mode, gamma, alpha1, alpha2, lenience, adaptive, preset, mask, device, dtype, device_map, seed,
                sampling) -> "RunOptions":
    """The run's flags as the planner takes them (:class:`~viasd_adapt.frameworks.planning.RunOptions`),
    each by its name: a first run without a mask runs untiered, a flag the run's mode does not read
    is refused."""
    from viasd_adapt.frameworks.planning import RunOptions

    return RunOptions(mode=mode, gamma=gamma, alpha1=alpha1, alpha2=alpha2, lenience=lenience, adaptive=adaptive,
                      preset=preset, mask=mask, device=device, dtype=dtype, device_map=device_map, seed=seed,
                      sampling=sampling, untiered_without_mask=True, refuse_unread_flags=True)


def pair_choice(pair: str | None, target: Path | None, draft: Path | None, eagle_head: Path | None) -> "PairChoice":
    """``--pair`` (or the shipped demo pair) or ``--target``/``--draft``, as the paths to load."""
    return choose_pair(pair, target, draft, eagle_head, demo_default=True, lookup=lambda name: _registered_pair(name))


def _tier_cycles(settings, metrics) -> list[str]:
    """``["tier on 12 of 40 cycles (adaptive)"]``: how many cycles a tiered mode ran its slim tier (all
    but the prefill's when it does not adapt; those the controller gave it when it does)."""
    if metrics is None or not settings.mode.uses_slim:
        return []
    return [f"tier on {metrics.tier_cycles} of {metrics.cycles} cycles" + (" (adaptive)" if settings.adapts else "")]


_PATH = click.Path(exists=True, path_type=Path)


@click.command()
@click.option("--framework", type=FrameworkChoice(), default="hf", show_default=True,
              help="ar = plain target decoding; hf = transformers assisted generation; engine = the tier's own SD loop; "
                   "pearl, eagle; lookup = stock transformers prompt lookup (no drafter model, no tier).")
@pair_option(default_help="the shipped demo pair")
@click.option("--target", type=ModelPath(), default=None, help=TARGET_HELP + " [default: the shipped demo pair]")
@click.option("--draft", type=DraftPath(), default=None, help=DRAFT_HELP + " [default: the pair's]")
@click.option("--eagle-head", type=_PATH, default=None, help="EAGLE head directory (--framework eagle).")
@click.option("--mask", type=click.Path(path_type=Path), default=None, help="Routing mask artifact (mask.json) [default: the pair's].")
@click.option("--mode", type=click.Choice([m.value for m in Mode]), default=None,
              help="Tier mode [default: the tuned choice beside the mask, else lossy; none for --framework ar and lookup]. "
                   "Only a tuned choice is held to the fidelity budget: lossy without one runs its default settings "
                   "with no budget check; lossless is exact.")
@click.option("--prompt", default="", help="Text to continue; for an encoder-decoder target, the source text.")
@click.option("--input-features", type=_PATH, default=None,
              help="Encoder input features (.npy or .pt, (mel, frames)) for a target that reads features (Whisper).")
@click.option("--max-new-tokens", type=int, default=64, show_default=True, help="Most tokens to generate (EOS stops earlier).")
@click.option("--temperature", type=finite(), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", type=finite(), default=1.0, show_default=True, help="Nucleus sampling mass (1 = off).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sampling.")
@preset_option
@click.option("--gamma", type=int, default=None, help=f"Draft block length [default: tuned.json's, else {_DEFAULTS.gamma}].")
@click.option("--alpha1", type=finite(), default=None,
              help=f"Gate-1 tolerance (lossy/audit) [default: tuned.json's, else {_DEFAULTS.alpha1}].")
@click.option("--alpha2", type=finite(), default=None,
              help=f"Gate-2 tolerance (lossy/audit) [default: tuned.json's, else {_DEFAULTS.alpha2}].")
@click.option("--lenience", type=finite(), default=None,
              help=f"q's tolerance in the lenient baseline mode [default: tuned.json's, else {_DEFAULTS.lenience}].")
@adaptive_option("Lossless and lossy: choose, cycle by cycle, between the slim tier and untiered verification "
                 "[default: the tuned choice's, else on]; --no-adaptive runs the tier on every cycle.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write tokens, text and metrics here.")
@click.option("--show-tiers/--no-show-tiers", default=True, show_default=True,
              help="Mark each token by the tier that committed it (colour, or \u2039\u203a/\u00ab\u00bb marks when not colouring); "
                   "--no-show-tiers writes the plain answer, for scripts.")
@click.option("--color/--no-color", "colour", default=None, help="Colour by tier [default: when stdout is a terminal].")
@chat_option
@threads_option
@placement_options
@click.option("--explain", is_flag=True, help="First print each setting, its value and where it came from (default, "
              "tuned.json, preset, flag), the mask and which framework the tuned settings were measured on; then generate.")
def generate(framework, pair, target, draft, eagle_head, mask, mode, prompt, input_features, max_new_tokens, temperature, top_p,
             seed, preset, gamma, alpha1, alpha2, lenience, adaptive, json_path, show_tiers, colour, chat, threads, device, dtype,
             device_map, explain) -> None:
    """Generate a completion, streamed as it is committed, and show which tier committed each token.

    The answer goes to stdout, everything else (prompt, legend, summary) to stderr: `viasd generate
    --no-show-tiers ... > answer.txt` keeps the answer alone."""
    from viasd_adapt.bench.display import metrics_summary, run_summary
    from viasd_adapt.checks import check_max_new_tokens
    from viasd_adapt.cli.run_options import given_inputs
    from viasd_adapt.core.sampling import SamplingConfig
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.planning import plan_run

    check_max_new_tokens(max_new_tokens)
    drafting_options = given_inputs(mode=mode, alpha1=alpha1, alpha2=alpha2, lenience=lenience, preset=preset, mask=mask,
                                    gamma=gamma, draft=draft, eagle_head=eagle_head, adaptive=adaptive)
    # an option the framework cannot honour is refused by name (the framework declares which: registry.Framework.ignores)
    frameworks.refuse_unhonoured([framework], drafting_options)
    if json_path is not None:
        from viasd_adapt.io import ensure_writable

        ensure_writable(json_path, "--json")  # before any model loads
    sampling = SamplingConfig.from_temperature(temperature, top_p)
    placement_of(device, dtype, device_map)  # CUDA asked without CUDA, a bad device map: refused before any load
    options = run_options(mode, gamma, alpha1, alpha2, lenience, adaptive, preset, mask, device, dtype, device_map, seed,
                          sampling)
    choice = pair_choice(pair, target, draft, eagle_head)
    # no framework typed and nothing asked that only drafting reads: the pair's tuned choice decides (ar: the target alone)
    follows_choice = not _given("framework") and not drafting_options
    run = plan_run(choice, options, None if follows_choice else framework)
    framework, spec = run.framework, run.spec
    for line in run.notes:
        _note(line)
    pair = run.pair
    colour = sys.stdout.isatty() if colour is None else colour
    if explain:
        for line in spec.explain():
            _note(line)
    from viasd_adapt.cli.first_run import NO_MASK_SOURCE, how_to_get_a_mask

    if spec.sources.get("mode") == NO_MASK_SOURCE:
        _note(f"note: {how_to_get_a_mask(choice.target, pair.draft_path or None)}")
    prompt_ids, features = _encode(pair, prompt, chat, input_features)
    use_threads(threads)
    screen = _Screen(pair, framework, colour, show_tiers, max_new_tokens)
    screen.heading(prompt or input_features, chat)
    request = run.request(prompt_ids, max_new_tokens, input_features=features,
                          on_tokens=screen.stream.push if screen.streams else None)
    start = time.perf_counter()
    result = frameworks.run(framework, pair, request)
    seconds = time.perf_counter() - start
    screen.finish(result)
    settings = request.settings
    fields = ([metrics_summary(result.metrics)] if result.metrics is not None else []) + _tier_cycles(settings, result.metrics)
    shown_mode = "stock" if frameworks.get(framework).runs_stock_only else settings.mode.value
    _note(run_summary(framework, shown_mode, len(result.tokens), seconds, fields))
    for line in result.notes:
        _note(f"note: {line}")
    if json_path is not None:
        paths = dict(target=choice.target, draft=pair.draft_path or None, mask=spec.mask_path, eagle_head=choice.eagle_head)
        record = _json_record(framework, settings, prompt, prompt_ids, result, pair.tokenizer, (temperature, top_p, seed),
                              paths, seconds)
        _note(f"wrote {record.save(json_path)}")


def _given(option: str) -> bool:
    """Whether ``option`` was typed (or set through the environment), not left at its default."""
    source = click.get_current_context().get_parameter_source(option)
    return source not in (None, click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)


def _note(line: str) -> None:
    """A line for people, on stderr (stdout is the answer's)."""
    click.echo(line, err=True)


def _encode(pair, prompt: str, chat: str, input_features: Path | None):
    """The prompt's ids (a chat prompt, or the source as the encoder reads it) and the encoder's
    input features (Whisper), refusing an empty prompt."""

    from viasd_adapt.model_kind import model_kind

    kind = model_kind(pair.target)
    features = None
    if input_features is not None:
        from viasd_adapt.frameworks.seq2seq import load_input_features

        if not kind.prompt_is_source:
            raise ConfigError("--input-features is for encoder-decoder targets that read features (Whisper)")
        features = load_input_features(input_features)
    prompt_ids = kind.encode_text(pair.tokenizer, prompt, chat)
    if not prompt_ids and features is None:
        raise ConfigError("the prompt is empty: pass --prompt with some text" + (" (the source), or --input-features"
                                                                                   if kind.prompt_is_source else ""))
    return prompt_ids, features


class _Screen:
    """What the user sees: the heading and legend on stderr, the answer streamed to stdout as it is
    committed (or printed when done, for a runner that does not stream), styled by tier."""

    def __init__(self, pair, framework: str, colour: bool, show_tiers: bool, max_new_tokens: int):
        from viasd_adapt.bench.display import TokenStream
        from viasd_adapt.model_kind import model_kind

        self.tokenizer, self.framework, self.colour = pair.tokenizer, framework, colour
        self.encoder_decoder = model_kind(pair.target).prompt_is_source
        from viasd_adapt.frameworks.registry import get

        self.tiered = show_tiers and not get(framework).runs_stock_only  # a stock run (prompt lookup) keeps no tiers
        self.streams = not self.encoder_decoder  # the encoder-decoder runners report their tokens at the end
        self.eos = pair.eos_token_ids if not self.encoder_decoder else ()
        self.stream = TokenStream(self.tokenizer, self.write, show_tiers=self.tiered, colour=colour, limit=max_new_tokens,
                                  eos=self.eos)

    def write(self, piece: str) -> None:
        click.echo(piece, nl=False, color=self.colour)
        sys.stdout.flush()

    def heading(self, shown, chat: str) -> None:
        from viasd_adapt.bench.display import legend
        from viasd_adapt.prompts.chat import uses_chat

        title = ("source:" if self.encoder_decoder else "chat turn (user):" if uses_chat(self.tokenizer, chat) else "prompt:")
        _note(click.style(title, bold=True) if self.colour else title)
        _note(str(shown))
        _note("")  # the answer starts on a line of its own
        if self.tiered:
            _note(legend(self.colour))
        if not self.streams:
            _note(f"note: {self.framework} on an encoder-decoder target does not stream; the answer is printed when it is done")

    def finish(self, result) -> None:
        """Closes the stream; prints the final output when the streamed text is not it."""
        from viasd_adapt.bench.display import TokenStream

        stream = self.stream
        stream.close()
        tiers = result.tiers or []
        if stream.tokens != result.tokens[: stream.count] or stream.count < len(result.tokens):
            if stream.count:  # cannot happen for a framework that streams what it commits; said, not hidden
                self.write("\n")
                _note(f"note: the streamed text ({stream.count} tokens) is not the final output; the final output follows")
            final = TokenStream(self.tokenizer, self.write, show_tiers=self.tiered, colour=self.colour, eos=self.eos)
            final.push(result.tokens, tiers if len(tiers) == len(result.tokens) else None)
            final.close()
        click.echo("")


def _json_record(framework: str, settings: TierSettings, prompt: str, prompt_ids: list[int], result, tokenizer,
                 sampling: tuple[float, float, int], paths: dict, seconds: float):
    """What ``--json`` writes (:class:`~viasd_adapt.config.generation.GenerationRecord`): the tokens,
    text and metrics of the run, and what it ran with."""
    from viasd_adapt.config.generation import GenerationRecord

    temperature, top_p, seed = sampling
    return GenerationRecord(
        framework=framework, mode=settings.mode.value, prompt=prompt, prompt_ids=prompt_ids, tokens=result.tokens,
        tiers=result.tiers or [], text=tokenizer.decode(result.tokens, skip_special_tokens=False),
        metrics=result.metrics.to_dict() if result.metrics is not None else None, settings=settings,
        sampling={"temperature": temperature, "top_p": top_p, "seed": seed},
        paths={k: (str(v) if v else None) for k, v in paths.items()}, seconds=seconds)
