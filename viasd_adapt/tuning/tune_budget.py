"""``viasd tune --minutes M``: the sweep sized to a time budget, and what each skip ratio tried gave.

The probe (:func:`viasd_adapt.tuning.probe.measure_units`) prices one setting on one prompt,
untiered and tiered, through the sweep's own loop; :func:`fit_tune` chooses how many calibration
prompts the grid runs on and which extra skip ratios (searched as the tuner searches them: a short
DIMR search on 8 snippets) fit, or refuses naming the minutes the smallest sweep needs. The sweep
then stops between settings at the deadline (:func:`viasd_adapt.tuning.measure.tune`'s ``stop_when``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from viasd_adapt.tuning.budget_plan import (EXTRA_RATIOS, FILL, MIN_TUNE_PROMPTS, SETUP_FORWARDS, BudgetTooSmall, GridSize,
                                            UnitCosts, budget_words, prompts_word, search_step_seconds, tune_seconds)

#: What the tuner's own mask search calibrates on (:func:`viasd_adapt.tuning.grid._search`): prompts and tokens.
RATIO_SEARCH_PROMPTS, RATIO_SEARCH_TOKENS = 8, 32


@dataclass(frozen=True)
class TunePlan:
    """How many prompts the sweep runs on, which ratios it searches, and the price (seconds after the probe)."""

    prompts: int
    ratios: tuple[float, ...]
    masks: int
    expected_seconds: float
    notes: list[str] = field(default_factory=list)


def ratio_search_seconds(units: UnitCosts, ratio: float, steps: int) -> float:
    """One DIMR mask search of the tuner: greedy calibration, the objective's setup, ``steps`` steps
    (a measured mask evaluation per window and its share of a proposal, :func:`search_step_seconds`)."""
    return (RATIO_SEARCH_PROMPTS * units.calibration_prompt(RATIO_SEARCH_TOKENS) + SETUP_FORWARDS * RATIO_SEARCH_PROMPTS * units.window
            + steps * search_step_seconds(units, RATIO_SEARCH_PROMPTS, ratio))


def scaled(units: UnitCosts, new_tokens: int) -> UnitCosts:
    """The probe's units for tuning prompts of ``new_tokens`` tokens: each setting priced once per
    prompt and per token (:class:`~viasd_adapt.tuning.budget_plan.RunPrice`), never a short run copied."""
    return replace(units, tokens=new_tokens)


def fit_tune(units: UnitCosts, budget_seconds: float, *, minutes: float, grid: GridSize, masks: int,
             ratios: tuple[float, ...], auto_ratios: bool, search_steps: int, prompts_asked: int) -> TunePlan:
    """The sweep that fits ``budget_seconds`` (what is left of ``minutes`` after the probe) at
    :data:`~viasd_adapt.tuning.budget_plan.FILL`: the asked ``ratios`` are always searched; with
    ``auto_ratios`` the other ratios of :data:`~viasd_adapt.tuning.budget_plan.EXTRA_RATIOS` are
    added while the sweep keeps at least :data:`~viasd_adapt.tuning.budget_plan.MIN_TUNE_PROMPTS`
    prompts (or all it was asked for). ``masks``: the masks the sweep has before any search."""
    fill = max(0.0, budget_seconds) * FILL
    extras = tuple(r for r in EXTRA_RATIOS if r not in ratios) if auto_ratios else ()
    least = min(prompts_asked, MIN_TUNE_PROMPTS)
    for count in range(len(extras), -1, -1):
        tried = ratios + extras[:count]
        searching = sum(ratio_search_seconds(units, r, search_steps) for r in tried)
        total_masks = masks + len(tried)
        fixed, per_prompt = tune_seconds(units, grid, total_masks, 0), tune_seconds(units, grid, total_masks, 1)
        per_prompt -= fixed
        prompts = min(prompts_asked, int((fill - searching - fixed) / max(per_prompt, 1e-9)))
        if prompts >= (least if count else 1):
            notes = [] if prompts == prompts_asked else [f"the sweep runs on {prompts_word(prompts)} (the budget's), "
                                                         f"not the {prompts_asked} asked"]
            if extras and count < len(extras):
                notes.append(f"the skip ratios {', '.join(f'{r:g}' for r in extras[count:])} are not tried: the budget "
                             "leaves no time for them")
            return TunePlan(prompts, tried, total_masks, searching + fixed + prompts * per_prompt, notes)
    smallest = (sum(ratio_search_seconds(units, r, search_steps) for r in ratios)
                + tune_seconds(units, grid, masks + len(ratios), 1))
    spent = minutes * 60 - budget_seconds
    needed = math.ceil((smallest / FILL + spent) / 6) / 10
    raise BudgetTooSmall(minutes, needed, f"{grid.points(masks + len(ratios))} settings on 1 prompt")


def tune_estimate_line(plan: TunePlan, probe_seconds: float, minutes: float, grid: GridSize) -> str:
    """The estimate ``viasd tune --minutes`` says before the sweep starts."""
    expected = probe_seconds + plan.expected_seconds
    searched = f", searching masks at the skip ratios {', '.join(f'{r:g}' for r in plan.ratios)}" if plan.ratios else ""
    return (f"estimate: about {expected / 60:.1f} min after loading, {budget_words(expected, minutes * 60)} "
            f"(probe {probe_seconds:.1f}s){searched}: {grid.points(plan.masks)} settings on {prompts_word(plan.prompts)}")


def prompt_agreement(target: Any, mask: Any, prompt_ids: list[list[int]]) -> float:
    """Teacher-forced argmax agreement of ``mask``'s slim verifier with the target over the prompts'
    own tokens: how often the slim pass would predict the target's next token."""
    import torch

    from viasd_adapt.routing.slim import SlimVerifier

    slim = SlimVerifier(target, mask).model
    agree = total = 0
    with torch.no_grad():
        for ids in prompt_ids:
            tensor = torch.tensor([list(ids)], dtype=torch.long, device=next(target.parameters()).device)
            full = target(tensor, use_cache=False).logits.argmax(-1)
            part = slim(tensor, use_cache=False).logits.argmax(-1)
            agree += int((full == part).sum())
            total += full.numel()
    return agree / max(1, total)


def ratio_table(result: Any, target: Any, prompt_ids: list[list[int]]) -> list[str]:
    """One line per mask of a sweep: its ratio, the slim verifier's agreement on the calibration
    prompts, and its lossless and cheapest-within-budget costs."""
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.tuning.choose import settings_label

    lines = []
    for name, info in result.masks.items():
        mask = RoutingMask.from_bits(info["bits"])
        within = [p for p in result.points if p.mask == name and result.budget.admits(p)]
        lossless = [p for p in within if p.family == "lossless-fixed"]
        best = min(within, key=lambda p: p.full_equivalent) if within else None
        cost = (f"lossless {lossless[0].full_equivalent:.3f} feq/token" if lossless else "lossless not measured")
        if best is not None:
            cost += f", cheapest within budget {best.full_equivalent:.3f} ({best.family}: {settings_label(best.settings)})"
        lines.append(f"skip ratio {mask.ratio:.2f} ({len(mask.skipped)} layers skipped, mask {name}): agreement with the "
                     f"target on the calibration prompts {prompt_agreement(target, mask, prompt_ids):.3f}; {cost}")
    return lines


__all__ = ["TunePlan", "fit_tune", "prompt_agreement", "ratio_search_seconds", "ratio_table", "scaled", "tune_estimate_line"]
