"""Output that cannot be written: every command that writes to stdout (generate, bench, tune,
search, models list --json, demo) ends in one line saying so and exit status 1, with no traceback
and no half-written ``--json`` file, whether stdout is closed (``>&-``) or full (``> /dev/full``).
A broken pipe stays quiet (viasd_adapt/cli/output.py).

In-process cases replace the process's own stdout (``sys.stdout`` and ``sys.__stdout__``, as the
guard only wraps the real one) with a stream over a device that refuses every write; the
subprocess cases run the real thing, the interpreter's last flush included."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from viasd_adapt.cli.main import cli
from viasd_adapt.cli.output import OUTPUT_FAILED


FAILED_LINE = "error: the output could not be written (stdout: "


class _Device(io.RawIOBase):
    """A stdout device: ``full`` refuses every write (ENOSPC); ``stop_after_first`` keeps the first
    write, then stops the run (:class:`_Stopped`: the control that the command writes to stdout
    there); otherwise it keeps everything."""

    def __init__(self, full: bool = False, stop_after_first: bool = False) -> None:
        self.full, self.stop_after_first, self.data = full, stop_after_first, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.data += bytes(data)
        if self.stop_after_first:
            raise _Stopped(bytes(self.data))
        return len(data)


class _Stopped(BaseException):
    """Raised by a control's stdout at its first write: the command got that far, writing stdout."""


def _run(monkeypatch, device: _Device | None, args: list) -> int:
    """Runs ``viasd ARGS`` in this process with ``device`` as the process's stdout (None: closed);
    returns the exit status."""
    stream = None if device is None else io.TextIOWrapper(io.BufferedWriter(device), encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setattr(sys, "__stdout__", stream)
    try:
        with pytest.raises(SystemExit) as done:
            cli.main([str(a) for a in args], prog_name="viasd")
    finally:
        if device is not None:
            device.full = device.stop_after_first = False  # what is still buffered goes nowhere, not to a warning
    return done.value.code


@pytest.fixture()
def pair(char_pair):
    return char_pair


def _commands(pair: Path, out: Path) -> dict[str, tuple[list, Path | None]]:
    """Each command that writes to stdout, at its smallest, and the ``--json`` file it would write
    after its first line of output (None: it writes no such file before its output)."""
    calib = out / "calib.txt"
    calib.write_text("def add(a, b):\nclass Point:\nfor i in range(10):\n")
    files = ["--target", pair / "target", "--draft", pair / "draft"]
    return {
        "generate": (["generate", *files, "--framework", "engine", "--mode", "none", "--prompt", "def f(x):",
                      "--max-new-tokens", 3, "--no-show-tiers", "--json", out / "generate.json"], out / "generate.json"),
        "bench": (["bench", "--pair", pair, "--frameworks", "engine", "--modes", "none", "--num-prompts", 1,
                   "--max-new-tokens", 2, "--repeats", 1, "--task-prompts", 0, "--json", out / "bench.json"],
                  out / "bench.json"),
        "tune": (["tune", "--pair", pair, "--alpha1", "0.5", "--alpha2", "0.3", "--lenience", "0.5", "--greedy-gates",
                  "proposer", "--prompts", 1, "--max-new-tokens", 2, "--out", out / "tuned.json", "--json",
                  out / "tune.json"], out / "tune.json"),
        "search": (["search", *files, "--calib", calib, "--strategy", "dimr", "--steps", 4, "--ratio", 0.5,
                    "--new-tokens", 2, "--heldout-prompts", 1, "--out", out / "mask.json", "--no-progress"], None),
        "models list --json": (["models", "list", "--json"], None),
        "demo": (["demo", "--pair", pair, "--quick", "--no-progress", "--frameworks", "lookup", "--json",
                  out / "demo.json"], out / "demo.json"),
    }


COMMANDS = ["generate", "bench", "tune", "search", "models list --json", "demo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_stdout_ends_every_command_in_one_line(command, pair, tmp_path, monkeypatch, capsys):
    args, json_file = _commands(pair, tmp_path)[command]
    status = _run(monkeypatch, _Device(full=True), args)
    err = capsys.readouterr().err
    assert status == OUTPUT_FAILED, err
    assert err.count(FAILED_LINE + "No space left on device)") == 1 and "Traceback" not in err, err
    if json_file is not None:
        assert not json_file.exists()  # its output failed before the file was due: none, not half of one


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_writes_its_output_to_stdout(command, pair, tmp_path, monkeypatch, capsys):
    """The control of the test above: with a stdout that takes the first write and then stops the
    run, each command gets there, so a full stdout fails at the command's own output."""
    args, _ = _commands(pair, tmp_path)[command]
    device = _Device(stop_after_first=True)
    with pytest.raises(_Stopped):
        _run(monkeypatch, device, args)
    assert device.data.strip()
    assert FAILED_LINE not in capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
def test_a_closed_stdout_is_refused_before_the_command_runs(command, pair, tmp_path, monkeypatch, capsys):
    args, json_file = _commands(pair, tmp_path)[command]
    status = _run(monkeypatch, None, args)
    err = capsys.readouterr().err
    assert status == OUTPUT_FAILED and err == FAILED_LINE + "it is closed)\n", err
    assert not json_file or not json_file.exists()


def test_a_working_stdout_gets_the_whole_output_and_the_json_file(pair, tmp_path, monkeypatch, capsys):
    """The control of the cases above for generate: the same command, a stdout that takes it all."""
    args, json_file = _commands(pair, tmp_path)["generate"]
    device = _Device()
    assert _run(monkeypatch, device, args) == 0
    assert device.data and json_file.is_file()
    assert FAILED_LINE not in capsys.readouterr().err


# ----------------------------------------------------------------------------- the real process


def _viasd(args: list, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", "from viasd_adapt.cli.main import cli; cli()", *map(str, args)],
                          stderr=subprocess.PIPE, text=True, env=env, timeout=600, **kwargs)


def _generate(pair: Path, json_file: Path) -> list:
    return ["generate", "--target", pair / "target", "--draft", pair / "draft",
            "--framework", "engine", "--mode", "none", "--prompt", "def f(x):", "--max-new-tokens", 3, "--no-show-tiers", "--json", json_file]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_generate_to_dev_full_and_to_a_closed_stdout_in_a_real_process(pair, tmp_path):
    json_file = tmp_path / "out.json"
    with open("/dev/full", "w") as full:
        ran = _viasd(_generate(pair, json_file), stdout=full)
    assert ran.returncode == OUTPUT_FAILED, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("error")]
    assert lines == [FAILED_LINE + "No space left on device)"], ran.stderr
    assert "Traceback" not in ran.stderr and "Exception ignored" not in ran.stderr
    assert "prompt:" in ran.stderr  # the control: it ran up to its answer (stderr), and failed there
    assert not json_file.exists()
    closed = _viasd(_generate(pair, json_file), stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert closed.returncode == OUTPUT_FAILED and closed.stderr == FAILED_LINE + "it is closed)\n", closed.stderr


def test_a_broken_pipe_stays_quiet():
    """A reader that went away (``| head -c 0``) is no error to report: no traceback, no line
    saying the output could not be written, the exit status click gives it (1), as before."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes: its write meets a broken pipe
    try:
        ran = _viasd(["models", "list", "--json"], stdout=write)
    finally:
        os.close(write)
    assert ran.returncode == 1, ran.stderr
    assert "Traceback" not in ran.stderr and "Exception ignored" not in ran.stderr and FAILED_LINE not in ran.stderr
    # the control: the same command with a reader writes its list
    listed = _viasd(["models", "list", "--json"], stdout=subprocess.PIPE)
    assert listed.returncode == 0 and listed.stdout.lstrip().startswith("["), listed.stderr
