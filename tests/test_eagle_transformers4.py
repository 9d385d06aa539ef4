"""The EAGLE tests again under transformers 4.57 (eagle-llm's own world), when CI provides it.

Set ``VIASD_TRANSFORMERS4_PYTHON`` to a Python whose environment has transformers 4.57 (plus this
project and eagle-llm); this test then runs ``tests/test_eagle.py`` and ``tests/test_eagle_tree.py``
with it. Without the variable it is skipped. A side environment can borrow everything else from the
main one; see the README ("EAGLE adapter") for the four commands.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PYTHON = os.environ.get("VIASD_TRANSFORMERS4_PYTHON")


@pytest.mark.skipif(not PYTHON, reason="VIASD_TRANSFORMERS4_PYTHON is not set")
def test_eagle_tests_pass_on_transformers_4():
    root = Path(__file__).resolve().parent.parent
    version = subprocess.run([PYTHON, "-c", "import transformers; print(transformers.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("4."), f"{PYTHON} has transformers {version}, not 4.x"
    run = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_eagle.py", "tests/test_eagle_tree.py"],
                         cwd=root, capture_output=True, text=True, timeout=900)
    sys.stdout.write(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
