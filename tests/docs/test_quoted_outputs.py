"""Every command output the README and docs/ quote is the saved run that
``benchmarks/quoted_outputs.py`` pastes, with its command, date and machine, and nothing else."""

from __future__ import annotations

import doctest
import shutil

import pytest

from tests.support import REPO_ROOT
from tests.support.scripts import benchmark_module


@pytest.fixture(scope="module")
def quoted():
    with benchmark_module("quoted_outputs") as module:
        yield module


@pytest.fixture()
def copied_pages(quoted, tmp_path):
    """A copy of every page that quotes an output, so that a test can edit one."""
    for page in {page for quote in quoted.QUOTES for page in quote.pages}:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / page, tmp_path / page)
    return tmp_path


@pytest.fixture()
def copied_runs(quoted, tmp_path):
    folder = tmp_path / "saved"
    shutil.copytree(quoted.SAVED, folder)
    return folder


def test_every_quoted_output_is_its_saved_run(quoted):
    names = {quote.name for quote in quoted.QUOTES}
    assert {"demo", "tier-case", "explain", "models-add"} <= names  # the demo, the tier case, --explain, onboarding
    assert quoted.differing() == []


def test_control_an_edited_line_in_a_page_is_caught(quoted, copied_pages):
    """Control: one line of the demo's quoted output changed in a copy of the README differs, and
    only that quote does."""
    assert quoted.differing(copied_pages) == []
    readme = copied_pages / "README.md"
    text = readme.read_text()
    block = quoted.written(text, "demo")
    lines = block.splitlines()
    line = lines[lines.index(next(line for line in lines if line.startswith("$ "))) + 1]  # the output's first line
    assert text.count(line) == 1
    readme.write_text(text.replace(line, line + " (edited)"))
    assert quoted.differing(copied_pages) == ["README.md: demo"]


def test_control_an_edited_line_in_a_saved_run_is_caught(quoted, copied_runs):
    """Control: one line changed in a copy of a saved run makes every page that quotes it differ."""
    assert quoted.differing(saved=copied_runs) == []
    path = quoted.saved_path("tier-case", copied_runs)
    run = quoted.SavedRun.parse(path.read_text())
    first = run.output.splitlines()[0]
    path.write_text(quoted.SavedRun(run.fields, run.output.replace(first, first + " (edited)")).text())
    assert quoted.differing(saved=copied_runs) == ["README.md: tier-case", "docs/adaptive.md: tier-case"]


def test_each_saved_run_is_the_quotes_command_with_its_date_and_machine(quoted):
    """A saved run names the command its quote runs now (a changed command must be re-run), a date,
    the machine, its time and its exit status (0: a quoted failure would be a broken example)."""
    for quote in quoted.QUOTES:
        run = quoted.load_saved(quote.name)
        assert run.fields["command"] == quote.command, f"{quote.name}: re-run it (`--run {quote.name}`)"
        assert run.fields["exit"] == "0", quote.name
        assert run.fields["date"][:4].isdigit() and "CPU" in run.fields["machine"] and "torch" in run.fields["machine"]
        assert int(run.fields["seconds"]) >= 0
        block = quoted.rendered(quote, run)
        assert f"$ {quote.command}\n" in block and run.fields["machine"] in block and run.fields["date"][:10] in block


def test_control_a_saved_run_without_its_machine_is_refused(quoted):
    text = quoted.load_saved("explain").text()
    broken = "\n".join(line for line in text.splitlines() if not line.startswith("machine: "))
    with pytest.raises(ValueError, match="lacks the header field.*machine"):
        quoted.SavedRun.parse(broken)
    with pytest.raises(ValueError, match="no '----' line"):
        quoted.SavedRun.parse(text.replace("\n----\n", "\n"))


def test_markers_must_be_there_once(quoted):
    start, end = quoted.markers("x")
    assert quoted.written(f"a\n{start}\nout\n{end}\nb", "x") == "out"
    for broken in ("no markers", f"{start}\n{start}\n{end}", f"{end}\n{start}"):
        with pytest.raises(ValueError, match="markers of quote 'x'"):
            quoted.written(broken, "x")


def test_a_quoted_output_hides_the_checkout_and_the_cache_folder(quoted):
    """The pages show ``...`` for the checkout and the reader's cache folder, never the machine's
    own paths. Control: the cleaning, given this checkout's path, replaces it."""
    failed, attempted = doctest.testmod(quoted)
    assert attempted >= 1 and failed == 0
    for quote in quoted.QUOTES:
        output = quoted.load_saved(quote.name).output
        assert str(REPO_ROOT) not in output and "/tmp/" not in output, quote.name
    assert str(REPO_ROOT) not in quoted.cleaned(f"mask: {REPO_ROOT}/viasd_adapt/assets/demo/mask.json\n", "/c")
