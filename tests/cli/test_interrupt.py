"""An interrupt (SIGINT, Ctrl-C) while ``viasd`` starts up ends as it does later: click's one line,
``Aborted!``, exit status 1, no traceback. On a busy machine ``import torch`` alone takes seconds,
so the window is real; the sub-commands' modules are imported inside click's handling
(viasd_adapt/cli/main.py).

The child process holds its first ``import torch`` (an import hook that says so on stderr and
waits), the test sends SIGINT then. The control sends it at the same moment to a child that imports
torch before the command starts, outside the handling: that one ends in a traceback, so the signal
does arrive during the import."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

#: An import hook that holds the first ``import torch`` for up to a minute, saying so first.
HOLD_TORCH = """
import sys, time

class HoldTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            sys.stderr.write("importing torch\\n")
            sys.stderr.flush()
            time.sleep(60)
        return None

sys.meta_path.insert(0, HoldTorch())
"""


def _interrupted_while_importing_torch(code: str, args: list[str]) -> tuple[int, str]:
    # SIGINT as a shell gives it: a test runner's worker may ignore it (pytest-xdist's do), an ignored
    # signal stays ignored in a child, and Python then raises no KeyboardInterrupt there
    child = subprocess.Popen([sys.executable, "-c", HOLD_TORCH + code, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stderr.readline() == "importing torch\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("command", [["generate", "--prompt", "x"], ["bench"], ["tune"]])
def test_an_interrupt_during_start_up_ends_in_one_line(command):
    status, err = _interrupted_while_importing_torch("from viasd_adapt.cli.main import cli; cli()", command)
    assert status == 1, err
    assert "Traceback" not in err and err.strip() == "Aborted!", err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_the_control_an_interrupt_outside_the_handling_is_a_traceback():
    status, err = _interrupted_while_importing_torch("import torch\nfrom viasd_adapt.cli.main import cli; cli()",
                                                     ["generate", "--prompt", "x"])
    assert status != 0 and "Traceback" in err and "KeyboardInterrupt" in err, err
