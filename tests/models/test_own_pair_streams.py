"""``viasd models add`` and ``viasd generate`` with stderr closed (``2>&-``) or full (``2>/dev/full``):
the result is what stdout and the pair folder hold, so neither costs it. What ``models add``
reports (the check, the estimate, the verdict, the pair written) goes to stdout; its progress (each
stage's time) to stderr: the control, stderr open, shows that the command does write there.

Each run is a real process (the shell's redirections, the interpreter's own streams), on the tiny
GGUF target and prompts of :mod:`tests.models.test_own_pair`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")

from tests.models.test_own_pair import add_args, cache, user_files, warm_gguf_cache  # noqa: E402,F401  (fixtures)
from viasd_adapt.models.registry import list_pairs  # noqa: E402

VIASD = str(Path(sys.executable).with_name("viasd"))
#: A real clock in these processes: a budget well past the smallest plan on a loaded machine.
MINUTES = 0.5


def shell(command: list[str], redirect: str, cache_folder: Path) -> subprocess.CompletedProcess:
    """``command`` run by the shell with ``redirect`` applied to stderr (``2>&-``, ``2>/dev/full``, or
    ``2>FILE``); stdout captured."""
    line = " ".join(shlex.quote(part) for part in command) + f" {redirect}"
    env = {**os.environ, "VIASD_CACHE": str(cache_folder), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env)


def add_in_shell(user_files, redirect: str, cache_folder: Path) -> subprocess.CompletedProcess:
    """``models add`` with ``redirect``, on a budget the machine can keep: :data:`MINUTES`, or, where a
    loaded machine's probe refuses that (the contract: it names the minutes it needs, on stderr), a
    quarter more than the minutes named, so the outcome does not hang on the machine's load."""
    done = shell([VIASD, *add_args(user_files, minutes=MINUTES)], redirect, cache_folder)
    if done.returncode != 2 or "estimate: about" in done.stdout:
        return done
    asked = shell([VIASD, *add_args(user_files, minutes=MINUTES)], "2>&1", cache_folder).stdout
    needed = re.search(r"pass --minutes ([0-9.]+) or more", asked)
    assert needed, asked  # refused for another reason: that is the failure to show
    return shell([VIASD, *add_args(user_files, minutes=round(float(needed.group(1)) * 1.25, 2))], redirect, cache_folder)


def test_models_add_reports_on_stdout_and_progress_on_stderr(cache, user_files, tmp_path):  # noqa: F811
    errors = tmp_path / "stderr.txt"
    done = add_in_shell(user_files, f"2>{shlex.quote(str(errors))}", cache)
    assert done.returncode == 0, errors.read_text()
    said = errors.read_text()
    for report in ("checked:", "estimate: about", "VERDICT", "pair 'mine' ->"):
        assert report in done.stdout and report not in said, report
    assert "[search]" in said and "[tune]" in said and "[search]" not in done.stdout


@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full"])
def test_models_add_with_stderr_closed_or_full_still_writes_the_pair(cache, user_files, redirect):  # noqa: F811
    done = add_in_shell(user_files, redirect, cache)
    assert done.returncode == 0, done.stdout
    assert "VERDICT" in done.stdout and f"pair 'mine' -> {cache / 'mine'}" in done.stdout
    assert {"mask.json", "pair.json", "report.json", "tuned.json"} <= {p.name for p in (cache / "mine").iterdir()}
    assert not (cache / ".mine.adding").exists() and not (cache / ".mine.lock").exists()
    assert [p.name for p in list_pairs() if p.source == "built"] == ["mine"]


@pytest.fixture
def char_files(char_pair):
    return ["--target", str(char_pair / "target"), "--draft", str(char_pair / "draft")]


@pytest.mark.parametrize("redirect", ["2>&-", "2>/dev/full"])
def test_generate_with_stderr_closed_or_full_still_generates(char_files, tmp_path, redirect):
    command = [VIASD, "generate", *char_files, "--prompt", "def f", "--max-new-tokens", "4", "--no-color"]
    errors = tmp_path / "stderr.txt"
    control = shell(command, f"2>{shlex.quote(str(errors))}", tmp_path / "cache")
    assert control.returncode == 0 and "Loading weights" in errors.read_text()  # stderr is written to
    done = shell(command, redirect, tmp_path / "cache")
    assert done.returncode == 0 and done.stdout == control.stdout and done.stdout.strip()  # the answer, whole
