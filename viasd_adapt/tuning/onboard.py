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
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from viasd_adapt.process_settings import leaves_process_settings
from viasd_adapt.config.onboard_report import REPORT_FILENAME, OnboardEstimate, OnboardReport, StageTime
from viasd_adapt.tuning.budget_plan import (MAX_TUNE_PROMPTS, MIN_TUNE_PROMPTS, TUNE_TOKENS, BudgetTooSmall, Deadline,
                                            units_words)
from viasd_adapt.config.pair_file import DTYPES, PROMPT_LOOKUP, PairFile, PairTarget
from viasd_adapt.config.tuned import TUNED_FILENAME
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.io import hold_lock, make_folder
from viasd_adapt.memory import release_free_memory
from viasd_adapt.models.registry import DECLARATION, cache_dir, shipped_names, work_folder

MASK_FILENAME = "mask.json"
#: The budget ``viasd models add`` gives itself when none is asked for (minutes).
DEFAULT_MINUTES = 30.0
#: Tokens each tuning prompt generates.
TUNE_NEW_TOKENS = TUNE_TOKENS
#: The clock the budget is kept on (``add_pair``'s default; a test swaps in a fake one, scoped).
CLOCK: Callable[[], float] = time.perf_counter


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
             progress: bool = True, note: Callable[[str], None] | None = None,
             clock: Callable[[], float] | None = None) -> Path:
    """Onboards ``request``'s pair (module docstring) and returns its folder.

    ``say`` gets what the run reports (the check, the estimate, the search's and the tuning's
    results, the pair written; default: stderr), ``note`` its progress (each stage's time, a
    resumed or restarted run; default: ``say``); ``progress`` shows tqdm bars. Each stage that
    left its file in the work folder (the mask, ``tuned.json``) is resumed from it. Input errors
    come before torch is imported (then the device's, which needs it, before anything is written);
    a second run of the same name while one works is refused.

    ``--minutes`` is kept from the end of the first load: a probe prices each stage's unit of work,
    the plan is sized to fit what is left (or the run stops here, naming the minutes it needs), and
    each long stage stops between units when its share runs out. ``clock``: the time source of the
    probe, the plan and the stages (default :data:`CLOCK`; a test passes a fake one)."""
    clock = clock or CLOCK
    started = clock()
    check_request(request)
    request = placed(request)  # the device checked (torch imported), --dtype auto made the one pair.json records
    say = say or _say_default
    make_folder(request.root or cache_dir(), "folder of pairs")
    with hold_lock(request.lock, f"`viasd models add {request.name}`"):
        return _add_locked(request, restart, say, note or say, progress, started, clock)


@leaves_process_settings
def _add_locked(request: AddRequest, restart: bool, say: Callable[[str], None], note: Callable[[str], None],
                progress: bool, started: float, clock: Callable[[], float]) -> Path:
    """:func:`add_pair` once its inputs are checked and its lock is held."""
    import torch

    from viasd_adapt.bench.session import quiet_transformers
    from viasd_adapt.routing.hardware import hardware_stamp
    from viasd_adapt.frameworks.planning import ChosenPaths, RunOptions, plan_run
    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.tuning.grid import MEASURED_ON
    from viasd_adapt.search.prompt_ids import count_file_prompts

    file_prompts = count_file_prompts(request.calib)
    torch.set_num_threads(request.threads)
    quiet_transformers()
    stages = _Stages(note, clock)

    work = open_work_folder(request, restart, note)
    began = clock()
    dtype = request.dtype if request.dtype != "float32" else None
    # the planner loads the pair (no mask yet: this run searches it; no tuned.json: it writes it)
    options = RunOptions(device=request.device, dtype=dtype, device_map=request.device_map, need_mask=False, read_tuned=False)
    pair = plan_run(ChosenPaths(request.target, request.draft, request.eagle_head), options, MEASURED_ON).pair
    num_layers = find_decoder_stack(pair.target).num_layers
    say(f"checked: {num_layers}-layer target, drafter {'prompt lookup' if pair.lookup else type(pair.draft).__name__} "
        "on the same vocabulary")
    stages.record("load and check", began)

    deadline = Deadline(request.minutes * 60, clock)  # the budget runs from the end of the first load
    planned, prompts = _estimate_stage(request, pair, num_layers, file_prompts, deadline, stages, say)

    began = clock()
    masks, resumed = _search_stage(request, pair, planned, work, deadline, say, progress, note)
    mask_paths = [path for _, path in masks]
    stages.record("search", began, resumed)

    began = clock()
    verdict, resumed, result = _tune_stage(request, pair, planned, prompts, mask_paths, work, deadline, progress)
    stages.record("tune", began, resumed)
    from viasd_adapt.tuning.onboard_ratios import ratio_lines, ratios_tried

    tried = ratios_tried(masks, result, work, request.folder)
    for line in [*verdict, *ratio_lines(tried)]:
        say(line)

    began = clock()
    after_load = round(clock() - deadline.end + request.minutes * 60, 1)
    report = OnboardReport(name=request.name, target=Path(request.target).name, drafter=Path(str(request.draft)).name,
                           threads=request.threads, dtype=request.dtype, estimate=planned.estimate, stages=stages.times,
                           verdict=verdict, ratios=tried, budget_minutes=request.minutes, seconds_after_load=after_load,
                           peak_memory_mb=round(_peak_memory_mb(), 1), total_seconds=round(clock() - started, 1),
                           hardware=hardware_stamp(pair.target))
    report.save(work / REPORT_FILENAME)
    mask_file = chosen_mask_file(work)
    _declaration(request, mask=mask_file, tuned=TUNED_FILENAME, report=REPORT_FILENAME).save(work / DECLARATION)
    publish(work, request.folder)
    stages.record("write the pair", began)
    say(f"pair {request.name!r} -> {request.folder} (peak memory {report.peak_memory_mb:.0f} MB, "
        f"{clock() - started:.0f}s; {after_load / 60:.1f} min after the first load, estimate "
        f"{planned.estimate.expected_minutes:.1f}, budget {request.minutes:g}); "
        f"use it with `viasd generate --pair {request.name}` or load_pair({request.name!r})")
    return request.folder


def _estimate_stage(request: AddRequest, pair: Any, num_layers: int, file_prompts: int | None, deadline: Deadline,
                    stages: "_Stages", say: Callable[[str], None]):
    """The probe and the plan (:mod:`viasd_adapt.tuning.onboard_plan`), said before anything long
    starts; a budget the smallest plan does not fit stops the run here. Returns the plan and the
    tuning prompts (read once: their count is part of the plan)."""
    from viasd_adapt.prompts.chat import encode_prompt
    from viasd_adapt.search.config import DEFAULTS
    from viasd_adapt.tuning.onboard_plan import estimate_line, plan_onboarding
    from viasd_adapt.tuning.probe import measure_units

    began = deadline.clock()
    prompts = _tune_prompts(request, pair, MAX_TUNE_PROMPTS)
    first = prompts[0]
    ids = first.ids if hasattr(first, "ids") else encode_prompt(pair.tokenizer, first, request.chat)
    measured = measure_units(pair, list(ids), num_layers=num_layers, ratio=DEFAULTS.ratio, clock=deadline.clock,
                             prompt_tokens=DEFAULTS.calibration.max_prompt_tokens, new_tokens=DEFAULTS.calibration.new_tokens)
    probe_seconds = deadline.clock() - began
    lengths = [len(p.ids if hasattr(p, "ids") else encode_prompt(pair.tokenizer, p, request.chat)) for p in prompts]
    units = measured.at_prompt_lengths(lengths[:MIN_TUNE_PROMPTS], len(ids))
    try:
        planned = plan_onboarding(units, minutes=request.minutes, probe_seconds=probe_seconds, num_layers=num_layers,
                                  ratio=DEFAULTS.ratio, file_prompts=file_prompts, tune_available=len(prompts))
        if planned.estimate.tune_prompts > MIN_TUNE_PROMPTS:  # priced again at the prompts the plan runs
            units = measured.at_prompt_lengths(lengths[:planned.estimate.tune_prompts], len(ids))
            planned = plan_onboarding(units, minutes=request.minutes, probe_seconds=probe_seconds, num_layers=num_layers,
                                      ratio=DEFAULTS.ratio, file_prompts=file_prompts, tune_available=len(prompts))
    except BudgetTooSmall:
        say(f"probe {probe_seconds:.1f}s: {units_words(units)}")  # what the refusal's minutes are priced from
        raise
    estimate = planned.estimate
    say(estimate_line(estimate))
    if file_prompts is not None and estimate.heldout_prompts < DEFAULTS.calibration.n_heldout:
        say(f"note: {request.calib} has {file_prompts} prompts: {estimate.heldout_prompts} held out for the agreement "
            f"report (of {DEFAULTS.calibration.n_heldout} by default), {estimate.calibration_prompts} calibrated on")
    for remark in estimate.notes:
        say(f"note: {remark}")
    stages.record("estimate", began)
    return planned, prompts[:estimate.tune_prompts]


class _Stages:
    """The time each onboarding stage took, said as it ends and kept for the report."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float] = time.perf_counter) -> None:
        self.say, self.clock = say, clock
        self.times: list[StageTime] = []

    def record(self, name: str, began: float, resumed: bool = False) -> None:
        release_free_memory()  # what the stage freed goes back to the system before the next one grows
        self.times.append(StageTime(stage=name, seconds=round(self.clock() - began, 2), resumed=resumed))
        self.say(f"[{name}] {self.times[-1].seconds:.1f}s" + (" (resumed)" if resumed else ""))


def _search_stage(request: AddRequest, pair: Any, planned: Any, work: Path, deadline: Deadline,
                  say: Callable[[str], None], progress: bool,
                  note: Callable[[str], None] | None = None) -> tuple[list[tuple[float, Path]], bool]:
    """Searches one mask per planned skip ratio into the work folder (``mask.json`` for the main
    one); each ratio tried with its mask file, and True when the main mask of an interrupted run was there already."""
    from tqdm import tqdm

    from viasd_adapt.search.pipeline import prompt_lookup_stand_in
    from viasd_adapt.tuning.onboard_ratios import search_ratios

    estimate, plan = planned.estimate, planned.plan
    config = _calibration(request, estimate, planned.search)
    draft = prompt_lookup_stand_in(pair.target) if pair.lookup is not None else pair.draft
    total = plan.search_steps + plan.extra_steps * (len(plan.ratios) - 1)
    bar = tqdm(total=total, desc="mask search", unit="mask", disable=not progress, leave=False)

    def on_step(evaluation, best):
        bar.update(1)
        bar.set_postfix(best=f"{best:.3f}")

    try:
        return search_ratios(pair.target, draft, pair.tokenizer, config, ratios=plan.ratios, steps=plan.search_steps,
                             extra_steps=plan.extra_steps, work=work, units=planned.units, deadline=deadline,
                             tune_seconds=plan.tune_seconds, say=say, prompt_lookup=pair.lookup is not None,
                             names=(Path(request.target).name, Path(str(request.draft)).name), on_step=on_step,
                             note=note or say)
    finally:
        bar.close()


def _tune_stage(request: AddRequest, pair: Any, planned: Any, prompts: list, mask_paths: list[Path], work: Path,
                deadline: Deadline, progress: bool) -> tuple[list[str], bool, Any]:
    """Tunes the pair with its masks into the work folder's ``tuned.json``, stopping between settings
    when the budget runs out; its verdict lines (masks named by the published pair's paths), True
    when the file of an interrupted run was there already (checked against the target, then kept),
    and the sweep's result (None when resumed)."""
    from tqdm import tqdm

    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.models.pair import resolve_mask_info
    from viasd_adapt.routing.mask import check_tuned_model
    from viasd_adapt.tuning.tune import Budget, TuneConfig, artifact_of, describe
    from viasd_adapt.tuning.tune import tune as run_tune

    tuned_path = work / TUNED_FILENAME
    if tuned_path.is_file():
        tuned = TunedSettings.load(tuned_path)
        check_tuned_model(tuned, pair.target, source=str(tuned_path))
        return list(getattr(tuned.report, "verdict", None) or []), True, None
    # the loaded pair with the searched mask (checked against the target): nothing is loaded again
    tuning = replace(pair, mask=resolve_mask_info(pair.target, mask_paths[0], TierSettings().ratio))
    estimate = planned.estimate
    config = TuneConfig(TUNE_NEW_TOKENS, planned.grid, Budget(), seed=request.seed, chat=request.chat,
                        mask_files=tuple(mask_paths[1:]))
    per_setting = estimate.tune_prompts * max(planned.units.tier_point, planned.units.sd_point)
    bar = tqdm(total=estimate.tune_points, desc="tune", unit="setting", disable=not progress, leave=False)
    said: list[str] = []
    try:
        result = run_tune(tuning, prompts, config, progress=said.append, bar=lambda total: bar,
                          stop_when=lambda: not deadline.allows(per_setting))
    finally:
        bar.close()
    verdict = [line for line in said if line.startswith("time budget")] + describe(published_names(result, work, request.folder))
    artifact = artifact_of(result, tuning, folder=work)
    artifact.report.verdict = verdict  # an extra field of the report: what a resumed run prints again
    artifact.save(tuned_path)
    return verdict, False, result


def chosen_mask_file(work: Path) -> str:
    """The mask ``pair.json`` names: the one the tuned choice was measured with when it runs a slim
    verifier (another ratio's mask may win, and a choice is applied only with its own mask), else
    ``mask.json``."""
    from viasd_adapt.config.tuned import TunedSettings

    tuned = TunedSettings.load(work / TUNED_FILENAME)
    name = getattr(tuned.report, "mask_file", None)
    if tuned.settings.mode.uses_slim and name and (work / name).is_file():
        return name
    return MASK_FILENAME


def published_names(result: Any, work: Path, folder: Path) -> Any:
    """``result`` with every mask that lives in the work folder named by its path in the published
    pair's folder: the report names files that exist once the pair is published."""
    def name(mask: str | None) -> str | None:
        if mask is None or not Path(mask).is_relative_to(work):
            return mask
        return str(folder / Path(mask).relative_to(work))

    names = {mask: name(mask) for mask in result.masks}
    points = [replace(p, mask=name(p.mask)) for p in result.points]
    chosen = points[result.points.index(result.chosen)]
    pooled = points[result.points.index(result.pooled)] if result.pooled is not None else None
    costs = {(name(k) if k in result.masks else k): v for k, v in result.costs.items()}
    prices = result.price_list.renamed(names).to_dict() if result.price_list is not None else None
    return replace(result, points=points, chosen=chosen, pooled=pooled, costs=costs, prices=prices,
                   masks={name(k): v for k, v in result.masks.items()})


def publish(work: Path, folder: Path) -> None:
    """Renames the finished work folder onto the pair's name: atomic, and never over an existing folder."""
    if folder.exists():
        raise ViasdError(f"{folder} appeared while the pair was being made; the finished pair stays in {work}")
    os.rename(work, folder)


__all__ = ["AddRequest", "add_pair"]
