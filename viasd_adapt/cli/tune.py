"""``viasd tune``: the fastest setting that meets a fidelity budget, written beside the mask.

Heavy imports happen inside the command so ``viasd --help`` stays fast.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import click

from viasd_adapt.cli.options import (DRAFT_HELP, TARGET_HELP, DraftPath, ModelPath, adaptive_option, chat_option, choose_pair,
                                     finite, pair_option, placement_of, placement_options)
from viasd_adapt.cli.threads import threads_option
from viasd_adapt.routing.mask import check_tuned_model

#: The clock a ``--minutes`` budget is kept on (a test swaps in a fake one, scoped).
CLOCK = time.perf_counter


def _floats(value: str, option: str = "") -> tuple[float, ...]:
    """Comma-separated finite numbers of the list option ``option`` (named in any error)."""
    try:
        numbers = tuple(float(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"expected comma-separated numbers, got {value!r}", param_hint=option or None) from None
    if not all(math.isfinite(number) for number in numbers):  # "nan" parses; it is no tolerance or ratio
        raise click.BadParameter(f"expected comma-separated finite numbers, got {value!r}", param_hint=option or None)
    return numbers


@click.command()
@pair_option("its mask.json is used unless --mask is given")
@click.option("--target", "target_path", type=ModelPath(), default=None, help=TARGET_HELP)
@click.option("--draft", "draft_path", type=DraftPath(), default=None, help=DRAFT_HELP)
@click.option("--mask", "mask_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The pair's mask, as viasd search writes it [default: mask.json beside the target directory].")
@click.option("--ratios", default="", help="Also search one mask per skip ratio, e.g. 0.3,0.6, with a short DIMR search (random masks + BoTorch, "
              "--search-steps evaluations; viasd search runs the guided search) [default: only the pair's mask].")
@click.option("--search-steps", type=click.IntRange(min=4), default=40, show_default=True, help="Most evaluations of each --ratios search.")
@click.option("--exits", default="", help="Also try early-exit masks keeping the first k layers, e.g. 6,8,10 "
              "(for targets trained for early exit; with a shared prefix they cost only their own layers).")
@click.option("--alpha1", "alpha1_values", default="0,0.3,0.5,0.8", show_default=True, help="Gate-1 tolerances to sweep (0.5: the paper).")
@click.option("--alpha2", "alpha2_values", default="0,0.3,0.6", show_default=True, help="Gate-2 tolerances to sweep (0.3: the paper).")
@click.option("--lenience", "lenience_values", default="0.2,0.4,0.6,0.8", show_default=True,
              help="Tolerances of the lenient baseline to sweep.")
@click.option("--greedy-gates", default="proposer,top", show_default=True,
              help="Greedy gate readings to sweep (proposer = the paper's, top = against the verifier's top token).")
@click.option("--gamma", type=click.IntRange(min=1), default=5, show_default=True, help="Draft block length.")
@click.option("--max-ll-drop", type=finite(), default=0.02, show_default=True,
              help="Fidelity budget: most target log-likelihood drop per token (nats) from the target's own output.")
@click.option("--max-overrule", type=finite(), default=None, help="Also cap the overrule rate (share of tokens q would overrule).")
@click.option("--max-regret", type=finite(), default=0.02, show_default=True,
              help="Most regret per token (nats by which the target preferred its own choice, teacher-forced); "
                   "guards the LL drop, which degenerate high-likelihood text can game. A negative value drops the bound.")
@click.option("--reuse", "reuse_path", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Judge the points of an earlier --json file under this budget instead of measuring again.")
@click.option("--retime", is_flag=True, help="With --reuse: time the single forwards again and reprice every point "
              "(the sweep's pass counts are exact; only its timings are noisy).")
@click.option("--prompts", "num_prompts", type=click.IntRange(min=1), default=12, show_default=True,
              help="Calibration prompts, drawn apart from the bench's.")
@click.option("--calib", type=click.Choice(["auto", "spec-bench", "stdlib"]), default="auto", show_default=True,
              help="Calibration set: Spec-Bench's calibration split (question_id % 5 == 0, never benched), or held-out "
                   "stdlib snippets; auto = Spec-Bench when the tokenizer has a chat template.")
@chat_option
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=48, show_default=True,
              help="Tokens generated per calibration prompt at every point of the grid.")
@click.option("--temperature", type=finite(min=0.0), default=0.0, show_default=True, help="0 = greedy.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The tuned-settings file [default: tuned.json beside the mask]; an existing file needs --force.")
@click.option("--force", is_flag=True, help="Overwrite an existing --out.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Frontier PNG [default: <out>-frontier.png].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Every point as JSON.")
@adaptive_option("Also measure the adaptive tier (the lossless point and the cheapest lossy point within budget of "
                 "each mask, the tier chosen cycle by cycle) beside the tier on every cycle.", default=True)
@threads_option
@click.option("--minutes", type=finite(min=0.0, min_open=True), default=None,
              help="Time budget after loading: a probe prices one setting on one prompt, the sweep runs on as many prompts "
                   "(and, without --ratios, tries as many other skip ratios) as fit, and stops between settings at the end; "
                   "a budget too small for one prompt is refused, naming the minutes it needs [default: no budget].")
@placement_options
@click.option("--costs", default=None, help="Also price every point's measured pass counts with another machine's forward costs "
              "(a cost file, or a shipped one: h200-llama2-7b, h200-llama2-13b) and print the projected verdict (not written).")
def tune(pair, target_path, draft_path, mask_path, ratios, search_steps, exits, alpha1_values, alpha2_values, lenience_values,
         greedy_gates, gamma, max_ll_drop, max_overrule, max_regret, reuse_path, retime, num_prompts, calib, chat, max_new_tokens,
         temperature, out_path, force, plot_path, json_path, adaptive, threads, minutes, device, dtype, device_map, costs) -> None:
    """Sweep VIA-SD (alpha1, alpha2, r) and the lenient baseline; write the cheapest setting within a fidelity budget."""
    import torch
    from tqdm import tqdm

    from viasd_adapt.bench.session import quiet_transformers
    from viasd_adapt.errors import ConfigError
    from viasd_adapt.io import ensure_writable
    from viasd_adapt.core.sampling import SamplingConfig
    from viasd_adapt.frameworks.planning import RunOptions, plan_run
    from viasd_adapt.tuning.grid import MEASURED_ON
    from viasd_adapt.config.tune_points import TunePoints
    from viasd_adapt.config.tuned import TUNED_FILENAME
    from viasd_adapt.tuning.tune import Budget, TuneConfig, TuneGrid
    from viasd_adapt.tuning.tune import tune as run_tune

    choice = choose_pair(pair, target_path, draft_path)
    target_path, draft_path, mask_path = choice.target, choice.draft, mask_path or choice.mask
    if target_path is None or draft_path is None:
        raise ConfigError("give --pair NAME, or --target and --draft")
    sampling = SamplingConfig.from_temperature(temperature)
    grid = TuneGrid(_floats(alpha1_values, "--alpha1"), _floats(alpha2_values, "--alpha2"), _floats(lenience_values, "--lenience"),
                    tuple(g.strip() for g in greedy_gates.split(",") if g.strip()), gamma)
    ratio_values = _floats(ratios, "--ratios")  # list options are parsed before any model loads
    exit_layers = tuple(int(k) for k in _floats(exits, "--exits"))
    budget = Budget(max_ll_drop, max_overrule, max_regret if max_regret is not None and max_regret >= 0 else None)
    base_dir = Path(mask_path).parent if mask_path else Path(target_path).parent
    out_path = out_path or base_dir / TUNED_FILENAME
    plot_path = plot_path or out_path.with_name(out_path.stem + "-frontier.png")
    if out_path.exists() and not force:
        raise ConfigError(f"{out_path} already exists; pass --force to overwrite it, or --out another path")
    # Every output is checked before the first forward: a read-only folder fails now, not after the sweep.
    ensure_writable(out_path, "--out", force)
    ensure_writable(plot_path, "--plot")
    if json_path:
        ensure_writable(json_path, "--json")
    reused = TunePoints.load(reuse_path) if reuse_path is not None else None  # a wrong file fails before any load
    from viasd_adapt.bench.projection import load_cost_model

    cost_model = load_cost_model(costs) if costs else None  # a bad cost file fails before any load
    placement_of(device, dtype, device_map)  # CUDA asked without CUDA, a bad device map: refused before any load
    torch.set_num_threads(threads)
    quiet_transformers()
    # the sweep measures its own points: a tuned.json already beside the mask is not read (it is the file rewritten)
    options = RunOptions(mask=Path(mask_path) if mask_path else None, device=device, dtype=dtype, device_map=device_map,
                         sampling=sampling, need_mask=True, read_tuned=False)
    loaded = plan_run(choice, options, MEASURED_ON).pair  # the planner; tune measures on this framework's loop
    if loaded.mask.is_fallback:
        click.echo(f"note: no mask.json for this pair; tuning with the {loaded.mask.source}")
    loaded_at = CLOCK()  # a --minutes budget runs from here
    if reuse_path is not None:
        result = _reused(loaded, reused, reuse_path, budget, grid.gamma if retime else None)
    else:
        prompts, stop_when = _calibration_prompts(loaded, calib, chat, num_prompts, max_new_tokens), None
        if minutes is not None:
            prompts, ratio_values, stop_when = _budgeted(loaded, prompts, minutes, loaded_at, grid, ratio_values, not ratios,
                                                         search_steps, max_new_tokens, len(exit_layers), chat)
        config = TuneConfig(max_new_tokens, grid, budget, ratio_values, search_steps, exit_layers, sampling,
                            save_masks_to=out_path.parent, chat=chat, adaptive=adaptive)
        result = run_tune(loaded, prompts, config, progress=lambda m: click.echo(f"  .. {m}"),
                          bar=lambda total: tqdm(total=total, desc="tune", unit="setting", leave=False), stop_when=stop_when)
        if minutes is not None or ratio_values:
            from viasd_adapt.prompts.chat import encode_prompt
            from viasd_adapt.tuning.tune_budget import ratio_table

            ids = [p.ids if hasattr(p, "ids") else encode_prompt(loaded.tokenizer, p, chat) for p in prompts]
            for line in ratio_table(result, loaded.target, ids):
                click.echo(line)
    _write_results(result, loaded, cost_model, gamma, out_path, plot_path, json_path)


def _write_results(result, loaded, cost_model, gamma: int, out_path: Path, plot_path: Path, json_path: Path | None) -> None:
    """Prints the sweep's outcome (and its projection under ``--costs``), then writes ``tuned.json``,
    the frontier plot and, with ``--json``, every point."""
    from viasd_adapt.config.tune_points import TunePoints
    from viasd_adapt.tuning.tune import artifact_of, describe, plot_frontiers, projected

    for line in describe(result):
        click.echo(line)
    if cost_model is not None:
        click.echo(f"PROJECTION, not a measurement: the same pass counts priced with the forward costs of {cost_model.label} "
                   f"({cost_model.source or 'cost file'}); tuned.json keeps the measured choice")
        for line in describe(projected(result, cost_model, gamma)):
            click.echo(f"  projected: {line}")
    artifact = artifact_of(result, loaded, folder=out_path.parent)  # masks named relative to the tuned file
    click.echo(f"measured on: the {artifact.measured_on} framework's loop (recorded in tuned.json as measured_on; "
               "other frameworks apply the same settings: viasd generate --explain says so)")
    click.echo(f"wrote {artifact.save(out_path)} ({result.seconds:.0f}s); frontier -> {plot_frontiers(result, plot_path)}")
    if json_path:
        portable = result.relative_to(out_path.parent)  # the same names as the artifact: --reuse finds its costs
        sweep = TunePoints(points=[p.to_dict() for p in portable.points], tuned=artifact)
        click.echo(f"wrote {sweep.save(json_path)}")


def _budgeted(loaded, prompts: list, minutes: float, loaded_at: float, grid, ratios: tuple[float, ...], auto_ratios: bool,
              search_steps: int, max_new_tokens: int, exits: int, chat: str):
    """``--minutes``: the probe, the sweep's size for what is left (said before it starts, or a
    refusal naming the minutes it needs), and the ``stop_when`` that ends the sweep at the budget.
    Returns the prompts and ratios to run and ``stop_when``."""
    from viasd_adapt.prompts.chat import encode_prompt
    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.search.config import DEFAULTS
    from viasd_adapt.tuning.budget_plan import Deadline
    from viasd_adapt.tuning.onboard_plan import grid_size
    from viasd_adapt.tuning.probe import measure_units
    from viasd_adapt.tuning.tune_budget import fit_tune, tune_estimate_line

    deadline = Deadline(minutes * 60, CLOCK, start=loaded_at)
    first = prompts[0]
    ids = list(first.ids if hasattr(first, "ids") else encode_prompt(loaded.tokenizer, first, chat))
    ratio = loaded.mask.mask.ratio if loaded.mask is not None else DEFAULTS.ratio
    units = measure_units(loaded, ids, num_layers=find_decoder_stack(loaded.target).num_layers, ratio=ratio,
                          prompt_tokens=DEFAULTS.calibration.max_prompt_tokens, new_tokens=32, gamma=grid.gamma,
                          tokens=max_new_tokens, clock=CLOCK)
    units = units.at_prompt_lengths([len(p.ids if hasattr(p, "ids") else encode_prompt(loaded.tokenizer, p, chat))
                                     for p in prompts], len(ids))
    probe = CLOCK() - loaded_at
    size = grid_size(grid)
    plan = fit_tune(units, deadline.remaining(), minutes=minutes, grid=size, masks=(loaded.mask is not None) + exits,
                    ratios=ratios, auto_ratios=auto_ratios, search_steps=search_steps, prompts_asked=len(prompts))
    click.echo(tune_estimate_line(plan, probe, minutes, size))
    for note in plan.notes:
        click.echo(f"note: {note}")
    per_setting = plan.prompts * max(units.sd_point, units.tier_point)
    return prompts[:plan.prompts], plan.ratios, lambda: not deadline.allows(per_setting)


def _reused(loaded, reused, reuse_path: Path, budget, retime_gamma: int | None):
    """A sweep read back from ``--reuse`` (checked against the target) and chosen again under
    ``budget``; with ``--retime``, repriced by single forwards timed again per mask at block
    length ``retime_gamma``."""
    from viasd_adapt.prompts.splits import tune_snippets
    from viasd_adapt.tuning.tune import load_result

    check_tuned_model(reused.tuned, loaded.target, source=str(reuse_path))
    result = load_result(reused.to_json(), source=str(reuse_path)).rechosen(budget)
    if retime_gamma is None:
        return result
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.tuning.tune import mask_costs

    masks = {name: RoutingMask.from_bits(info["bits"]) for name, info in result.masks.items()}
    prompt = list(loaded.tokenizer(tune_snippets(1)[0]).input_ids)
    click.echo("  .. timing single forwards per mask again")
    return result.repriced(mask_costs(loaded, masks, prompt, retime_gamma, 25))


def _calibration_prompts(loaded, calib: str, chat: str, num_prompts: int, max_new_tokens: int):
    """The prompts the sweep measures on: Spec-Bench's calibration split for a chat target (or
    ``--calib spec-bench``), else held-out stdlib snippets. ``--chat on`` without a chat template
    fails here, before any forward."""
    from viasd_adapt.prompts.chat import has_chat_template, uses_chat
    from viasd_adapt.prompts.splits import tune_snippets

    uses_chat(loaded.tokenizer, chat)
    if calib == "spec-bench" or (calib == "auto" and has_chat_template(loaded.tokenizer)):
        from viasd_adapt.bench.prompt_sets import tune_spec_bench_prompts

        click.echo(f"  .. calibration: {num_prompts} prompts of Spec-Bench's calibration split (chat {chat})")
        return tune_spec_bench_prompts(loaded, num_prompts, chat, max_new_tokens)
    return tune_snippets(num_prompts)
