"""The probe a time budget is planned from: one unit of each stage's work, run and timed.

:func:`measure_units` times, on the loaded pair and this machine, what the onboarding repeats:
a target decode step, a forward over a calibration window, and one tuning setting on one prompt
run the way the sweep runs it (:data:`~viasd_adapt.tuning.grid.MEASURED_ON`'s loop with the pair's
own drafter, then scored by the target), once untiered and once with a slim verifier. The
planner (:mod:`viasd_adapt.tuning.budget_plan`) prices every stage in these units; a drafted
token's real cost (the drafter's forwards, its loop, the verification of its block) is in them
because a real cycle ran, not because a factor was fitted.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from viasd_adapt.tuning.budget_plan import TUNE_TOKENS, UnitCosts

#: Tokens each tuning probe generates (its time is scaled to :data:`TUNE_TOKENS`).
PROBE_TOKENS = 16

Clock = Callable[[], float]


def _median_seconds(run: Callable[[], Any], repeats: int, clock: Clock) -> float:
    times = []
    for _ in range(repeats):
        started = clock()
        run()
        times.append(clock() - started)
    return statistics.median(times)


def one_token_seconds(model, clock: Clock = time.perf_counter) -> float:
    """One one-token forward of ``model`` (a decode step without its history), median of 3."""
    import torch

    ids = torch.ones((1, 1), dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():
        return _median_seconds(lambda: model(ids, use_cache=False), 3, clock)


def window_seconds(model, tokens: int, clock: Clock = time.perf_counter) -> float:
    """One forward of ``model`` over ``tokens`` positions (a calibration window), median of 2."""
    import torch

    ids = torch.ones((1, tokens), dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():
        return _median_seconds(lambda: model(ids, use_cache=False), 2, clock)


def provisional_mask(num_layers: int, ratio: float):
    """A mask of ``ratio`` with its skipped layers spread evenly: what a tiered probe runs before
    the search has found the pair's own (a cycle's price depends on how many layers run, not which)."""
    from viasd_adapt.config.mask import RoutingMask, skip_count

    k = skip_count(num_layers, ratio)
    return RoutingMask.from_skipped(num_layers, sorted({int((i + 0.5) * num_layers / k) for i in range(k)}))


def setting_seconds(pair, prompt_ids: list[int], settings, mask, clock: Clock = time.perf_counter) -> float:
    """One tuning setting on one prompt as the sweep runs it: :data:`PROBE_TOKENS` tokens through the
    sweep's loop with the pair's drafter, then scored by the target; scaled to :data:`TUNE_TOKENS`."""
    from viasd_adapt.bench.fidelity import score_output
    from viasd_adapt.engine.context import resolve_context
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.tuning.grid import MEASURED_ON

    # unwatched: a probe of an untrained pair is no verdict on its drafter
    context = resolve_context(pair.target, settings, mask=mask, evidence=None, drafter=pair.drafter, watch_drafter=False)
    request = RunRequest.tiered(prompt_ids, PROBE_TOKENS, settings, seed=0, stop_at_eos=False, context=context)
    started = clock()
    out = frameworks.run(MEASURED_ON, pair, request)
    score_output(pair.target, prompt_ids, out.tokens)
    seconds = clock() - started
    return seconds * TUNE_TOKENS / PROBE_TOKENS


def measure_units(pair, prompt_ids: list[int], *, num_layers: int, ratio: float, window_tokens: int, gamma: int = 5,
                  clock: Clock = time.perf_counter) -> UnitCosts:
    """The probe (module docstring): :class:`UnitCosts` of ``pair`` on one tuning prompt."""
    from viasd_adapt.core.settings import Mode, TierSettings

    base = TierSettings(gamma=gamma)
    untiered = setting_seconds(pair, prompt_ids, base.with_(mode=Mode.NONE), pair.routing, clock)
    mask = provisional_mask(num_layers, ratio)
    tiered = setting_seconds(pair, prompt_ids, base.with_(mode=Mode.LOSSLESS, adaptive=False, ratio=mask.ratio), mask, clock)
    return UnitCosts(step=one_token_seconds(pair.target, clock), window=window_seconds(pair.target, window_tokens, clock),
                     sd_point=untiered, tier_point=tiered)


__all__ = ["PROBE_TOKENS", "measure_units", "one_token_seconds", "provisional_mask", "setting_seconds", "window_seconds"]
