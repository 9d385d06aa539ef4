"""The probe a time budget is planned from: one unit of each stage's work, run and timed.

:func:`measure_units` times, on the loaded pair and this machine, what the onboarding repeats:

* a target decode step (the price list's unit) and a calibration prompt's greedy continuation
  at two lengths (the calibration's unit: its prefill once, then per greedy token);
* the mask search's own unit: a few calibration windows scored by the target the way the search
  scores them (the window's price), then one mask evaluated on them by the search's objective
  (:class:`~viasd_adapt.search.objective.MaskObjective`, from the first skipped layer on, on the
  stored states) and one BoTorch proposal (DIMR makes one every ``bo_every`` steps);
* one tuning setting on one prompt run the way the sweep runs it
  (:data:`~viasd_adapt.tuning.grid.MEASURED_ON`'s loop with the pair's own drafter, then scored by
  the target), once untiered and once with a slim verifier, each at two lengths: the slope between
  them is a generated token's price and the intercept, with the scoring, the prompt's, so a sweep
  of any length is priced per token plus once per prompt.

The planner (:mod:`viasd_adapt.tuning.budget_plan`) prices every stage in these units; a drafted
token's real cost (the drafter's forwards, its loop, the verification of its block) and a mask
evaluation's (its prefix skipped, its head on the scored columns only) are in them because the
real code ran, not because a factor was fitted.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from viasd_adapt.tuning.budget_plan import RunPrice, UnitCosts

#: Tokens of the probe's short and long run of a tuning setting (the slope between them is a token's price).
SHORT_TOKENS, PROBE_TOKENS = 2, 16
#: Greedy tokens of the probe's longer calibration run (the shorter has :data:`SHORT_TOKENS`).
GREEDY_TOKENS = 10
#: Calibration windows the probe scores and evaluates a mask on (the search's own windows, fewer of them).
PROBE_WINDOWS = 2
#: Observations the probe's BoTorch proposal is fitted to.
PROPOSAL_OBSERVATIONS = 12

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


def provisional_mask(num_layers: int, ratio: float):
    """A mask of ``ratio`` with its skipped layers spread evenly: what a tiered probe runs before
    the search has found the pair's own (a cycle's price depends on how many layers run, not which)."""
    from viasd_adapt.config.mask import RoutingMask, skip_count

    k = skip_count(num_layers, ratio)
    return RoutingMask.from_skipped(num_layers, sorted({int((i + 0.5) * num_layers / k) for i in range(k)}))


def probe_windows(prompt_ids: list[int], prompt_tokens: int, new_tokens: int, count: int = PROBE_WINDOWS):
    """``count`` calibration windows of the search's shape: the prompt cut to ``prompt_tokens`` and
    ``new_tokens`` continuation tokens (the prompt's own ids again: what a window holds does not
    change what scoring it costs), the continuation's positions scored."""
    import torch

    from viasd_adapt.search.decoder_windows import TokenWindows

    prompt = list(prompt_ids)[:prompt_tokens] or [0]
    continuation = [prompt[i % len(prompt)] for i in range(new_tokens)]
    window = prompt + continuation
    input_ids = torch.tensor([window] * count, dtype=torch.long)
    scored = torch.zeros_like(input_ids, dtype=torch.bool)
    scored[:, len(prompt) - 1:len(window) - 1] = True
    return TokenWindows(input_ids, scored)


def search_unit_seconds(target, prompt_ids: list[int], mask, *, prompt_tokens: int, new_tokens: int,
                        clock: Clock = time.perf_counter) -> tuple[float, float]:
    """``(window, evaluation)``: one calibration window scored by the target, and one evaluation of
    ``mask`` by the search's objective, per window, on :data:`PROBE_WINDOWS` windows of the search's
    shape (:func:`probe_windows`). The objective is the search's default (its setup, the stored
    states, runs untimed); the evaluation is the median of two."""
    import torch

    from viasd_adapt.search.config import DEFAULTS
    from viasd_adapt.search.decoder_windows import scored_log_probs
    from viasd_adapt.search.objective import MaskObjective
    from viasd_adapt.search.windows import CalibrationSet

    windows = probe_windows(prompt_ids, prompt_tokens, new_tokens)
    with torch.no_grad():
        started = clock()
        logp_full = scored_log_probs(target, windows, None)
        window = (clock() - started) / PROBE_WINDOWS
        # the drafter's log-probs only enter the routed objective's arithmetic: q's stand in for them
        objective = MaskObjective(target, CalibrationSet(windows, logp_full, logp_full), DEFAULTS.tier(),
                                  objective=DEFAULTS.objective_kind())
        evaluation = _median_seconds(lambda: objective(mask), 2, clock) / PROBE_WINDOWS
    return window, evaluation


def greedy_price(target, prompt_ids: list[int], prompt_tokens: int, clock: Clock = time.perf_counter) -> RunPrice:
    """One calibration prompt's greedy continuation as the search writes it
    (:func:`~viasd_adapt.search.decoder_windows.greedy_continuation`, the target with its cache),
    priced once per prompt (its prefill) and per greedy token: a run of :data:`SHORT_TOKENS` and one
    of :data:`GREEDY_TOKENS` tokens on the prompt cut to ``prompt_tokens``."""
    from viasd_adapt.search.decoder_windows import greedy_continuation

    prompt = list(prompt_ids)[:prompt_tokens] or [0]
    runs = []
    for tokens in (SHORT_TOKENS, GREEDY_TOKENS):
        started = clock()
        greedy_continuation(target, prompt, tokens)
        runs.append((tokens, clock() - started))
    return RunPrice.fitted(runs[0], runs[1], 0.0)


def proposal_seconds(num_layers: int, ratio: float, clock: Clock = time.perf_counter) -> float:
    """What proposing masks adds per search step: one BoTorch proposal of the search's mask space,
    fitted to :data:`PROPOSAL_OBSERVATIONS` observations, over DIMR's ``bo_every`` steps."""
    import torch

    from viasd_adapt.search.bo import propose_bo
    from viasd_adapt.search.candidates import random_unseen_in
    from viasd_adapt.search.config import DEFAULTS

    config = DEFAULTS.with_(ratio=ratio)
    space, draws = config.mask_space(num_layers), torch.Generator().manual_seed(0)
    seen: set = set()
    for _ in range(PROPOSAL_OBSERVATIONS):
        bits = random_unseen_in(space, seen, draws)
        if bits is None:
            break
        seen.add(bits)
    observed = sorted(seen)
    costs = [float(sum(bits)) + 0.1 * index for index, bits in enumerate(observed)]  # any costs: the fit's time is the price
    started = clock()
    try:
        propose_bo(observed, costs, space, torch.Generator().manual_seed(1), seed=0, bo=config.bo)
    except Exception:  # noqa: BLE001 - a failed fit costs the search a random step; its time is still the price
        pass
    return (clock() - started) / max(1, config.bo_every)


def run_seconds(pair, prompt_ids: list[int], settings, mask, tokens: int, clock: Clock = time.perf_counter,
                scored: bool = False) -> tuple[float, float]:
    """``(run, scoring)``: one tuning setting on one prompt as the sweep runs it, ``tokens`` tokens
    through the sweep's loop with the pair's drafter, and (``scored``) the target's scoring of its
    output (0 otherwise)."""
    from viasd_adapt.bench.fidelity import score_output
    from viasd_adapt.engine.context import resolve_context
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.tuning.grid import MEASURED_ON

    # unwatched: a probe of an untrained pair is no verdict on its drafter
    context = resolve_context(pair.target, settings, mask=mask, evidence=None, drafter=pair.drafter, watch_drafter=False)
    request = RunRequest.of(context, prompt_ids, tokens, seed=0, stop_at_eos=False)
    started = clock()
    out = frameworks.run(MEASURED_ON, pair, request)
    run = clock() - started
    if not scored:
        return run, 0.0
    started = clock()
    score_output(pair.target, prompt_ids, out.tokens)
    return run, clock() - started


def setting_price(pair, prompt_ids: list[int], settings, mask, clock: Clock = time.perf_counter) -> RunPrice:
    """One tuning setting on one prompt, priced per token and once per prompt
    (:meth:`~viasd_adapt.tuning.budget_plan.RunPrice.fitted`): a run of :data:`SHORT_TOKENS` and one
    of :data:`PROBE_TOKENS` tokens, the longer one's output scored."""
    short, _ = run_seconds(pair, prompt_ids, settings, mask, SHORT_TOKENS, clock)
    long, scoring = run_seconds(pair, prompt_ids, settings, mask, PROBE_TOKENS, clock, scored=True)
    return RunPrice.fitted((SHORT_TOKENS, short), (PROBE_TOKENS, long), scoring)


def measure_units(pair, prompt_ids: list[int], *, num_layers: int, ratio: float, prompt_tokens: int, new_tokens: int,
                  gamma: int = 5, tokens: int | None = None, clock: Clock = time.perf_counter) -> UnitCosts:
    """The probe (module docstring): :class:`UnitCosts` of ``pair`` on one tuning prompt; windows of
    ``prompt_tokens`` + ``new_tokens`` positions (the search's calibration), ``tokens`` per tuning
    prompt (default the planner's)."""
    from viasd_adapt.core.settings import Mode, TierSettings

    base = TierSettings(gamma=gamma)
    untiered = setting_price(pair, prompt_ids, base.with_(mode=Mode.NONE), pair.routing, clock)
    mask = provisional_mask(num_layers, ratio)
    tiered = setting_price(pair, prompt_ids, base.with_(mode=Mode.LOSSLESS, adaptive=False, ratio=mask.ratio), mask, clock)
    window, evaluation = search_unit_seconds(pair.target, prompt_ids, mask, prompt_tokens=prompt_tokens,
                                             new_tokens=new_tokens, clock=clock)
    extra = {} if tokens is None else {"tokens": tokens}
    return UnitCosts(step=one_token_seconds(pair.target, clock), window=window, evaluation=evaluation, untiered=untiered,
                     tiered=tiered, proposal=proposal_seconds(num_layers, ratio, clock), evaluated_ratio=mask.ratio,
                     greedy=greedy_price(pair.target, prompt_ids, prompt_tokens, clock), **extra)


__all__ = ["GREEDY_TOKENS", "PROBE_TOKENS", "SHORT_TOKENS", "greedy_price", "measure_units", "one_token_seconds", "probe_windows", "proposal_seconds",
           "provisional_mask", "run_seconds", "search_unit_seconds", "setting_price"]
