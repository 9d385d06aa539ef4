"""From a target/drafter pair to a fingerprinted mask artifact, in three stages.

1. :func:`~viasd_adapt.search.calibrate.calibrate`: prompts -> calibration windows (cached);
2. :func:`~viasd_adapt.search.run.run_search`: windows + a :class:`SearchPlan` -> the best mask
   and the evaluation trace, the random baseline included;
3. :func:`~viasd_adapt.search.report.report_search`: the trace -> the typed
   :class:`~viasd_adapt.search.records.SearchReport`, the mask artifact (written) and the prose.

:func:`search_pair` runs them from one :class:`~viasd_adapt.search.config.SearchConfig` (what
``viasd search`` and ``viasd tune`` call); :func:`search_mask` is the older keyword interface over
the same stages. The search strategy lives in ``dimr.py``/``guided.py``, the cost in ``objective.py``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from torch import nn

from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.config.mask import skip_count
from viasd_adapt.search import decoder_windows as cal
from viasd_adapt.search.bo import BOSettings
from viasd_adapt.search.calibrate import CalibrationInput, Calibrated, calibrate
from viasd_adapt.search.calibration_prompts import (
    CalibrationSpec,
    calibration_prompts,
    calibration_record,
    chat_prompt_ids,
    prompt_token_ids,
    spec_bench_texts,
    uses_spec_bench,
)
from viasd_adapt.search.candidates import FixedCountSpace, MaskSpace
from viasd_adapt.search.config import DEFAULTS, SearchConfig
from viasd_adapt.search.dimr import SearchSettings, check_cardinality
from viasd_adapt.search.price import cycle_price, mask_price
from viasd_adapt.search.report import ReportInput, SearchOutcome, report_search
from viasd_adapt.search.run import SearchPlan, SearchTrace, check_space, run_search
from viasd_adapt.core.settings import TierSettings


def run_stages(target: nn.Module, draft: nn.Module, inputs: CalibrationInput, plan: SearchPlan,
               info: ReportInput = ReportInput(), window_cache: cal.WindowCache | None = None,
               on_step: Callable | None = None) -> SearchOutcome:
    """Calibrate, search, report. Every input error (a space for another layer count, a drafter
    over another vocabulary) is raised before the first forward."""
    check_space(target, plan.space)  # calibrate() checks the vocabularies first thing
    calibrated = calibrate(target, draft, inputs, window_cache)
    trace = run_search(target, draft, calibrated, plan, on_step)
    return report_search(calibrated, trace, info)


def search_pair(target: nn.Module, draft: nn.Module, tokenizer, config: SearchConfig = DEFAULTS, *,
                prompt_lookup: bool = False, window_cache: cal.WindowCache | None = None,
                on_step: Callable | None = None, info: ReportInput = ReportInput(),
                say: Callable[[str], None] | None = None) -> SearchOutcome:
    """One search of ``config`` on a loaded pair: its prompts (``config.calibration``) through
    ``tokenizer``, its space for this target, its strategy; ``info`` names the models and where
    the artifact goes. ``prompt_lookup``: the drafter stands in for a prompt-lookup drafter (no
    distribution of its own; ``objective="auto"`` then scores C(q||u) only)."""
    stack = find_decoder_stack(target)
    space = config.mask_space(stack.num_layers)
    spec = config.calibration
    prompts = calibration_prompts(tokenizer, spec, stack.encoder_decoder)
    if say is not None:
        say(f"calibrating: {len(prompts.calib_ids)} prompts x {spec.new_tokens} greedy tokens of the target ...")
    record = calibration_record(tokenizer, spec, prompt_lookup)
    if info.calibration_info is None:
        info = replace(info, calibration_info=record)
    inputs = CalibrationInput(prompts.calib_ids, prompts.heldout_ids, spec.new_tokens,
                              references=prompts.references, continuation=spec.continuation)
    plan = SearchPlan(space, config.strategy_settings(), config.tier(), compare_random=config.compare_random,
                      objective=config.objective_kind(prompt_lookup))
    return run_stages(target, draft, inputs, plan, info, window_cache, on_step)


def resolve_space(target: nn.Module, ratio: float, space: MaskSpace | None) -> MaskSpace:
    """``space``, checked against the target, or the paper's: exactly ``round(ratio * L)`` skipped."""
    if space is not None:
        check_space(target, space)
        return space
    num_layers = find_decoder_stack(target).num_layers
    k = skip_count(num_layers, ratio)
    check_cardinality(num_layers, k)
    return FixedCountSpace(num_layers, k)


def search_mask(
    target: nn.Module,
    draft: nn.Module,
    calib_ids: Sequence[Sequence[int]],
    heldout_ids: Sequence[Sequence[int]] = (),
    ratio: float = 0.45,
    settings: SearchSettings = SearchSettings(),
    tier: TierSettings | None = None,
    compare_random: int = 0,
    new_tokens: int = cal.DEFAULT_NEW_TOKENS,
    pad_id: int = 0,
    bo_settings: BOSettings = BOSettings(),
    on_step: Callable | None = None,
    calibration_info: dict | None = None,
    space: MaskSpace | None = None,
    calib_references: Sequence[Sequence[int]] | None = None,
    continuation: str = "target-model",
    window_cache: "cal.WindowCache | None" = None,
    drafter_term: bool = True,
    objective: str | None = None,
) -> SearchOutcome:
    """Calibrate once, run DIMR, score the random baseline, and build the artifact (the three
    stages, from keywords; :func:`search_pair` takes a :class:`SearchConfig` instead).

    ``space`` defaults to the paper's: exactly ``round(ratio * L)`` skipped layers. ``settings`` is a
    :class:`SearchSettings` (random + BO every theta steps) or a
    :class:`~viasd_adapt.search.guided.GuidedSettings` (probes, warm starts, swap trust region, GP).
    ``window_cache`` keeps the target's greedy windows between runs (decoder-only targets).
    ``objective`` names what masks are scored by (``drafter_term=False`` is the older spelling of
    ``"q-only"``).
    Bad inputs fail before any model runs: mismatched vocabularies (:class:`ModelMismatchError`), a ratio outside
    (0, 1) or one that skips no layer or every layer (:class:`ConfigError`).
    """
    tier = tier or TierSettings(ratio=ratio)
    space = resolve_space(target, ratio, space)
    inputs = CalibrationInput(calib_ids, heldout_ids, new_tokens, pad_id, calib_references, continuation)
    plan = SearchPlan(space, settings, tier, bo_settings, compare_random,
                      objective or ("routed" if drafter_term else "q-only"))
    return run_stages(target, draft, inputs, plan, ReportInput(calibration_info=calibration_info), window_cache, on_step)


__all__ = ["CalibrationInput", "CalibrationSpec", "Calibrated", "ReportInput", "SearchConfig", "SearchOutcome",
           "SearchPlan", "SearchTrace", "calibrate", "chat_prompt_ids", "cycle_price", "mask_price", "prompt_token_ids",
           "report_search", "resolve_space", "run_search", "run_stages", "search_mask", "search_pair",
           "spec_bench_texts", "uses_spec_bench"]
