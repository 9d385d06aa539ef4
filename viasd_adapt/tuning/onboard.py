"""``viasd models add``: a user's target and drafter to a tuned, named pair, in one call.

:func:`add_pair` checks the pair (loads both, same vocabulary), measures one decode step and one
calibration window of the target and sizes the mask search and the tuning sweep to a budget given
in minutes (the estimate is said before anything long starts), searches the mask with a progress
bar, tunes, and writes a pair folder that ``--pair NAME`` and ``load_pair("NAME")`` find:
``pair.json`` naming the user's files where they are (never copied, so never deleted), the mask,
``tuned.json`` and ``report.json``.

Why a hidden work folder and one rename: the pair is built in ``<root>/.NAME.adding/`` and renamed
to ``<root>/NAME`` only when every file is in it. A kill at any point leaves either no pair or the
whole pair (``os.rename`` of a folder onto a free name is atomic), and the registry skips hidden
folders. The work folder also makes the command resumable stage by stage: a second run with the
same inputs reuses the mask and ``tuned.json`` already written there (each stage's file is written
atomically), and a run with other inputs is refused until ``restart`` removes that work folder
(ours; nothing of the user's is ever removed). One run of a name works at a time: it holds a lock
(``<root>/.NAME.lock``, :func:`viasd_adapt.io.hold_lock`) from before the work folder is opened
until the pair is published, and a second run says that the first is running.
"""

from __future__ import annotations

import math
import os
import re
import resource
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from viasd_adapt.routing.hardware import hardware_stamp
from viasd_adapt.config.onboard_report import REPORT_FILENAME, OnboardEstimate, OnboardReport, StageTime
from viasd_adapt.config.pair_file import DTYPES, PROMPT_LOOKUP, PairFile, PairTarget
from viasd_adapt.config.tuned import TUNED_FILENAME
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.io import hold_lock, make_folder
from viasd_adapt.memory import release_free_memory
from viasd_adapt.models.registry import DECLARATION, cache_dir, shipped_names, work_folder

MASK_FILENAME = "mask.json"
#: The budget ``viasd models add`` gives itself when none is asked for (minutes).
DEFAULT_MINUTES = 30.0
#: Shares of the budget: the mask search (calibration included) and the tuning sweep.
SEARCH_SHARE, TUNE_SHARE = 0.45, 0.45
#: Tokens each tuning prompt generates, and the fewest prompts a verdict is stated on.
TUNE_NEW_TOKENS, MIN_TUNE_PROMPTS, MAX_TUNE_PROMPTS = 32, 4, 12
#: A tuning point's time over its tokens in decode steps. A point does more than decode: its target
#: passes verify blocks (dearer than a one-token step), fixed-tier points run up to 1.6 passes per
#: token, and every output is scored by the target. Measured at the shape of Qwen2-0.5B (2-core
#: x86_64 CPU, prompt lookup, 33 points on 4 prompts): 2,231 s against 688 s of decode steps.
TUNE_POINT_FACTOR = 3.2
#: The fewest and most masks the search evaluates, whatever the budget.
MIN_SEARCH_STEPS = 4


@dataclass(frozen=True)
class AddRequest:
    """What to onboard: the pair's name, the user's files, the budget and how to run."""

    name: str
    target: str | Path
    draft: str | Path  # a model folder, a .gguf file, or "prompt-lookup"
    eagle_head: str | Path | None = None
    calib: str | Path | None = None  # a prompts file, or "spec-bench[:TASKS]"; None: the search's default
    minutes: float = DEFAULT_MINUTES
    threads: int = 1
    dtype: str = "auto"  # auto, float32, bfloat16, float16 (viasd_adapt.models.placement); pair.json records the one used
    chat: str = "auto"
    root: Path | None = None  # where pairs live [default: the cache, $VIASD_CACHE]
    seed: int = 0
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    device_map: Any = None  # a target spread over devices: "auto", ... (viasd_adapt.models.placement)

    @property
    def folder(self) -> Path:
        return (self.root or cache_dir()) / self.name

    @property
    def work(self) -> Path:
        return work_folder(self.root or cache_dir(), self.name)

    @property
    def lock(self) -> Path:
        """The lock file one run of this name holds while it works (:func:`viasd_adapt.io.hold_lock`)."""
        return (self.root or cache_dir()) / f".{self.name}.lock"


#: A pair name: letters, digits, '-' and '_', at most this many characters (a folder name on any file system).
NAME_LIMIT = 64
_NAME = re.compile(r"[A-Za-z0-9_-]+")


def check_name(name: str) -> None:
    """The pair name rule: letters, digits, '-' and '_', at most :data:`NAME_LIMIT` characters, not
    the name of a shipped pair (``--pair demo`` must keep meaning the shipped demo)."""
    if not _NAME.fullmatch(name or ""):
        raise ConfigError(f"{name!r} is not a pair name: use only letters, digits, '-' or '_'")
    if len(name) > NAME_LIMIT:
        raise ConfigError(f"a pair name has at most {NAME_LIMIT} characters; {name[:20]}... has {len(name)}")
    if name in shipped_names():
        raise ConfigError(f"{name!r} is the name of a pair shipped with viasd-adapt (reserved: "
                          f"{', '.join(shipped_names())}); choose another name")


def check_request(request: AddRequest) -> None:
    """Every input error, before a model loads: the name, the files, the budget, an existing pair."""
    name = request.name
    check_name(name)
    if request.folder.exists():
        raise ConfigError(f"a pair named {name!r} already exists at {request.folder}; choose another name "
                          "(viasd models add never replaces or deletes a folder)")
    if not (math.isfinite(request.minutes) and request.minutes > 0):
        raise ConfigError(f"--minutes must be a finite number more than 0, got {request.minutes}")
    if request.dtype not in ("auto", *DTYPES):
        raise ConfigError(f"--dtype must be one of auto, {', '.join(DTYPES)}, got {request.dtype!r}")
    for role, path in (("target", request.target), ("drafter", request.draft), ("EAGLE head", request.eagle_head)):
        if path is not None and str(path) != PROMPT_LOOKUP and not Path(path).expanduser().exists():
            raise ConfigError(f"the {role} {path} does not exist")


def placed(request: AddRequest) -> AddRequest:
    """``request`` with its placement checked (CUDA asked without CUDA, a bad device map: one line,
    before any load) and ``dtype`` ``auto`` resolved to the dtype the weights load in, which
    ``pair.json`` records (:func:`viasd_adapt.models.placement.concrete_dtype`)."""
    from viasd_adapt.models.placement import concrete_dtype, placement

    where = placement(request.device, request.dtype, request.device_map)
    return replace(request, dtype=concrete_dtype(request.target, where))


def _declaration(request: AddRequest, **files: str | None) -> PairFile:
    """``pair.json``: the user's files by absolute path, where they are, and the dtype the weights load in."""
    if request.dtype == "auto":
        request = placed(request)
    draft = str(request.draft) if str(request.draft) == PROMPT_LOOKUP else str(Path(request.draft).expanduser().resolve())
    head = str(Path(request.eagle_head).expanduser().resolve()) if request.eagle_head else None
    return PairFile(description=f"added with viasd models add: {Path(request.target).name} with {Path(str(request.draft)).name}",
                    target=PairTarget(path=str(Path(request.target).expanduser().resolve())), drafter=draft,
                    eagle_head=head, dtype=request.dtype, **files)


def _same_inputs(found: PairFile, wanted: PairFile) -> bool:
    keys = ("drafter", "eagle_head", "dtype")
    return found.target.path == wanted.target.path and all(getattr(found, k) == getattr(wanted, k) for k in keys)


def open_work_folder(request: AddRequest, restart: bool, say: Callable[[str], None]) -> Path:
    """The work folder: new, or an interrupted run's with the same inputs (resumed); another run's
    inputs are refused unless ``restart`` (then that folder, which this command made, is removed)."""
    import shutil

    work, wanted = request.work, _declaration(request)
    declaration = work / DECLARATION
    if work.exists() and restart:
        say(f"restart: removing the interrupted run's work folder {work}")
        shutil.rmtree(work)
    finished = [f for f in (MASK_FILENAME, TUNED_FILENAME) if (work / f).is_file()]
    if work.exists() and not finished:  # nothing of another run's to keep: this run's inputs replace its own
        wanted.save(declaration)
        return work
    if work.exists():
        found = PairFile.load(declaration) if declaration.is_file() else None
        if found is None or not _same_inputs(found, wanted):
            raise ConfigError(f"an interrupted `viasd models add {request.name}` with other inputs left {work}; "
                              "pass --restart to start over (it removes only that work folder)")
        say(f"resuming the interrupted run in {work} (kept: {', '.join(finished)})")
        return work
    make_folder(work, "work folder of `viasd models add`")
    wanted.save(declaration)
    return work


# ----------------------------------------------------------------------------- estimate


def _median_seconds(run: Callable[[], Any], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_step(target, window_tokens: int) -> tuple[float, float]:
    """``(one decode step with a KV cache, one forward over a window of window_tokens)`` of the target, in seconds."""
    import torch

    device = next(target.parameters()).device
    ids = torch.ones((1, window_tokens), dtype=torch.long, device=device)
    with torch.no_grad():
        window = _median_seconds(lambda: target(ids, use_cache=False), repeats=2)
    return measure_one_token_step(target), window


def measure_one_token_step(model) -> float:
    """One one-token forward of ``model`` (the target, or a drafter model a tuning point drafts
    with), in seconds: a decode step without its history (attention over a short history is a small
    part of one)."""
    import torch

    ids = torch.ones((1, 1), dtype=torch.long, device=next(model.parameters()).device)
    with torch.no_grad():
        return _median_seconds(lambda: model(ids, use_cache=False), repeats=3)


def tune_points(grid, adaptive: bool) -> int:
    """How many settings a sweep of ``grid`` on one mask measures (plain SD, the lossless cascade,
    each lenient tolerance, each lossy setting, and the two adaptive twins)."""
    lossy = len(grid.alpha1) * len(grid.alpha2) * len(grid.greedy_gates)
    return 2 + len(grid.lenience) + lossy + (2 if adaptive else 0)


def plan(request: AddRequest, step: float, window: float, num_layers: int, ratio: float, file_prompts: int | None,
         draft_step: float = 0.0):
    """The sizes that fit the budget: ``(OnboardEstimate, SearchConfig changes, TuneGrid)``.

    Priced in measured seconds: a calibration prompt costs its greedy tokens in decode steps, a mask
    evaluation one slim forward over every calibration window, a tuning point its prompts' tokens
    in decode steps times :data:`TUNE_POINT_FACTOR` (measured) plus, with a drafter model, a whole
    block of drafter forwards (``draft_step`` each) per token: what drafting costs when the target
    keeps one token a block, as a drafter nobody has measured on this target may do. A floor, not
    a bound: HF assisted generation's drafted token costs more than a bare forward (its own
    generate loop), and the tune stage of a poor drafter pair ran 1.46x this price."""
    from viasd_adapt.search.config import DEFAULT_NEW_TOKENS, default_steps
    from viasd_adapt.tuning.tune import TuneGrid

    budget = request.minutes * 60
    notes: list[str] = []
    n_cal, n_held = 16, 16
    if file_prompts is not None:  # the whole file; what it can spare held out (search.prompt_ids.fit_heldout)
        n_held = n_held if file_prompts > n_held else file_prompts // 4
        n_cal = file_prompts - n_held
    per_prompt = DEFAULT_NEW_TOKENS * step
    search_budget = budget * SEARCH_SHARE
    while file_prompts is None and n_cal > 4 and (n_cal + n_held) * per_prompt > search_budget / 2:
        n_cal, n_held = max(4, n_cal // 2), max(2, n_held // 2)
    calibrate = (n_cal + n_held) * per_prompt
    evaluation = n_cal * window * (1 - ratio) + 1e-3
    steps = int(max(0.0, search_budget - calibrate) / evaluation)
    most = default_steps(num_layers)
    steps = max(MIN_SEARCH_STEPS, min(most, steps))
    if steps < most:
        notes.append(f"the search evaluates {steps} masks (the budget's share), not the {most} it would take unbounded")
    tune_budget = budget * TUNE_SHARE
    grids = [TuneGrid(), TuneGrid(alpha1=(0.0, 0.5), alpha2=(0.0, 0.3), lenience=(0.4, 0.8), greedy_gates=("proposer",)),
             TuneGrid(alpha1=(0.5,), alpha2=(0.3,), lenience=(0.6,), greedy_gates=("proposer",))]
    per_tune_prompt = TUNE_NEW_TOKENS * (step * TUNE_POINT_FACTOR + draft_step * grids[0].gamma)  # one setting, one prompt
    for grid in grids:
        prompts = int(tune_budget / (tune_points(grid, True) + 1) / per_tune_prompt)
        if prompts >= MIN_TUNE_PROMPTS:
            break
    prompts = max(MIN_TUNE_PROMPTS, min(MAX_TUNE_PROMPTS, prompts))
    points = tune_points(grid, True)
    expected = calibrate + steps * evaluation + (points + 1) * prompts * per_tune_prompt
    if expected > budget * 1.1:
        notes.append(f"even the smallest sizes take about {expected / 60:.1f} min here, over the {request.minutes:g} asked")
    estimate = OnboardEstimate(minutes=request.minutes, step_seconds=round(step, 4), window_seconds=round(window, 4),
                               draft_step_seconds=round(draft_step, 4),
                               calibration_prompts=n_cal, heldout_prompts=n_held, search_steps=steps, tune_prompts=prompts,
                               tune_points=points, expected_minutes=round(expected / 60, 2), notes=notes)
    strategy = "guided" if steps >= 2 * num_layers else "dimr"
    search = dict(steps=steps, strategy=strategy, patience=max(steps, 1), compare_random=0)
    return estimate, search, grid


# ----------------------------------------------------------------------------- stages


def _say_default(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _peak_memory_mb() -> float:
    """This process's peak resident memory (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _calibration(request: AddRequest, estimate: OnboardEstimate, search: dict):
    from viasd_adapt.search.config import DEFAULTS, CalibrationConfig

    calibration = CalibrationConfig(calib_file=request.calib, n_calibration=estimate.calibration_prompts,
                                    n_heldout=estimate.heldout_prompts, chat=request.chat)
    return replace(DEFAULTS, seed=request.seed, calibration=calibration, **search)


def _tune_prompts(request: AddRequest, pair, count: int):
    """Prompts for the sweep: the user's file (all of it), else Spec-Bench's calibration split for a
    chat model, else held-out stdlib snippets (what ``viasd tune`` calibrates on)."""
    from viasd_adapt.prompts.chat import has_chat_template
    from viasd_adapt.prompts.files import read_prompts_file
    from viasd_adapt.prompts.spec_bench import is_spec_bench
    from viasd_adapt.prompts.splits import tune_snippets

    calib = str(request.calib) if request.calib is not None else None
    if calib is not None and not is_spec_bench(calib):
        return read_prompts_file(calib, "calibration file")[:count]
    if calib is not None or has_chat_template(pair.tokenizer):
        from viasd_adapt.bench.prompt_sets import tune_spec_bench_prompts

        return tune_spec_bench_prompts(pair, count, request.chat, TUNE_NEW_TOKENS)
    return tune_snippets(count)


def add_pair(request: AddRequest, *, restart: bool = False, say: Callable[[str], None] | None = None,
             progress: bool = True, note: Callable[[str], None] | None = None) -> Path:
    """Onboards ``request``'s pair (module docstring) and returns its folder.

    ``say`` gets what the run reports (the check, the estimate, the search's and the tuning's
    results, the pair written; default: stderr), ``note`` its progress (each stage's time, a
    resumed or restarted run; default: ``say``); ``progress`` shows tqdm bars. Each stage that
    left its file in the work folder (the mask, ``tuned.json``) is resumed from it. Input errors
    come before torch is imported (then the device's, which needs it, before anything is written);
    a second run of the same name while one works is refused."""
    started = time.perf_counter()
    check_request(request)
    request = placed(request)  # the device checked (torch imported), --dtype auto made the one pair.json records
    say = say or _say_default
    make_folder(request.root or cache_dir(), "folder of pairs")
    with hold_lock(request.lock, f"`viasd models add {request.name}`"):
        return _add_locked(request, restart, say, note or say, progress, started)


def _add_locked(request: AddRequest, restart: bool, say: Callable[[str], None], note: Callable[[str], None],
                progress: bool, started: float) -> Path:
    """:func:`add_pair` once its inputs are checked and its lock is held."""
    import torch

    from viasd_adapt.bench.session import quiet_transformers
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.search.config import DEFAULTS
    from viasd_adapt.search.prompt_ids import count_file_prompts

    file_prompts = count_file_prompts(request.calib)
    torch.set_num_threads(request.threads)
    quiet_transformers()
    stages = _Stages(note)

    work = open_work_folder(request, restart, note)
    began = time.perf_counter()
    dtype = request.dtype if request.dtype != "float32" else None
    pair = load_pair(request.target, request.draft, need_mask=False, device=request.device, eagle_head=request.eagle_head,
                     dtype=dtype, device_map=request.device_map)
    num_layers = find_decoder_stack(pair.target).num_layers
    say(f"checked: {num_layers}-layer target, drafter {'prompt lookup' if pair.lookup else type(pair.draft).__name__} "
        "on the same vocabulary")
    stages.record("load and check", began)

    began = time.perf_counter()
    step, window = measure_step(pair.target, DEFAULTS.calibration.max_prompt_tokens + DEFAULTS.calibration.new_tokens)
    draft_step = 0.0 if pair.draft is None else measure_one_token_step(pair.draft)
    estimate, search, grid = plan(request, step, window, num_layers, DEFAULTS.ratio, file_prompts, draft_step)
    drafting = f", a drafter step {draft_step * 1000:.0f} ms" if draft_step else ""
    say(f"estimate: about {estimate.expected_minutes:.1f} min within the {request.minutes:g} min budget "
        f"(a decode step {step * 1000:.0f} ms{drafting}, a calibration window {window:.2f}s): calibrate on "
        f"{estimate.calibration_prompts} prompts, search {estimate.search_steps} masks, tune {estimate.tune_points} "
        f"settings on {estimate.tune_prompts} prompts")
    if file_prompts is not None and estimate.heldout_prompts < DEFAULTS.calibration.n_heldout:
        say(f"note: {request.calib} has {file_prompts} prompts: {estimate.heldout_prompts} held out for the agreement "
            f"report (of {DEFAULTS.calibration.n_heldout} by default), {estimate.calibration_prompts} calibrated on")
    for remark in estimate.notes:
        say(f"note: {remark}")
    stages.record("estimate", began)

    mask_path = work / MASK_FILENAME
    began = time.perf_counter()
    resumed = _search_stage(request, pair, estimate, search, mask_path, say, progress, note)
    stages.record("search", began, resumed)

    began = time.perf_counter()
    verdict, resumed = _tune_stage(request, pair, estimate, grid, mask_path, work, progress)
    stages.record("tune", began, resumed)
    for line in verdict:
        say(line)

    began = time.perf_counter()
    report = OnboardReport(name=request.name, target=Path(request.target).name, drafter=Path(str(request.draft)).name,
                           threads=request.threads, dtype=request.dtype, estimate=estimate, stages=stages.times,
                           verdict=verdict, peak_memory_mb=round(_peak_memory_mb(), 1),
                           total_seconds=round(time.perf_counter() - started, 1), hardware=hardware_stamp(pair.target))
    report.save(work / REPORT_FILENAME)
    _declaration(request, mask=MASK_FILENAME, tuned=TUNED_FILENAME, report=REPORT_FILENAME).save(work / DECLARATION)
    publish(work, request.folder)
    stages.record("write the pair", began)
    say(f"pair {request.name!r} -> {request.folder} (peak memory {report.peak_memory_mb:.0f} MB, "
        f"{time.perf_counter() - started:.0f}s); use it with `viasd generate --pair {request.name}` or "
        f"load_pair({request.name!r})")
    return request.folder


class _Stages:
    """The time each onboarding stage took, said as it ends and kept for the report."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.times: list[StageTime] = []

    def record(self, name: str, began: float, resumed: bool = False) -> None:
        release_free_memory()  # what the stage freed goes back to the system before the next one grows
        self.times.append(StageTime(stage=name, seconds=round(time.perf_counter() - began, 2), resumed=resumed))
        self.say(f"[{name}] {self.times[-1].seconds:.1f}s" + (" (resumed)" if resumed else ""))


def _search_stage(request: AddRequest, pair: Any, estimate: OnboardEstimate, search: Any, mask_path: Path,
                  say: Callable[[str], None], progress: bool, note: Callable[[str], None] | None = None) -> bool:
    """Searches the pair's mask into ``mask_path``; True when a mask of an interrupted run was there
    already (checked against the target's weights, then kept)."""
    from tqdm import tqdm

    from viasd_adapt.routing.mask import load_mask

    if mask_path.is_file():
        load_mask(mask_path, pair.target)  # a mask of other weights is refused, naming the file
        return True
    from viasd_adapt.search.pipeline import prompt_lookup_stand_in, search_pair
    from viasd_adapt.search.report import ReportInput, describe as describe_search

    config = _calibration(request, estimate, search)
    draft = prompt_lookup_stand_in(pair.target) if pair.lookup is not None else pair.draft
    bar = tqdm(total=estimate.search_steps, desc="mask search", unit="mask", disable=not progress, leave=False)

    def on_step(evaluation, best):
        bar.update(1)
        bar.set_postfix(best=f"{best:.3f}")

    info = ReportInput(target_name=Path(request.target).name, draft_name=Path(str(request.draft)).name,
                       out=mask_path, started=time.perf_counter())
    try:
        outcome = search_pair(pair.target, draft, pair.tokenizer, config, prompt_lookup=pair.lookup is not None,
                              on_step=on_step, info=info, say=note or say)
    finally:
        bar.close()
    for line in describe_search(outcome):
        say(line)
    return False


def _tune_stage(request: AddRequest, pair: Any, estimate: OnboardEstimate, grid: Any, mask_path: Path, work: Path,
                progress: bool) -> tuple[list[str], bool]:
    """Tunes the pair with its mask into the work folder's ``tuned.json``; its verdict lines, and True
    when the file of an interrupted run was there already (checked against the target, then kept)."""
    from tqdm import tqdm

    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.routing.mask import check_tuned_model
    from viasd_adapt.tuning.tune import Budget, artifact_of, describe
    from viasd_adapt.tuning.tune import tune as run_tune

    tuned_path = work / TUNED_FILENAME
    if tuned_path.is_file():
        tuned = TunedSettings.load(tuned_path)
        check_tuned_model(tuned, pair.target, source=str(tuned_path))
        return list(getattr(tuned.report, "verdict", None) or []), True
    tuning = load_pair(pair.target, pair.draft if pair.lookup is None else PROMPT_LOOKUP, mask_path,
                       tokenizer=pair.tokenizer)
    prompts = _tune_prompts(request, tuning, estimate.tune_prompts)
    bar = tqdm(total=estimate.tune_points, desc="tune", unit="setting", disable=not progress, leave=False)
    try:
        result = run_tune(tuning, prompts, max_new_tokens=TUNE_NEW_TOKENS, grid=grid, budget=Budget(),
                          seed=request.seed, progress=lambda m: None, bar=lambda total: bar, chat=request.chat)
    finally:
        bar.close()
    verdict = describe(result)
    artifact = artifact_of(result, tuning, folder=work)
    artifact.report.verdict = verdict  # an extra field of the report: what a resumed run prints again
    artifact.save(tuned_path)
    return verdict, False


def publish(work: Path, folder: Path) -> None:
    """Renames the finished work folder onto the pair's name: atomic, and never over an existing folder."""
    if folder.exists():
        raise ViasdError(f"{folder} appeared while the pair was being made; the finished pair stays in {work}")
    os.rename(work, folder)


__all__ = ["AddRequest", "DEFAULT_MINUTES", "MASK_FILENAME", "NAME_LIMIT", "add_pair", "check_name", "check_request", "measure_one_token_step", "measure_step", "open_work_folder",
           "plan", "publish", "tune_points"]
