"""A user's own pair, start to finish (viasd_adapt.tuning.onboard, ``viasd models add``): a tiny GGUF
target with prompt lookup is searched, tuned and named, then generated with, benched and loaded by
name; interrupted or killed at any point it leaves no half-written pair and resumes. Tiny budgets
kept on a fake clock (``tick_clock``) keep it to seconds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("gguf")

from tests.support.gguf import write_tiny_gguf  # noqa: E402
from viasd_adapt.cli.main import cli  # noqa: E402
from viasd_adapt.errors import ConfigError  # noqa: E402
from viasd_adapt.models.registry import list_pairs  # noqa: E402
from viasd_adapt.models.tiny import tiny_model  # noqa: E402
from viasd_adapt.config.onboard_report import OnboardReport  # noqa: E402
from viasd_adapt.tuning import onboard  # noqa: E402

PROMPTS = ["the cat sat on the mat and the cat sat on the mat", "a b c a b c a b c", "def add(a, b): return a + b",
           "one two three one two three", "print(1); print(2); print(1)", "abc abc abc abc", "to be or not to be",
           "x = 1; y = 2; x = 1", "red green blue red green", "ab ab ab ab ab ab"]


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """What a new user brings: a GGUF target and a small prompts file (10 prompts: fewer than the 16
    the search holds out by default)."""
    folder = tmp_path_factory.mktemp("mine")
    target = write_tiny_gguf(folder / "mine.gguf", tiny_model("llama", seed=7, vocab_size=64))
    prompts = folder / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    return target, prompts


@pytest.fixture(scope="module")
def warm_gguf_cache(user_files, tmp_path_factory):
    """The target's dequantized cache entry, made once: each test copies it instead of dequantizing again."""
    import os as _os

    from viasd_adapt.models.gguf import gguf_model_folder

    folder = tmp_path_factory.mktemp("warm")
    previous = _os.environ.get("VIASD_CACHE")
    _os.environ["VIASD_CACHE"] = str(folder)
    try:
        gguf_model_folder(user_files[0])
    finally:
        if previous is None:
            del _os.environ["VIASD_CACHE"]
        else:
            _os.environ["VIASD_CACHE"] = previous
    return folder / "gguf"


#: The budget the tests give: with the tick clock below, a small plan on any machine.
MINUTES = 0.3


@pytest.fixture(autouse=True)
def tick_clock(monkeypatch):
    """Every onboarding of these tests keeps its budget on a clock that advances 0.02 s per read:
    the probe's prices, the plan and each stage's early stop are the same however loaded the machine."""
    from tests.support.clock import TickClock

    clock = TickClock(0.02)
    monkeypatch.setattr(onboard, "CLOCK", clock)
    return clock


@pytest.fixture
def cache(tmp_path, monkeypatch, warm_gguf_cache):
    import shutil

    folder = tmp_path / "cache"
    shutil.copytree(warm_gguf_cache, folder / "gguf")
    monkeypatch.setenv("VIASD_CACHE", str(folder))
    return folder


def add_args(user_files, name="mine", minutes=MINUTES):
    target, prompts = user_files
    return ["models", "add", name, "--target", str(target), "--draft", "prompt-lookup", "--minutes", str(minutes),
            "--calib", str(prompts), "--no-progress"]


def request_of(user_files, cache, name="mine") -> onboard.AddRequest:
    target, prompts = user_files
    return onboard.AddRequest(name=name, target=target, draft="prompt-lookup", calib=prompts, minutes=MINUTES, root=cache)


def test_a_new_user_adds_a_pair_then_generates_benches_and_loads_it_by_name(cache, user_files):
    runner = CliRunner()
    added = runner.invoke(cli, add_args(user_files))
    assert added.exit_code == 0, added.output
    assert "estimate: about" in added.output and "VERDICT" in added.output and "UNCERTAINTY" in added.output
    assert "10 prompts: 2 held out" in added.output  # the small file works and says what it held out
    folder = cache / "mine"
    assert main_files(folder) == ["mask.json", "pair.json", "report.json", "tuned.json"]
    for measured in ("mask.json", "tuned.json", "report.json"):  # each says where it was measured
        assert json.loads((folder / measured).read_text())["hardware"]["device"] == "cpu", measured
    assert user_files[0].is_file()  # the user's file is named where it is, not moved or copied
    assert [p.name for p in list_pairs() if p.source == "built"] == ["mine"]

    generated = runner.invoke(cli, ["generate", "--pair", "mine", "--prompt", "abc abc", "--max-new-tokens", "4",
                                    "--no-color", "--threads", "1"])
    assert generated.exit_code == 0, generated.output
    assert "no mask for this target" not in generated.output  # the pair's own mask and tuned setting are used
    benched = runner.invoke(cli, ["bench", "--pair", "mine", "--frameworks", "hf", "--modes", "none,lossy", "--num-prompts",
                                  "1", "--max-new-tokens", "4", "--repeats", "1", "--task-prompts", "0", "--no-fixed-twins"])
    assert benched.exit_code == 0, benched.output
    assert "FALLBACK" not in benched.output and "mask: skipped layers" in benched.output

    from viasd_adapt.models.pair import load_pair

    pair = load_pair("mine")
    assert pair.name == "mine" and pair.lookup is not None
    assert pair.mask is not None and not pair.mask.is_fallback and Path(pair.mask.source).parent == folder
    assert pair.files.tuned is not None and pair.run_context().runs_tuned  # tuned.json's choice is what it runs with


def test_an_existing_pair_name_is_refused_and_its_folder_kept(cache, user_files):
    (cache / "mine").mkdir(parents=True)
    (cache / "mine" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, add_args(user_files))
    assert result.exit_code == 2 and "already exists" in result.output
    assert (cache / "mine" / "notes.txt").read_text() == "mine"
    onboard.check_request(request_of(user_files, cache, name="other"))  # control: a free name is taken


class Interrupted(KeyboardInterrupt):
    """What a Ctrl-C raises, at a point of our choosing."""


def _interrupt(*args, **kwargs):
    raise Interrupted()


INTERRUPTS = {"loading": "viasd_adapt.models.pair.load_model", "searching": "viasd_adapt.search.pipeline.run_stages",
              "tuning": "viasd_adapt.tuning.measure.Sweep.prepare", "publishing": "viasd_adapt.tuning.onboard.os.rename"}


def interrupted_at(point: str, request, monkeypatch) -> list[str]:
    """Runs the onboarding with a Ctrl-C at ``point``; what the work folder holds afterwards."""
    with monkeypatch.context() as scoped:
        scoped.setattr(INTERRUPTS[point], _interrupt)
        with pytest.raises(Interrupted):
            onboard.add_pair(request, say=lambda line: None, progress=False)
    assert not request.folder.exists() and not [p for p in list_pairs() if p.source == "built"]
    return main_files(request.work)


def main_files(folder: Path) -> list[str]:
    """The files of a pair's folder, less the other skip ratios' masks (``mask-r0.30.json``: as
    many as the plan had time for)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("mask-r"))


@pytest.mark.parametrize("point", ["loading", "searching"])
def test_an_interrupt_before_the_mask_is_written_leaves_no_pair_and_no_mask(cache, user_files, monkeypatch, point):
    assert interrupted_at(point, request_of(user_files, cache), monkeypatch) == ["pair.json"]


def test_interrupts_after_each_stage_leave_no_pair_and_the_next_run_resumes_from_there(cache, user_files, monkeypatch):
    """Tuning interrupted: the mask is kept; publishing interrupted: the mask and tuned.json are kept; each
    resumed run redoes nothing that was finished (every stage's file is whole or absent)."""
    request = request_of(user_files, cache)
    assert interrupted_at("tuning", request, monkeypatch) == ["mask.json", "pair.json"]
    with monkeypatch.context() as scoped:
        scoped.setattr(INTERRUPTS["publishing"], _interrupt)
        lines: list[str] = []
        with pytest.raises(Interrupted):
            onboard.add_pair(request, say=lines.append, progress=False)
    assert [line.split("]")[0] for line in lines if "(resumed)" in line] == ["[search"]
    assert main_files(request.work) == ["mask.json", "pair.json", "report.json", "tuned.json"]
    assert not request.folder.exists()
    lines = []
    folder = onboard.add_pair(request, say=lines.append, progress=False)
    assert [line.split("]")[0] for line in lines if "(resumed)" in line] == ["[search", "[tune"]
    assert folder == request.folder and (folder / "tuned.json").is_file() and not request.work.exists()


#: How long a test waits for a stage's event at most: far past any plausible run of these tiny
#: pairs, however loaded the machine (the wait ends at the event, never at a clock).
EVENT_LIMIT_SECONDS = 30 * 60


def wait_for_file_or_end(path: Path, process: subprocess.Popen) -> None:
    """Waits until ``path`` exists or ``process`` has ended (bounded only by :data:`EVENT_LIMIT_SECONDS`)."""
    for _ in range(int(EVENT_LIMIT_SECONDS / 0.05)):
        if path.is_file():
            return
        try:
            process.wait(timeout=0.05)
            return
        except subprocess.TimeoutExpired:
            continue


def test_a_killed_run_leaves_no_pair(cache, user_files, tmp_path):
    """SIGKILL (no handler runs) once the mask is written: the work folder stays hidden, no pair appears.
    The wait is for the mask file (an event), however slow the machine."""
    env = {**os.environ, "VIASD_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    # a real clock in the child: a budget far past what the smallest plan needs on a loaded machine
    process = subprocess.Popen([str(Path(sys.executable).with_name("viasd")), *add_args(user_files, minutes=3)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = cache / ".mine.adding"
    wait_for_file_or_end(work / "mask.json", process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (work / "mask.json").is_file(), "the run ended before its mask was written"
    assert not (cache / "mine").exists()
    assert [p.name for p in list_pairs() if p.source == "built"] == []


def test_a_work_folder_of_other_inputs_is_refused_until_restart(cache, user_files, tmp_path):
    request = request_of(user_files, cache)
    work = onboard.open_work_folder(request, restart=False, say=lambda line: None)
    (work / "mask.json").write_text("{}")  # a finished stage of the first inputs' run
    other_target = write_tiny_gguf(tmp_path / "other.gguf", tiny_model("llama", seed=8, vocab_size=64))
    other = onboard.AddRequest(name="mine", target=other_target, draft="prompt-lookup", root=cache)
    with pytest.raises(ConfigError, match="with other inputs"):
        onboard.open_work_folder(other, restart=False, say=lambda line: None)
    onboard.open_work_folder(other, restart=True, say=lambda line: None)  # removes only its own work folder
    assert user_files[0].is_file() and not (work / "mask.json").exists()
    onboard.open_work_folder(request, restart=False, say=lambda line: None)  # control: nothing finished, nothing refused


def test_a_budget_the_smallest_plan_cannot_fit_stops_before_any_search(cache, user_files, monkeypatch):
    """The probe prices the units; a budget under the smallest plan is refused with the minutes it
    needs, before the search or the tuning start, and no mask is written."""
    started: list[str] = []

    def search(*args, **kwargs):
        started.append("search")
        raise Interrupted()

    monkeypatch.setattr("viasd_adapt.search.pipeline.run_stages", search)
    request = replace(request_of(user_files, cache), minutes=0.05)
    said: list[str] = []
    with pytest.raises(ConfigError, match=r"--minutes 0.05 is too small .* pass --minutes (\d+\.?\d*) or more") as refused:
        onboard.add_pair(request, say=said.append, progress=False)
    assert started == [] and not (request.work / "mask.json").exists() and not request.folder.exists()
    assert said[-1].startswith("probe ") and "tiered" in said[-1]  # what the named minutes are priced from
    needed = refused.value.minutes_needed
    assert needed > 0.05
    lines: list[str] = []  # control: the minutes it named are taken, and the plan stated is within them
    with pytest.raises(Interrupted):  # the stubbed search: the run went past the plan into it
        onboard.add_pair(replace(request, minutes=needed), say=lines.append, progress=False, restart=True)
    assert started == ["search"] and any(f"within the {needed:g} min budget" in line for line in lines)


def test_the_estimate_words_match_a_one_prompt_file(cache, user_files, tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("the cat sat on the mat and the cat sat on the mat\n")
    request = replace(request_of(user_files, cache), calib=one)
    lines: list[str] = []
    onboard.add_pair(request, say=lines.append, progress=False)
    estimate = next(line for line in lines if line.startswith("estimate:"))
    assert "on 1 prompt" in estimate and "on 1 prompts" not in estimate and "4 prompts" not in estimate
    report = OnboardReport.load(request.folder / "report.json")
    assert report.estimate.tune_prompts == 1 and "at 1 prompt" in " ".join(report.verdict)


def test_the_report_names_masks_by_the_published_pair_and_lists_each_ratio_tried(cache, user_files, monkeypatch):
    """A budget that allows it tries three skip ratios: each has its mask file in the published pair,
    its held-out agreement and its costs, in the printed lines and report.json; nothing names the
    work folder, which is gone once the pair is published."""
    from viasd_adapt.tuning.budget_plan import RunPrice, UnitCosts

    lines: list[str] = []
    request = replace(request_of(user_files, cache), minutes=1.0)
    # prices that make the masks cheap and the sweep dear: three ratios on the middle grid, few prompts
    units = UnitCosts(step=0.001, window=0.001, evaluation=0.001, untiered=RunPrice(0.1, 0.0125), tiered=RunPrice(0.1, 0.0125))
    monkeypatch.setattr("viasd_adapt.tuning.probe.measure_units", lambda *args, **kwargs: units)
    onboard.add_pair(request, say=lines.append, progress=False)
    folder = request.folder
    report = OnboardReport.load(folder / "report.json")
    assert [r.ratio for r in report.ratios] == [0.45, 0.3, 0.2]
    assert [Path(r.mask) for r in report.ratios] == [folder / "mask.json", folder / "mask-r0.30.json", folder / "mask-r0.20.json"]
    assert all(Path(r.mask).is_file() and r.heldout_agreement is not None and r.lossless_cost is not None for r in report.ratios)
    said = [line for line in lines if line.startswith("skip ratio")]
    assert len(said) == 3 and all("held-out agreement" in line and "feq/token" in line for line in said)
    assert ".mine.adding" not in "\n".join(lines) + (folder / "report.json").read_text() + (folder / "tuned.json").read_text()
    assert any(f"mask {folder}" in line for line in report.verdict)


def test_published_names_map_only_the_work_folders_masks(tmp_path):
    from viasd_adapt.tuning.tune import Budget, Point, TuneResult
    from viasd_adapt.core.settings import Mode, TierSettings

    work, folder = tmp_path / ".x.adding", tmp_path / "x"
    inside, outside = str(work / "mask.json"), str(tmp_path / "elsewhere.json")
    points = [Point("lossless", TierSettings(mode=Mode.LOSSLESS), inside, 1.0, 0.0, 0.0, 4),
              Point("lossless", TierSettings(mode=Mode.LOSSLESS), outside, 1.1, 0.0, 0.0, 4)]
    result = TuneResult(points, points[0], Budget(), {inside: {}, outside: {}}, {inside: {}, outside: {}}, 1.0)
    renamed = onboard.published_names(result, work, folder)
    assert [p.mask for p in renamed.points] == [str(folder / "mask.json"), outside]  # control: a mask elsewhere keeps its name
    assert renamed.chosen.mask == str(folder / "mask.json") and set(renamed.masks) == {str(folder / "mask.json"), outside}


def test_stages_that_run_long_stop_early_and_the_pair_is_still_written(cache, user_files, tick_clock):
    """The clock jumps to near the budget's end once the estimate is said (a machine that slowed
    down): the search and the sweep each stop between units with a line, and the pair is published."""
    request = request_of(user_files, cache)
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("estimate:"):
            tick_clock.jump(MINUTES * 60 * 0.97)

    onboard.add_pair(request, say=say, progress=False)
    assert any(line.startswith("time budget: the search at the skip ratio 0.45 stops after") for line in lines)
    assert any(line.startswith("time budget: the sweep stops here") for line in lines)
    report = OnboardReport.load(request.folder / "report.json")
    assert report.seconds_after_load <= MINUTES * 60 * 1.1
    assert (request.folder / "tuned.json").is_file()


def test_without_a_jump_no_stage_stops_early(cache, user_files):
    """Control of the above: the same run on the steady clock says no early stop."""
    lines: list[str] = []
    onboard.add_pair(request_of(user_files, cache), say=lines.append, progress=False)
    assert not [line for line in lines if line.startswith("time budget")]


def test_a_bfloat16_pair_runs_by_name_with_the_mask_searched_on_its_bfloat16_weights(cache, user_files):
    import torch

    from viasd_adapt.models.gguf import file_sha256
    from viasd_adapt.models.pair import load_pair

    target, prompts = user_files
    shutil.rmtree(cache / "gguf")  # no float32 entry to start from: every load of this pair reads the bfloat16 one
    request = onboard.AddRequest(name="half", target=target, draft="prompt-lookup", calib=prompts, minutes=MINUTES,
                                 dtype="bfloat16", root=cache)
    onboard.add_pair(request, say=lambda line: None, progress=False)
    pair = load_pair("half")
    assert next(pair.target.parameters()).dtype == torch.bfloat16 and not pair.mask.is_fallback
    generated = CliRunner().invoke(cli, ["generate", "--pair", "half", "--prompt", "abc", "--max-new-tokens", "3",
                                         "--no-color"])
    assert generated.exit_code == 0, generated.output
    assert [p.name for p in (cache / "gguf").iterdir()] == [f"{file_sha256(target)}-bfloat16"]  # no float32 copy made


@pytest.mark.parametrize("mode, named", [("lossless", "mask-r0.30.json"), ("lenient", "mask.json")])
def test_pair_json_names_the_mask_the_tuned_choice_was_measured_with(tmp_path, mode, named):
    """Another ratio's mask may win the sweep: pair.json then names that mask, so the tuned choice
    is applied (it applies only with its own mask); a choice without a slim verifier keeps mask.json."""
    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.core.settings import TierSettings

    (tmp_path / "mask.json").write_text("{}")
    (tmp_path / "mask-r0.30.json").write_text("{}")
    settings = TierSettings(mode=mode, lenience=0.4) if mode == "lenient" else TierSettings(mode=mode, ratio=0.3)
    TunedSettings(settings, mode, [1, 0, 1, 1] if mode == "lossless" else None, {},
                  report={"mask_file": "mask-r0.30.json"}).save(tmp_path / "tuned.json")
    assert onboard.chosen_mask_file(tmp_path) == named
