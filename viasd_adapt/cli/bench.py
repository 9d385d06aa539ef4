"""``viasd bench``: the autoregressive target, each framework untiered, the lenient baseline and
each tier mode, on the same prompts and seeds, interleaved and repeated; cost and fidelity
tables, a verdict, JSON and a plot.

Heavy imports happen inside the command so ``viasd --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import click

from viasd_adapt.cli.threads import threads_option
from viasd_adapt.cli.options import (DRAFT_HELP, PLACEMENT_OPTIONS, pair_dtype, TARGET_HELP, DraftPath, ModelPath, adaptive_option,
                                     chat_option, choose_pair, finite, pair_option, placement_of, preset_option)
from viasd_adapt.prompts.spec_bench import is_spec_bench


class PromptsSource(click.Path):
    """``--prompts``: ``spec-bench[:names]``, or a prompts file."""

    name = "prompts"

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value, param, ctx):
        if is_spec_bench(value):
            from viasd_adapt.prompts.spec_bench import parse_categories

            parse_categories(value)  # an unknown category fails before any model loads
            return value
        return super().convert(value, param, ctx)


DEFAULT_FRAMEWORKS = "hf,pearl"
DEFAULT_MODES = "none,lenient,lossless,lossy,audit"
#: The default modes of a target with no mask (viasd_adapt.cli.first_run).
UNTIERED_MODES = "none,lenient"


def bench_options(function):
    """The options of ``viasd bench``; their names are the fields of
    :class:`viasd_adapt.bench.session.BenchConfig`."""
    options = [
        click.option("--mask", "mask_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Mask artifact, as viasd search writes it [default: mask.json beside the target directory, else a "
                          "labelled fallback mask]."),
        click.option("--prompts", "prompts_file", type=PromptsSource(), default=None,
                     help="spec-bench[:TASK,...] (Spec-Bench questions, bench split; tasks: mt_bench, translation, "
                          "summarization, qa, math_reasoning, rag, or a raw category), or a file: JSON list of prompt "
                          "strings, or one prompt per line [default: held-out stdlib snippets]."),
        click.option("--per-category", type=click.IntRange(min=1), default=None,
                     help="With --prompts spec-bench: questions per task [default: 2]."),
        click.option("--num-prompts", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Number of held-out prompts when --prompts is not given."),
        click.option("--max-new-tokens", type=click.IntRange(min=1), default=64, show_default=True,
                     help="Tokens generated per prompt (a cap: Spec-Bench's paper uses 1024; EOS stops only Spec-Bench rows)."),
        click.option("--frameworks", default=DEFAULT_FRAMEWORKS, show_default=True,
                     help="Comma-separated: hf, pearl, eagle, engine (the tier's own classic SD loop), lookup (stock HF prompt lookup, a baseline)."),
        click.option("--modes", default=DEFAULT_MODES, show_default=True,
                     help="Comma-separated tier modes (none is always run); lossless and lossy run as a default run does "
                          "(the adaptive tier), lossless-fixed and lossy-fixed with the tier on every cycle."),
        adaptive_option("Lossless and lossy rows run the adaptive tier, as a default run does; --no-adaptive runs "
                        "them with the tier on every cycle (the lossless-fixed and lossy-fixed rows only), as "
                        "`viasd generate --no-adaptive` does.", default=True),
        click.option("--fixed-twins/--no-fixed-twins", "fixed_twins", default=True, show_default=True,
                     help="Beside each adaptive lossless and lossy row, its fixed twin (lossless-fixed, lossy-fixed): "
                          "the tier on every cycle."),
        click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Interleaved repeats; medians are reported."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Base seed of sampling (--temperature > 0; each prompt and repeat draws from a seed derived "
                          "from it); greedy output does not depend on it."),
        click.option("--temperature", type=finite(min=0.0), default=0.0, show_default=True, help="0 = greedy."),
        preset_option,
        click.option("--alpha1", type=finite(), default=None, help="Override gate-1 tolerance."),
        click.option("--alpha2", type=finite(), default=None, help="Override gate-2 tolerance."),
        click.option("--lenience", type=finite(), default=None, help="Override the lenient baseline's tolerance a."),
        click.option("--gamma", type=click.IntRange(min=1), default=None, help="Draft block length [default: tuned.json's, else 5]."),
        click.option("--task-prompts", type=click.IntRange(min=0), default=32, show_default=True,
                     help="Held-out next-line examples for the task score (0 = skip)."),
        click.option("--max-ll-drop", type=finite(min=0.0), default=0.02, show_default=True,
                     help="Fidelity budget of the verdict (target log-likelihood drop, nats/token)."),
        click.option("--max-regret", type=finite(min=0.0), default=0.02, show_default=True,
                     help="... and its regret bound (nats/token the target preferred its own choice by)."),
        click.option("--max-overrule", type=finite(min=0.0, max=1.0), default=None,
                     help="Also cap the overrule rate (share of tokens q would overrule), as viasd tune --max-overrule."),
        *PLACEMENT_OPTIONS,
        threads_option,
        click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write the rows as JSON."),
        click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a PNG."),
        chat_option,
        click.option("--costs", default=None, help="Also price the measured pass counts with another machine's forward costs "
                     "(a cost file, or a shipped one: h200-llama2-7b, h200-llama2-13b) and print the projected verdict."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


#: Printed when ``viasd bench --no-adaptive`` is given: the flag had another meaning in this command before.
NO_ADAPTIVE_NOTICE = ("note: `viasd bench --no-adaptive` runs lossless and lossy with the tier on every cycle (their "
                      "-fixed rows only), as it does in `viasd generate` and `viasd tune`; it used to leave out the "
                      "fixed rows instead, which is now --no-fixed-twins")


@click.command()
@click.option("--target", "target_path", type=ModelPath(), default=None, help=TARGET_HELP)
@click.option("--draft", "draft_path", type=DraftPath(), default=None, help=DRAFT_HELP)
@pair_option("its mask (the one its tuned choice was measured with) and eagle_head/ are used unless --mask/--eagle-head "
             "are given")
@click.option("--eagle-head", type=click.Path(path_type=Path), default=None, help="EAGLE draft head (for the eagle rows).")
@bench_options
def bench(target_path, draft_path, pair, eagle_head, **options) -> None:
    """Benchmark the target alone, each framework untiered, the lenient baseline and each tier mode."""
    from viasd_adapt.bench.session import BenchConfig, run_bench_session
    from viasd_adapt.errors import ConfigError

    from viasd_adapt.bench.session import split_list
    from viasd_adapt.cli.run_options import given_inputs
    from viasd_adapt.frameworks.registry import refuse_unhonoured

    # an option that none of --frameworks can honour is refused by name (the ar row runs whatever is given)
    refuse_unhonoured(split_list(options["frameworks"]), given_inputs(
        eagle_head=eagle_head, mask=options["mask_path"], alpha1=options["alpha1"], alpha2=options["alpha2"],
        lenience=options["lenience"], preset=options["preset"], gamma=options["gamma"]), chosen_by="--frameworks")
    choice = choose_pair(pair, target_path, draft_path, eagle_head)
    if choice.paths is None and not (choice.target and choice.draft):
        raise ConfigError("give --target and --draft (model directories), or --pair NAME")
    options["dtype"] = pair_dtype(choice, options["dtype"])  # --dtype, else the pair's own
    placement_of(options["device"], options["dtype"], options["device_map"])  # refused before any load
    # The pair's mask is resolved with its tuned.json, read once (viasd_adapt.config.resolve.resolve_settings).
    if options["mask_path"] is None and choice.mask is None and options["modes"] == DEFAULT_MODES \
            and not (Path(choice.target).expanduser().parent / "mask.json").is_file():
        from viasd_adapt.cli.first_run import how_to_get_a_mask

        options["modes"] = UNTIERED_MODES  # a first run on the user's own target: the modes that need no mask
        click.echo(f"note: {how_to_get_a_mask(choice.target, choice.draft)}; benching modes {UNTIERED_MODES}")
    if not options["adaptive"]:  # the flag's meaning changed: say so while it reads as the old one to some
        click.echo(NO_ADAPTIVE_NOTICE, err=True)
    config = BenchConfig(choice.target, choice.draft, eagle_head=choice.eagle_head, pair_mask=choice.mask, **options)
    run_bench_session(config, echo=click.echo)
