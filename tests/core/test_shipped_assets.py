"""Nothing shipped holds a path of the machine that made it: artifacts name what they
refer to relative to themselves, and results files carry no absolute paths. Scans every JSON file
under the package's assets and benchmarks/results."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|root|home|tmp|Users)/")
SHIPPED = sorted(p for folder in ("viasd_adapt/assets", "benchmarks/results") for p in (ROOT / folder).rglob("*.json"))


def test_there_are_shipped_files_to_scan():
    assert any("assets" in p.parts for p in SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    found = MACHINE_PATH.search(text)
    assert found is None, f"{path.relative_to(ROOT)} holds a machine path: ...{text[max(0, found.start() - 40):found.end() + 40]}..."
