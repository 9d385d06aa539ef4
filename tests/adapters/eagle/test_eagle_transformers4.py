"""The EAGLE tests again under transformers 4.57 (eagle-llm's own world), when CI provides it.

Set ``VIASD_TRANSFORMERS4_PYTHON`` to a Python whose environment has transformers 4.57 (plus this
project and eagle-llm); this test then runs the EAGLE test modules (``MODULES``) with it. On CI
(``CI`` set) without the variable, the test builds that side environment itself in the cache
directory (docs/eagle.md: a venv that borrows everything from the running one but
transformers 4.57), so both transformers lines are tested on every CI run. Elsewhere it is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

PYTHON = os.environ.get("VIASD_TRANSFORMERS4_PYTHON")
#: the EAGLE modules, and the conformance suite's EAGLE cases (selected with ``-k eagle``: every test
#: of the EAGLE modules matches by its module's name, every conformance case by its parameter id)
#: what touches transformers' API through eagle-llm (loading, caches, the slim view of the layers, the
#: tree) and the exactness of the result (greedy identity). The thread-isolation, mode and sampling
#: cases exercise this project's own code on top, identical on both lines, and stay on the main line
#: alone: the suite has five minutes on two cores
MODULES = ["tests/adapters/eagle/test_eagle.py", "tests/adapters/eagle/test_eagle_tree.py",
           "tests/adapters/eagle/test_eagle_slim_view.py", "tests/conformance/test_greedy_identity.py",
           "tests/conformance/test_errors.py"]
SELECT = ["-k", "eagle"]
ON_CI = bool(os.environ.get("CI"))


def _side_environment() -> str:
    """A venv with transformers 4.57 that sees the running environment's other packages.

    The venv is cached, but its links to the running environment (and to this checkout, through
    the editable install's ``.pth``) are rewritten on every run: a cache built from another checkout
    must not test that checkout's code.
    """
    from viasd_adapt.models.registry import cache_dir

    venv = cache_dir() / "venv-transformers4"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    main_site = [p for p in sys.path if p.endswith("site-packages")][0]
    Path(site, "zz_main.pth").write_text(main_site + "\n")
    Path(site, "zzz_viasd.pth").unlink(missing_ok=True)
    for editable in Path(main_site).glob("__editable__*viasd_adapt*.pth"):
        Path(site, "zzz_viasd.pth").write_text(editable.read_text())
    installed = subprocess.run([str(python), "-c", "import transformers; print(transformers.__version__)"],
                               capture_output=True, text=True, cwd=venv).stdout.strip()
    if not installed.startswith("4.57"):
        subprocess.run([str(python), "-m", "pip", "install", "-q", "transformers>=4.57,<4.58",
                        "tokenizers>=0.22,<0.23", "huggingface-hub>=0.34,<1.0"], check=True)
    return str(python)


@pytest.mark.skipif(not (PYTHON or ON_CI), reason="VIASD_TRANSFORMERS4_PYTHON is not set (and not on CI)")
def test_eagle_tests_pass_on_transformers_4():
    global PYTHON
    PYTHON = PYTHON or _side_environment()
    root = REPO_ROOT
    version = subprocess.run([PYTHON, "-c", "import transformers; print(transformers.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version.startswith("4."), f"{PYTHON} has transformers {version}, not 4.x"
    # serial inside: this test already holds one of the outer run's workers
    run = subprocess.run([PYTHON, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *MODULES, *SELECT],
                         cwd=root, capture_output=True, text=True, timeout=900)
    sys.stdout.write(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
