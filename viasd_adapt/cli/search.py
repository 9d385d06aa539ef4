"""``viasd search``: find the slim verifier's routing mask for a target/drafter pair (guided search or DIMR).

Every check that can fail on user input (ratio, output paths, calibration file, vocabularies)
runs before the search starts, so a typo never costs a search's worth of CPU.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from viasd_adapt.cli.options import chat_option, choose_pair, finite, pair_dtype, pair_option, placement_of, placement_options
from viasd_adapt.cli.threads import threads_option

from viasd_adapt.errors import ConfigError
from viasd_adapt.models.registry import PROMPT_LOOKUP
from viasd_adapt.io import ensure_writable, relative_name
from viasd_adapt.search.config import CONTINUATIONS, DEFAULTS, DIMR_DEFAULT_STEPS, OBJECTIVES, PRICES, SPACES, STRATEGIES

#: Option defaults come from the one search config (``viasd tune`` starts from the same object).
_CAL = DEFAULTS.calibration


def check_ratio(ratio: float) -> float:
    if not 0.0 < ratio < 1.0:
        raise ConfigError(f"--ratio (fraction of decoder layers skipped) must be in (0, 1), got {ratio}")
    return ratio


def _load_model(path: Path, role: str, target=None, where=None):
    """A causal LM or an encoder-decoder model (T5, BART, Marian, Whisper) where ``where`` (a
    :class:`~viasd_adapt.models.placement.Placement`; None: float32 on the CPU) places it; ``target``
    assembles a drafter that shares its target's embedding (the smollm2 drafter)."""
    import torch

    from viasd_adapt.models.loading import load_model

    return load_model(path, torch.device("cpu"), role, target=target, placement=where)


def _load_tokenizer(path: Path, role: str, required: bool, dtype: str | None = None):
    from viasd_adapt.errors import ViasdError
    from viasd_adapt.models.loading import load_tokenizer

    try:
        return load_tokenizer(path, dtype=dtype)  # a model folder or a .gguf file (its tokenizer comes from the cache)
    except (ViasdError, OSError, ValueError, TypeError) as err:
        if required:
            raise ConfigError(f"no usable tokenizer with the {role} model at {path}: {err}") from None
        return None


@click.command()
@click.option("--target", "target_path", type=click.Path(path_type=Path), default=None,
              help="Target (full verifier q) checkpoint directory.")
@click.option("--draft", "draft_path", type=click.Path(path_type=Path), default=None,
              help="Drafter (p) checkpoint directory, same tokenizer as the target.")
@pair_option()
@click.option("--ratio", type=finite(), default=DEFAULTS.ratio, show_default=True,
              help="--space ratio: fraction r of decoder layers skipped, exactly round(r*L).")
@click.option("--space", type=click.Choice(SPACES), default=DEFAULTS.space, show_default=True,
              help="ratio: masks with exactly round(r*L) skipped layers (the paper); budget: any mask whose price "
                   "(--price) is within its bound: --cycle-cost for cycle (the default), --slim-cost for marginal.")
@click.option("--slim-cost", type=finite(0.0, 1.0, max_open=True), default=DEFAULTS.slim_cost, show_default=True,
              help="--space budget with --price marginal: the most a mask may cost, as a fraction of the target's layers.")
@click.option("--strategy", type=click.Choice(STRATEGIES), default=DEFAULTS.strategy, show_default=True,
              help="guided: per-layer probes, structured warm starts, swap trust region ranked by an additive "
                   "surrogate + GP (viasd_adapt/search/guided.py); dimr: random masks + a BoTorch proposal every --bo-every steps.")
@click.option("--steps", type=click.IntRange(min=0), default=DEFAULTS.steps,
              help="S: most evaluations, guided probes included [default: 0 = L + 1.5 L + 15 for guided (90 at L = 30), "
                   f"{DIMR_DEFAULT_STEPS} for dimr].")
@click.option("--price", type=click.Choice(PRICES), default=DEFAULTS.price, show_default=True,
              help="--space budget: cycle = slim layers + --escalation-rate x layers of q resumed at s1, at most --cycle-cost "
                   "of a full pass; marginal = retained layers from s1 on, at most --slim-cost (prices only cycles where q runs).")
@click.option("--escalation-rate", type=finite(0.0, 1.0), default=DEFAULTS.escalation_rate, show_default=True,
              help="--price cycle: expected share of cycles that call q (the artifact reports each mask's estimate).")
@click.option("--cycle-cost", type=finite(0.0, 2.0, min_open=True), default=DEFAULTS.cycle_cost, show_default=True,
              help="--price cycle: the most a verification cycle may cost, as a fraction of a full target pass.")
@click.option("--window-cache", "window_cache_path", type=click.Path(path_type=Path), default=None,
              help="The target's greedy calibration windows, reused while target, prompts and settings are unchanged "
                   "[default: <out>.windows.pt beside the mask].")
@click.option("--no-window-cache", is_flag=True, help="Regenerate the calibration windows and write no cache.")
@click.option("--objective", type=click.Choice(OBJECTIVES), default=DEFAULTS.objective, show_default=True,
              help="margin: the log-margin of u's greedy top-1 agreement with q; routed: C(u||p) + C(q||u) (the paper); "
                   "q-only: C(q||u); auto: margin (on SmolLM2 the routed cost picks masks that agree with q less than "
                   "random masks do; docs/results.md, mask search).")
@click.option("--bo-every", "bo_every", type=int, default=DEFAULTS.bo_every, show_default=True,
              help="theta: a BoTorch proposal every theta steps (0 = random search only).")
@click.option("--patience", type=int, default=DEFAULTS.patience, show_default=True,
              help="P: stop when the best mask is unchanged for P steps (0 = never).")
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True, help="Seeds the search and the random baseline.")
@click.option("--calib", "calib_file", type=click.Path(path_type=Path), default=None,
              help="Calibration prompts: one per line or a JSON list, its last --heldout-prompts held out for the "
                   "agreement report; or spec-bench[:TASK,...] [default: Spec-Bench's calibration split for a chat "
                   "target, else held-out stdlib snippets].")
@click.option("--calib-pairs", "calib_pairs", type=click.Path(path_type=Path), default=None,
              help="Encoder-decoder targets: source -> target pairs (JSONL/JSON {source, target}, or TSV); "
                   "the last --heldout-prompts pairs are held out for the agreement report.")
@click.option("--calib-continuation", type=click.Choice(CONTINUATIONS), default=_CAL.continuation,
              show_default=True, help="Encoder-decoder windows: the target's greedy output, or the pairs' targets.")
@click.option("--calib-prompts", type=click.IntRange(min=1), default=_CAL.n_calibration, show_default=True,
              help="Stdlib snippets or Spec-Bench questions calibrated on (a --calib file gives all its prompts but "
                   "the held-out ones).")
@click.option("--heldout-prompts", type=click.IntRange(min=0), default=_CAL.n_heldout, show_default=True,
              help="Held-out prompts for the agreement report, of the same kind as the calibration prompts (not given: "
                   "a --calib file with fewer prompts holds out a quarter of them).")
@chat_option
@click.option("--new-tokens", type=click.IntRange(min=1), default=_CAL.new_tokens, show_default=True,
              help="Target's greedy tokens per calibration prompt.")
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=_CAL.max_prompt_tokens, show_default=True,
              help="Calibration prompts are cut to their first N tokens (context; not scored).")
@click.option("--out", "out_path", type=click.Path(path_type=Path), default=Path("mask.json"), show_default=True,
              help="Where the mask artifact (JSON) is written; an existing file needs --force.")
@click.option("--force", is_flag=True, help="Overwrite an existing --out (and --plot) file.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None,
              help="Convergence PNG [default: <out>-convergence.png].")
@click.option("--compare-random", "compare_random", type=int, default=DEFAULTS.compare_random, show_default=True,
              help="Also score K seeded random masks at the same r and record them in the report.")
@threads_option
@placement_options
@click.option("--no-progress", is_flag=True, help="Hide the progress bar.")
def search(target_path, draft_path, pair, ratio, space, slim_cost, strategy, steps, price, escalation_rate, cycle_cost,
           window_cache_path, no_window_cache, objective, bo_every, patience, seed, calib_file,
           calib_pairs, calib_continuation, calib_prompts, heldout_prompts, chat, new_tokens, prompt_tokens, out_path,
           force, plot_path, compare_random, threads, device, dtype, device_map, no_progress) -> None:
    """Search the routing mask of the slim verifier: the guided search by default (probes, warm starts,
    a trust region ranked with a BoTorch GP), or DIMR (--strategy dimr: random masks + BoTorch)."""
    started = time.perf_counter()
    check_ratio(ratio)
    choice = choose_pair(pair, target_path, draft_path)  # the --pair handling every command shares
    target_path, draft_path = choice.target, choice.draft
    if target_path is None or draft_path is None:
        raise ConfigError("both --target and --draft are required (or --pair)")
    if compare_random < 0:
        raise ConfigError(f"--compare-random must be >= 0, got {compare_random}")
    plot_path = plot_path or out_path.with_name(out_path.stem + "-convergence.png")
    ensure_writable(out_path, "--out", force)
    ensure_writable(plot_path, "--plot", force)
    if not no_window_cache:  # read, then rewritten after the search: a folder or a read-only place fails now
        from viasd_adapt.search.decoder_windows import window_cache_path as default_cache_path

        window_cache_path = ensure_writable(window_cache_path or default_cache_path(out_path), "--window-cache")

    config = _search_config(ratio=ratio, space=space, slim_cost=slim_cost, price=price, escalation_rate=escalation_rate,
                            cycle_cost=cycle_cost, strategy=strategy, steps=steps, bo_every=bo_every, patience=patience,
                            seed=seed, objective=objective, compare_random=compare_random, calib_file=calib_file,
                            calib_prompts=calib_prompts, heldout_prompts=heldout_prompts, new_tokens=new_tokens,
                            prompt_tokens=prompt_tokens, calib_pairs=calib_pairs,
                            calib_continuation=calib_continuation, chat=chat)
    from viasd_adapt.search.prompt_ids import check_prompt_sources

    check_prompt_sources(config)  # fail fast on an empty, unreadable or too short prompts file
    where = placement_of(device, pair_dtype(choice, dtype), device_map)  # refused before any load

    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    target, target_tok, draft, draft_tok, prompt_lookup = _search_models(Path(target_path), str(draft_path), chat, where)

    from tqdm import tqdm

    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.checks import check_drafter_pair
    from viasd_adapt.search.decoder_windows import WindowCache
    from viasd_adapt.search.pipeline import search_pair
    from viasd_adapt.search.plot import plot_convergence
    from viasd_adapt.search.report import ReportInput, describe

    check_drafter_pair(target, draft, target_tok, draft_tok)
    total_steps = config.total_steps(find_decoder_stack(target).num_layers)
    window_cache = None if no_window_cache else WindowCache(window_cache_path, say=lambda m: click.echo(m, err=True))
    bars = []  # created at the first step, so that calibration time does not count as a step

    def on_step(evaluation, best):
        if not bars:
            bars.append(tqdm(total=total_steps, desc=f"{strategy} search", unit="mask", disable=no_progress, leave=False))
        bar = bars[0]
        bar.update(1)
        bar.set_postfix(step=evaluation.step, best=f"{best:.3f}", kind=evaluation.kind)

    # Relative to the mask file (or just the folder name): artifacts hold no machine paths.
    info = ReportInput(target_name=relative_name(target_path, out_path.parent),
                       draft_name=relative_name(draft_path, out_path.parent), out=out_path, started=started)
    try:
        outcome = search_pair(target, draft, target_tok, config, prompt_lookup=prompt_lookup, window_cache=window_cache,
                              on_step=on_step, info=info, say=None if no_progress else (lambda m: click.echo(m, err=True)))
    finally:
        for bar in bars:
            bar.close()
    described = (f"r={ratio}" if space == "ratio" else f"cycle cost <= {cycle_cost}" if price == "cycle"
                 else f"slim cost <= {slim_cost}")
    plot_convergence(outcome.result, plot_path, outcome.random_costs,
                     title=f"{strategy} search on {Path(target_path).parent.name}/{Path(target_path).name}: {described}, seed {seed}")
    for line in describe(outcome):
        click.echo(line)
    click.echo(f"mask -> {out_path}; plot -> {plot_path}")
    if window_cache is not None:
        window_cache.save()  # last: the mask and the plot are written whatever happens to the cache


def _search_config(*, calib_file, calib_prompts, heldout_prompts, new_tokens, prompt_tokens, calib_pairs,
                   calib_continuation, chat, **search):
    """The search's :class:`SearchConfig` from the command's options; a small ``--calib`` file holds
    out what it can (unless ``--heldout-prompts`` was given), and says so."""
    from click.core import ParameterSource

    from viasd_adapt.search.config import CalibrationConfig, SearchConfig

    given_heldout = click.get_current_context().get_parameter_source("heldout_prompts") != ParameterSource.DEFAULT
    calibration = CalibrationConfig(calib_file=calib_file, n_calibration=calib_prompts, n_heldout=heldout_prompts,
                                    new_tokens=new_tokens, max_prompt_tokens=prompt_tokens, pairs_file=calib_pairs,
                                    continuation=calib_continuation, chat=chat)
    config = SearchConfig(**search, calibration=calibration)
    if not given_heldout:
        from viasd_adapt.search.prompt_ids import fit_heldout

        config, fitted = fit_heldout(config)
        if fitted:
            click.echo(f"note: {fitted}", err=True)
    return config


def _search_models(target_path: Path, draft_path: str, chat: str, where=None):
    """``(target, its tokenizer, drafter, its tokenizer or None, prompt_lookup)``. ``--chat on``
    without a chat template fails before the drafter loads; prompt lookup is scored through
    :func:`~viasd_adapt.search.pipeline.prompt_lookup_stand_in`."""
    from viasd_adapt.prompts.chat import uses_chat
    from viasd_adapt.search.pipeline import prompt_lookup_stand_in

    from dataclasses import replace

    from viasd_adapt.models.loading import gguf_dtype
    from viasd_adapt.models.placement import Placement, input_device

    where = where or Placement()
    target = _load_model(target_path, "target", where=where)
    target_tok = _load_tokenizer(target_path, "target", required=True, dtype=gguf_dtype(where))
    uses_chat(target_tok, chat)
    if draft_path == PROMPT_LOOKUP:
        return target, target_tok, prompt_lookup_stand_in(target), None, True
    # the drafter on the target's (first) device, whole
    draft = _load_model(Path(draft_path), "draft", target=target,
                        where=replace(where, device=input_device(target), device_map=None, max_memory=None))
    return target, target_tok, draft, _load_tokenizer(Path(draft_path), "draft", required=False), False
