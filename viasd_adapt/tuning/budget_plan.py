"""A time budget as a contract: the sizes of an onboarding that fit it, priced from measured units.

``viasd models add --minutes M`` (and ``viasd tune --minutes M``) promise to end within the budget
after the first model load. This module is the arithmetic of that promise, with no model in it:

* :class:`UnitCosts`: what one unit of each stage's work costs, in seconds, as a short probe
  measured it on this machine (one decode step, one forward over a calibration window, one real
  mask evaluation of the search per calibration window with its share of a proposal, and one
  tuning setting through the real drafting loop with the real drafter, untiered and with a slim
  verifier: its fixed part once per prompt and its price per generated token);
* :func:`fit_plan`: the largest sizes (calibration prompts, masks searched, skip ratios tried,
  settings, tuning prompts) whose priced total fits the budget, or :class:`BudgetTooSmall` naming
  the minutes the smallest plan needs, raised before any heavy stage starts;
* :func:`budget_words`: "within" only when the estimate is within the budget;
* :class:`Deadline`: the budget's end on an injectable clock, which a long stage reads between its
  units of work to stop early (tests drive it with a fake clock, never with wall time).

Why measured units and not a fitted factor: a drafted token of a drafting loop costs more than a
bare drafter forward, a tiered setting more than an untiered one, and a mask evaluation of the
search less than a slim forward over every window (it starts at the mask's first skipped layer
from stored states); one real run of each prices what the stages will run, on the machine and
load they will run under. A setting's prompt (its prefill and its scoring) is priced once per
prompt and its tokens per token, so a sweep of longer outputs is not priced as copies of a short run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from viasd_adapt.errors import ConfigError

#: The share of the budget the plan fills: the rest absorbs timing noise between probe and run.
FILL = 0.9
#: The search's first share of the budget (what it does not use goes to the tuning sweep).
SEARCH_SHARE = 0.45
#: Greedy tokens of one calibration prompt (the search's default), and tokens of one tuning prompt.
CALIBRATION_TOKENS, TUNE_TOKENS = 48, 32
#: Fewest and most tuning prompts; fewest masks a search evaluates; masks each extra ratio's search evaluates.
MIN_TUNE_PROMPTS, MAX_TUNE_PROMPTS, MIN_SEARCH_STEPS, EXTRA_RATIO_STEPS = 4, 12, 4, 6
#: The skip ratios tried beside the main one when the budget allows, in the order they are added:
#: at small scale a slim verifier that skips fewer layers may agree with the target far more often.
EXTRA_RATIOS = (0.3, 0.2)
#: The sweep's price list (:mod:`viasd_adapt.bench.prices`): timed rounds, tries per pass and round
#: (the fastest is kept), passes timed per round for the target and drafter, and for each mask.
COST_REPEATS, COST_TRIES, SHARED_PASSES, MASK_PASSES = 15, 3, 3, 2


class BudgetTooSmall(ConfigError):
    """Even the smallest plan does not fit ``--minutes``; ``minutes_needed`` is what it would take."""

    def __init__(self, minutes: float, minutes_needed: float, smallest: str) -> None:
        self.minutes, self.minutes_needed = minutes, minutes_needed
        super().__init__(f"--minutes {minutes:g} is too small for this pair on this machine: the smallest plan "
                         f"({smallest}) takes about {minutes_needed:g} min after the first load; "
                         f"pass --minutes {minutes_needed:g} or more")


def _check_seconds(**values: float) -> None:
    for name, value in values.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise ConfigError(f"a unit cost must be a finite number of seconds >= 0, got {name}={value!r}")


@dataclass(frozen=True)
class RunPrice:
    """One tuning setting on one prompt, as the probe measured it through the real drafting loop.

    Attributes:
        prompt: what the setting costs once per prompt whatever its length: the loop's prefill and
            setup (the intercept of two runs of different lengths) and the scoring of its output.
        token: what each generated token adds (the slope of the same two runs).
    """

    prompt: float
    token: float

    def __post_init__(self) -> None:
        _check_seconds(prompt=self.prompt, token=self.token)

    def at(self, tokens: int) -> float:
        """The setting on one prompt of ``tokens`` generated tokens."""
        return self.prompt + tokens * self.token

    @classmethod
    def fitted(cls, short: tuple[int, float], long: tuple[int, float], scoring: float) -> "RunPrice":
        """The price of two timed runs ``(tokens, seconds)`` of one setting on one prompt, and the
        scoring of one output: the slope per token between them, the intercept (never below 0) plus
        the scoring as the prompt's part."""
        (n_short, t_short), (n_long, t_long) = sorted((short, long))
        if n_long <= n_short:
            raise ConfigError(f"a run price needs runs of two lengths, got {n_short} and {n_long} tokens")
        token = max(0.0, (t_long - t_short) / (n_long - n_short))
        return cls(prompt=max(0.0, t_short - n_short * token) + scoring, token=token)


@dataclass(frozen=True)
class UnitCosts:
    """Seconds of one unit of each stage's work, measured by the probe.

    Attributes:
        step: one target decode step (a calibration prompt's greedy token).
        window: one target forward over a calibration window, scored the way the search scores it
            (the search's setup and held-out agreement run a few of these per window).
        evaluation: one mask evaluation of the search per calibration window, at the skip ratio
            ``evaluated_ratio``: the search's own objective (from the first skipped layer on, on
            stored states) timed on real windows.
        untiered: one untiered setting (plain SD, the lenient baseline) on one tuning prompt.
        tiered: one setting with a slim verifier on one tuning prompt.
        proposal: what proposing a mask adds per search step (a BoTorch proposal's time over the
            steps between proposals).
        greedy: one calibration prompt's greedy continuation, as the search writes it (the target
            with its cache): its prefill once and each greedy token; None prices a prompt as one
            decode step per token.
        tokens: the tokens of one tuning prompt the sweep generates.
        evaluated_ratio: the skip ratio ``evaluation`` was measured at.
    """

    step: float
    window: float
    evaluation: float
    untiered: RunPrice
    tiered: RunPrice
    proposal: float = 0.0
    tokens: int = TUNE_TOKENS
    evaluated_ratio: float = 0.45
    greedy: RunPrice | None = None

    def __post_init__(self) -> None:
        _check_seconds(step=self.step, window=self.window, evaluation=self.evaluation, proposal=self.proposal)
        if not 0 <= self.evaluated_ratio < 1:
            raise ConfigError(f"the probe's skip ratio must be in [0, 1), got {self.evaluated_ratio!r}")

    @property
    def sd_point(self) -> float:
        """One untiered setting on one tuning prompt of :attr:`tokens` tokens, scored."""
        return self.untiered.at(self.tokens)

    @property
    def tier_point(self) -> float:
        """One setting with a slim verifier on one tuning prompt of :attr:`tokens` tokens, scored."""
        return self.tiered.at(self.tokens)

    def at_prompt_lengths(self, lengths: list[int], probed: int) -> "UnitCosts":
        """These units with each setting's per-prompt part (a prefill over the prompt, a scoring
        over the prompt and its output) priced at the mean length of the prompts the sweep runs
        (``lengths``), in proportion to the positions it covers, from the ``probed`` prompt's: a
        sweep over long prompts (a summary's thousand tokens) is not priced at a short one's."""
        if not lengths or probed <= 0:
            return self
        factor = (sum(lengths) / len(lengths) + self.tokens) / (probed + self.tokens)
        return replace(self, untiered=RunPrice(self.untiered.prompt * factor, self.untiered.token),
                       tiered=RunPrice(self.tiered.prompt * factor, self.tiered.token))

    def calibration_prompt(self, tokens: int = CALIBRATION_TOKENS) -> float:
        """One calibration (or held-out) prompt's greedy continuation of ``tokens`` tokens."""
        return self.greedy.at(tokens) if self.greedy is not None else tokens * self.step

    def evaluation_at(self, ratio: float) -> float:
        """One mask evaluation per calibration window at ``ratio``: the measured one scaled by the
        share of layers that run (a slim verifier that skips fewer layers runs more of them)."""
        return self.evaluation * (1 - ratio) / (1 - self.evaluated_ratio)


@dataclass(frozen=True)
class GridSize:
    """How many settings of each kind one sweep measures per mask (:func:`grid_sizes` lists them)."""

    lenience: int
    lossy: int  # alpha1 x alpha2 x gate readings

    def points(self, masks: int, adaptive: bool = True) -> int:
        """Every setting of the sweep: plain SD, each lenient tolerance, then per mask the lossless
        cascade, each lossy setting and (adaptive) the two adaptive twins."""
        return 1 + self.lenience + masks * (1 + self.lossy + (2 if adaptive else 0))


@dataclass(frozen=True)
class Plan:
    """The sizes chosen for a budget and what they are expected to take (seconds, after the probe)."""

    budget_seconds: float
    calibration_prompts: int
    heldout_prompts: int
    search_steps: int
    ratios: tuple[float, ...]  # the main ratio first
    extra_steps: int  # masks each extra ratio's search evaluates
    grid: int  # index into the grids the planner was given (0: the largest)
    tune_points: int
    tune_prompts: int
    search_seconds: float
    tune_seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def expected_seconds(self) -> float:
        return self.search_seconds + self.tune_seconds


def units_words(units: UnitCosts) -> str:
    """The probe's prices in words (what an estimate or a refusal rests on)."""
    greedy = f", a greedy calibration token {units.greedy.token * 1000:.0f} ms" if units.greedy is not None else ""
    return (f"a decode step {units.step * 1000:.0f} ms{greedy}, a calibration window {units.window:.2f}s, a mask evaluation "
            f"{units.evaluation:.2f}s per window, one setting on one prompt {run_words(units.untiered)} untiered and "
            f"{run_words(units.tiered)} tiered")


def run_words(price: RunPrice) -> str:
    """``1.20s + 150 ms/token``: a setting's price on one prompt."""
    return f"{price.prompt:.2f}s + {price.token * 1000:.0f} ms/token"


def budget_words(expected_seconds: float, budget_seconds: float) -> str:
    """How an estimate stands against its budget, in words that never call an overrun "within"."""
    minutes = budget_seconds / 60
    if expected_seconds <= budget_seconds:
        return f"within the {minutes:g} min budget"
    return f"OVER the {minutes:g} min budget"


def prompts_word(count: int) -> str:
    """``1 prompt`` / ``4 prompts``."""
    return f"{count} prompt" + ("" if count == 1 else "s")


#: Target forwards over each calibration window a search runs besides its evaluations (q's log-probs
#: and the stored states the evaluations start from; p's, a drafter's, cost less), and over each
#: held-out window (the target's and the best mask's; the drafter's again less).
SETUP_FORWARDS, HELDOUT_FORWARDS = 2, 2


def search_step_seconds(units: UnitCosts, n_cal: int, ratio: float) -> float:
    """One step of the mask search at ``ratio``: a mask evaluated on ``n_cal`` calibration windows
    and its share of a proposal."""
    return n_cal * units.evaluation_at(ratio) + units.proposal


def ratio_fixed_seconds(units: UnitCosts, n_cal: int, n_held: int) -> float:
    """What one ratio's search costs besides its steps: its setup over the calibration windows and
    its held-out agreement."""
    return SETUP_FORWARDS * n_cal * units.window + HELDOUT_FORWARDS * n_held * units.window


def search_seconds(units: UnitCosts, n_cal: int, n_held: int, ratios: tuple[float, ...], steps: int,
                   extra_steps: int) -> float:
    """The mask search's price: greedy calibration (once, shared by every ratio), then per ratio its
    fixed part (:func:`ratio_fixed_seconds`) and its steps (:func:`search_step_seconds`)."""
    total = (n_cal + n_held) * units.calibration_prompt()
    for index, ratio in enumerate(ratios):
        evaluations = steps if index == 0 else extra_steps
        total += ratio_fixed_seconds(units, n_cal, n_held) + evaluations * search_step_seconds(units, n_cal, ratio)
    return total


def tune_seconds(units: UnitCosts, grid: GridSize, masks: int, prompts: int) -> float:
    """The sweep's price: the reference (the target alone, priced as an untiered point: the same
    prefill and scoring, a token no dearer), the single-forward prices per mask, then every setting
    on every prompt."""
    untiered = 1 + grid.lenience
    tiered = grid.points(masks) - untiered
    forward_prices = COST_REPEATS * COST_TRIES * (SHARED_PASSES + MASK_PASSES * masks) * units.step
    return prompts * (units.sd_point * (1 + untiered) + units.tier_point * tiered) + forward_prices


def _calibration_sizes(units: UnitCosts, budget: float, file_prompts: int | None) -> tuple[int, int]:
    """Calibration and held-out prompts: a file's all (what it can spare held out), else 16 + 16
    halved while greedy calibration would take more than half the search's share."""
    if file_prompts is not None:
        n_held = 16 if file_prompts > 16 else file_prompts // 4
        return file_prompts - n_held, n_held
    n_cal, n_held = 16, 16
    while n_cal > 4 and (n_cal + n_held) * units.calibration_prompt() > budget * SEARCH_SHARE / 2:
        n_cal, n_held = max(4, n_cal // 2), max(2, n_held // 2)
    return n_cal, n_held


def _sized(units: UnitCosts, budget: float, ratios: tuple[float, ...], grids: list[GridSize], most_steps: int,
           cal: tuple[int, int], tune_available: int | None) -> Plan | None:
    """The largest sizes for one set of ratios within ``budget`` (None: not even the smallest fits)."""
    n_cal, n_held = cal
    least = min(MIN_TUNE_PROMPTS, tune_available) if tune_available is not None else MIN_TUNE_PROMPTS
    fixed = search_seconds(units, n_cal, n_held, ratios, 0, EXTRA_RATIO_STEPS)
    per_step = max(search_step_seconds(units, n_cal, ratios[0]), 1e-6)
    share = budget * SEARCH_SHARE - fixed  # the search's share, less what the smallest sweep must keep
    room = budget - fixed - tune_seconds(units, grids[-1], len(ratios), least)
    steps = int(max(0.0, min(share, room)) / per_step)
    steps = max(MIN_SEARCH_STEPS, min(most_steps, steps))
    search = search_seconds(units, n_cal, n_held, ratios, steps, EXTRA_RATIO_STEPS)
    most = min(MAX_TUNE_PROMPTS, tune_available) if tune_available is not None else MAX_TUNE_PROMPTS
    left = budget - search
    for index, grid in enumerate(grids):
        per_prompt = tune_seconds(units, grid, len(ratios), 1) - tune_seconds(units, grid, len(ratios), 0)
        prompts = min(most, int((left - tune_seconds(units, grid, len(ratios), 0)) / max(per_prompt, 1e-9)))
        if prompts >= least:
            return Plan(budget, n_cal, n_held, steps, ratios, EXTRA_RATIO_STEPS, index, grid.points(len(ratios)), prompts,
                        search, tune_seconds(units, grid, len(ratios), prompts))
    return None


def fit_plan(units: UnitCosts, budget_seconds: float, *, num_layers: int, most_steps: int, ratio: float,
             grids: list[GridSize], file_prompts: int | None = None, tune_available: int | None = None,
             extra_ratios: tuple[float, ...] = EXTRA_RATIOS, minutes: float | None = None) -> Plan:
    """The plan that fits ``budget_seconds`` (the time left after the probe) at :data:`FILL`.

    The most ratios first: a set of ratios is taken when its sizes keep the largest or middle grid
    on at least :data:`MIN_TUNE_PROMPTS` prompts and the main search at least ``num_layers`` masks;
    else fewer ratios. One ratio is planned down to the smallest grid, the fewest prompts and
    :data:`MIN_SEARCH_STEPS` masks; when even that does not fit, :class:`BudgetTooSmall` names the
    minutes it needs (``minutes``: the budget asked, for the message; the probe's time is counted
    by the caller, as ``minutes * 60 - budget_seconds``). ``grids``: the sweep's grid sizes, largest first; ``tune_available``: how many
    tuning prompts exist (a prompts file's count), None for no limit."""
    if budget_seconds <= 0 or not math.isfinite(budget_seconds):
        budget_seconds = 0.0
    fill = budget_seconds * FILL
    cal = _calibration_sizes(units, fill, file_prompts)
    main = (ratio,)
    extras = tuple(r for r in extra_ratios if r != ratio)
    for count in range(len(extras), 0, -1):
        ratios = main + extras[:count]
        plan = _sized(units, fill, ratios, grids[:2], most_steps, cal, tune_available)
        if plan is not None and plan.search_steps >= min(most_steps, num_layers):
            return plan
    plan = _sized(units, fill, main, grids, most_steps, cal, tune_available)
    if plan is None:  # fewer calibration prompts before giving up
        plan = _sized(units, fill, main, grids, most_steps, _calibration_sizes(units, 0.0, file_prompts), tune_available)
    if plan is not None:
        if plan.search_steps < most_steps:
            plan.notes.append(f"the search evaluates {plan.search_steps} masks (the budget's share), not the "
                              f"{most_steps} it would take unbounded")
        if len(extras):
            plan.notes.append(f"only the skip ratio {ratio:g} is tried: the budget leaves no time for "
                              f"{', '.join(f'{r:g}' for r in extras)}")
        return plan
    smallest = smallest_seconds(units, ratio, grids[-1], file_prompts, tune_available)
    spent = minutes * 60 - budget_seconds if minutes is not None else 0.0  # the probe, counted in the budget
    needed = math.ceil((smallest / FILL + spent) / 6) / 10  # minutes, rounded up to a tenth
    least = min(MIN_TUNE_PROMPTS, tune_available) if tune_available is not None else MIN_TUNE_PROMPTS
    raise BudgetTooSmall(minutes if minutes is not None else budget_seconds / 60, needed,
                         f"{MIN_SEARCH_STEPS} masks, {grids[-1].points(1)} settings on {prompts_word(least)}")


def smallest_seconds(units: UnitCosts, ratio: float, grid: GridSize, file_prompts: int | None,
                     tune_available: int | None) -> float:
    """The smallest plan's price: the fewest calibration prompts, masks, settings and tuning prompts."""
    n_cal, n_held = _calibration_sizes(units, 0.0, file_prompts)
    least = min(MIN_TUNE_PROMPTS, tune_available) if tune_available is not None else MIN_TUNE_PROMPTS
    return (search_seconds(units, n_cal, n_held, (ratio,), MIN_SEARCH_STEPS, 0)
            + tune_seconds(units, grid, 1, least))


class Deadline:
    """The end of a budget on ``clock`` (default :func:`time.perf_counter`; a test passes a fake one).

    A stage asks :meth:`allows` before each unit of work, with that unit's measured price: the unit
    starts only when it ends by the deadline, so a stage that runs long stops between units."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.perf_counter, start: float | None = None) -> None:
        self.clock = clock
        self.end = (clock() if start is None else start) + seconds

    def remaining(self) -> float:
        return self.end - self.clock()

    def allows(self, seconds: float) -> bool:
        """Whether a unit of work priced ``seconds`` still ends by the deadline."""
        return self.clock() + seconds <= self.end

    def sooner(self, seconds: float) -> "Deadline":
        """This deadline brought forward by ``seconds`` (time kept for the stages after one)."""
        earlier = Deadline(0.0, self.clock, start=self.end - seconds)
        return earlier


__all__ = ["BudgetTooSmall", "Deadline", "FILL", "GridSize", "Plan", "RunPrice", "UnitCosts", "budget_words", "fit_plan",
           "prompts_word", "ratio_fixed_seconds", "run_words", "search_seconds", "search_step_seconds", "smallest_seconds",
           "tune_seconds", "units_words"]
