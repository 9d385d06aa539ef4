"""A user's own pair, start to finish (viasd_adapt.tuning.onboard, ``viasd models add``): a tiny GGUF
target with prompt lookup is searched, tuned and named, then generated with, benched and loaded by
name; interrupted or killed at any point it leaves no half-written pair and resumes. Tiny budgets
(``--minutes 0.1``) keep it to seconds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("gguf")

from tests.support.gguf import write_tiny_gguf  # noqa: E402
from viasd_adapt.cli.main import cli  # noqa: E402
from viasd_adapt.errors import ConfigError  # noqa: E402
from viasd_adapt.models.registry import list_pairs  # noqa: E402
from viasd_adapt.models.tiny import tiny_model  # noqa: E402
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


@pytest.fixture
def cache(tmp_path, monkeypatch, warm_gguf_cache):
    import shutil

    folder = tmp_path / "cache"
    shutil.copytree(warm_gguf_cache, folder / "gguf")
    monkeypatch.setenv("VIASD_CACHE", str(folder))
    return folder


def add_args(user_files, name="mine"):
    target, prompts = user_files
    return ["models", "add", name, "--target", str(target), "--draft", "prompt-lookup", "--minutes", "0.1",
            "--calib", str(prompts), "--no-progress"]


def request_of(user_files, cache, name="mine") -> onboard.AddRequest:
    target, prompts = user_files
    return onboard.AddRequest(name=name, target=target, draft="prompt-lookup", calib=prompts, minutes=0.1, root=cache)


def test_a_new_user_adds_a_pair_then_generates_benches_and_loads_it_by_name(cache, user_files):
    runner = CliRunner()
    added = runner.invoke(cli, add_args(user_files))
    assert added.exit_code == 0, added.output
    assert "estimate: about" in added.output and "VERDICT" in added.output and "UNCERTAINTY" in added.output
    assert "10 prompts: 2 held out" in added.output  # the small file works and says what it held out
    folder = cache / "mine"
    assert sorted(p.name for p in folder.iterdir()) == ["mask.json", "pair.json", "report.json", "tuned.json"]
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
    assert pair.spec is not None and pair.spec.tuned is not None  # tuned.json's choice is what it runs with


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
    return sorted(p.name for p in request.work.iterdir())


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
    assert sorted(p.name for p in request.work.iterdir()) == ["mask.json", "pair.json", "report.json", "tuned.json"]
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
    process = subprocess.Popen([str(Path(sys.executable).with_name("viasd")), *add_args(user_files)], env=env,
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


def test_a_budget_is_turned_into_sizes_that_fit_it():
    """The plan prices a step; a larger budget buys more masks and more tuning, never beyond the unbounded sizes."""
    request = onboard.AddRequest(name="x", target="t", draft="prompt-lookup", minutes=1.0)
    small, _, small_grid = onboard.plan(request, step=0.05, window=0.5, num_layers=24, ratio=0.45, file_prompts=None)
    large, search, large_grid = onboard.plan(onboard.AddRequest(name="x", target="t", draft="prompt-lookup", minutes=60.0),
                                             step=0.05, window=0.5, num_layers=24, ratio=0.45, file_prompts=None)
    assert small.search_steps < large.search_steps <= 24 + 36 + 15
    assert small.tune_points <= large.tune_points and large.expected_minutes <= 60 * 1.1
    assert search["steps"] == large.search_steps and large_grid.alpha1 and small_grid.alpha1


def test_a_drafter_model_is_priced_into_every_tuning_point():
    """Drafting is priced at a block of drafter steps per token: the same budget buys fewer tuning
    prompts with a drafter model than with prompt lookup, and the estimate says the drafter's step."""
    request = onboard.AddRequest(name="x", target="t", draft="d", minutes=30.0)
    sizes = dict(step=0.2, window=1.9, num_layers=24, ratio=0.45, file_prompts=None)
    lookup, _, _ = onboard.plan(request, **sizes)
    drafted, _, _ = onboard.plan(request, **sizes, draft_step=0.03)
    assert drafted.tune_prompts < lookup.tune_prompts and drafted.draft_step_seconds == 0.03
    assert lookup.draft_step_seconds == 0.0 and drafted.search_steps == lookup.search_steps


def test_a_bfloat16_pair_runs_by_name_with_the_mask_searched_on_its_bfloat16_weights(cache, user_files):
    import torch

    from viasd_adapt.models.gguf import file_sha256
    from viasd_adapt.models.pair import load_pair

    target, prompts = user_files
    shutil.rmtree(cache / "gguf")  # no float32 entry to start from: every load of this pair reads the bfloat16 one
    request = onboard.AddRequest(name="half", target=target, draft="prompt-lookup", calib=prompts, minutes=0.05,
                                 dtype="bfloat16", root=cache)
    onboard.add_pair(request, say=lambda line: None, progress=False)
    pair = load_pair("half")
    assert next(pair.target.parameters()).dtype == torch.bfloat16 and not pair.mask.is_fallback
    generated = CliRunner().invoke(cli, ["generate", "--pair", "half", "--prompt", "abc", "--max-new-tokens", "3",
                                         "--no-color"])
    assert generated.exit_code == 0, generated.output
    assert [p.name for p in (cache / "gguf").iterdir()] == [f"{file_sha256(target)}-bfloat16"]  # no float32 copy made
