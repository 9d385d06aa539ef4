"""docs/tuning.md's table of the shipped pairs' tuned choices is what their ``tuned.json`` files hold:
the one place the choices are stated (the other pages link to it)."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support import REPO_ROOT
from tests.support.scripts import benchmark_module


@pytest.fixture(scope="module")
def render_tables():
    with benchmark_module("render_tables") as module:
        yield module


def _row(table: str, pair: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(f"| `{pair}` |"))


def test_the_page_holds_the_choices_the_shipped_files_hold(render_tables):
    page = (REPO_ROOT / "docs" / "tuning.md").read_text()
    table = render_tables.render_shipped_choices(None)
    assert render_tables.written(page, "shipped-choices") == table
    for pair in render_tables.SHIPPED_PAIRS:
        choice = json.loads((REPO_ROOT / "viasd_adapt" / "assets" / pair / "tuned.json").read_text())["choice"]
        assert render_tables.CHOICE_NAMES[choice] in _row(table, pair)


def test_control_a_changed_choice_changes_its_row_only(render_tables, tmp_path):
    """Control: copies of the shipped files with demo's choice and lenience changed render another
    demo row, and the same other rows."""
    assets = tmp_path / "assets"
    for pair in render_tables.SHIPPED_PAIRS:
        (assets / pair).mkdir(parents=True)
        shutil.copy(REPO_ROOT / "viasd_adapt" / "assets" / pair / "tuned.json", assets / pair / "tuned.json")
    shipped = render_tables.render_shipped_choices(None, assets)
    path = assets / "demo" / "tuned.json"
    tuned = json.loads(path.read_text())
    tuned["choice"], tuned["settings"]["mode"], tuned["settings"]["lenience"] = "lenient", "lenient", 0.7
    path.write_text(json.dumps(tuned))
    edited = render_tables.render_shipped_choices(None, assets)
    assert "lenience 0.7" in _row(edited, "demo") and _row(edited, "demo") != _row(shipped, "demo")
    assert _row(edited, "demo-ee") == _row(shipped, "demo-ee") and _row(edited, "smollm2") == _row(shipped, "smollm2")
