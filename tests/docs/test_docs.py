"""The documentation holds to the repository it documents.

1. No file of the repository cites a document the repository does not hold (``X.md section N``,
   ``see Y.md``, a link to ``Z.md``), nor a numbered section a document does not have: code cites
   docs/method.md by section number, so those numbers must exist.
2. README.md and the pages under docs/ speak of the product, not of the work that made them.
3. Every relative link, every repository path and every ``viasd_adapt.`` name in backticks in
   README.md and docs/*.md resolves.

Each check is a function of :mod:`tests.docs.doc_checks`, and each has a control here: a text it
must flag. Files that do not pass yet are listed below and run as strict expected failures, so the
day one passes, its test fails and says which line to change.
"""

from __future__ import annotations

import re

import pytest

from tests.docs.doc_checks import (
    README,
    Repository,
    anchors,
    headings,
    markdown_pages,
    missing_citations,
    numbered_sections,
    slug,
    unresolved_references,
    work_log_phrases,
)
from tests.support import REPO_ROOT


#: Not read by the citation check: recorded outputs of earlier runs, which quote what the product
#: printed then (a cost file's source field), and this folder, whose texts are the checks' controls.
NOT_CITING = ("benchmarks/results/", "tests/docs/")

#: docs/method.md's numbered sections: code and pages cite them as "docs/method.md section N", so a
#: renumbered or renamed section must be a deliberate change, made here and in every citation.
METHOD_SECTIONS = {
    1: "Notation and modes",
    2: "The slim verifier",
    3: "The shared prefix",
    4: "Gate 1, the router and escalation",
    5: "Greedy gate readings: proposer and top",
    6: "The KL-margin cost and the Delta rule",
    7: "Finding the mask: DIMR and the guided search",
    8: "The lossless cascade",
    9: "The lenient baseline",
    10: "Fidelity: LL drop, regret, overrule rate, TV",
    11: "Full-equivalent passes",
    12: "Every rule is a hook",
    13: "The adaptive tier",
    14: "Where each concept lives",
}


@pytest.fixture(scope="module")
def repo() -> Repository:
    return Repository.of(REPO_ROOT)


def _pages() -> list[str]:
    """README.md and every page of docs/."""
    return [README, *markdown_pages(Repository.of(REPO_ROOT))]


def _text_files(repo: Repository) -> list[str]:
    """The repository's text files the citation check reads."""
    found = []
    for name in sorted(repo.files):
        if name.startswith(NOT_CITING) or name == README:
            continue
        path = repo.root / name
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        found.append(name)
    return found


# --------------------------------------------------------------------------- 1. citations


def test_citation_check_flags_documents_and_sections_the_repository_lacks(repo):
    """Control: each missing citation is flagged; citations of what exists, and web addresses, are not."""
    bad = ("The cost follows VIA-SD.md section 2.\n"
           "Read [the recipe](notes/missing.md) first.\n"
           "as BO-RECIPE.md's advice says\n"
           "see docs/method.md section 99\n")
    problems = missing_citations(repo, "viasd_adapt/core/example.py", bad)
    assert [p.split(":")[1] for p in problems] == ["1", "2", "3", "4"], problems
    assert "VIA-SD.md" in problems[0] and "missing.md" in problems[1] and "BO-RECIPE.md" in problems[2]
    assert "section 99" in problems[3]

    good = ("The cost: docs/method.md section 6 (and docs/method.md sections 3 and 4).\n"
            "See docs/architecture.md, [the README](../../README.md) and https://example.org/VIA-SD.md.\n")
    assert missing_citations(repo, "viasd_adapt/core/example.py", good) == []


def test_no_file_cites_a_document_the_repository_lacks(repo):
    files = _text_files(repo)
    assert len(files) > 100  # the check reads the code, the tests and the docs, not nothing
    problems = [p for name in files for p in missing_citations(repo, name, repo.text(name))]
    assert problems == [], "\n".join(problems)


def test_readme_cites_no_missing_document(repo):
    problems = missing_citations(repo, README, repo.text(README))
    assert problems == [], "\n".join(problems)


def test_method_sections_are_the_ones_code_cites(repo):
    """docs/method.md's numbered headings are exactly :data:`METHOD_SECTIONS`, in order."""
    numbered = [title for title in headings(repo.text("docs/method.md")) if re.match(r"\d+\. ", title)]
    assert numbered == [f"{number}. {title}" for number, title in METHOD_SECTIONS.items()]


def test_numbered_sections_and_anchors_are_read_as_a_browser_shows_them():
    """Control for the helpers the citation and link checks rest on."""
    page = "# Title\n\n## 4. Gate 1, the router and escalation\n```\n## 9. not a heading\n```\n## `--costs` and more\n"
    assert numbered_sections(page) == {4}
    assert anchors(page) == {"title", "4-gate-1-the-router-and-escalation", "--costs-and-more"}
    assert slug("Projections to another machine: `--costs`") == "projections-to-another-machine---costs"


# --------------------------------------------------------------------------- 2. the work log


def test_work_log_check_flags_rounds_lent_machines_sessions_and_issue_numbers():
    """Control: every kind of work-log phrase is flagged; upstream issues and ordinary words are not."""
    bad = ["Measured this round on the shared machine.",
           "No GPU was lent for it.",
           "Run it with the device tool.",
           "Left for the next session.",
           "Issue 25. Read against vLLM.",
           "The issue's goal (15% fewer passes) is missed.",
           "| #13 lossless >= 1.0x | missed |",
           "No weights can be downloaded where they were made.",
           "two code pairs trained here",
           "CPU, 1 thread with the other core busy, 28 min",
           "The drafter rows were not run again.",
           "every step under timeout, so a hang cannot eat the budget",
           "No pair we have comes near that."]
    for line in bad:
        assert work_log_phrases("docs/x.md", line), line

    fine = ("transformers#12345 is fixed upstream; see https://github.com/huggingface/transformers/issues/123 "
            "and [the tracker](https://github.com/pytorch/pytorch/issues/99). A fully accepted block lets "
            "drafting continue into the next round; sessions nest and close with the last session; see "
            "[section 4](method.md#4-gate-1-the-router-and-escalation).")
    assert work_log_phrases("docs/x.md", fine) == []


@pytest.mark.parametrize("page", _pages())
def test_page_speaks_of_the_product_not_of_the_work(repo, page):
    problems = work_log_phrases(page, repo.text(page))
    assert problems == [], "\n".join(problems)


# --------------------------------------------------------------------------- 3. references


def test_reference_check_flags_links_paths_and_names_that_do_not_resolve(repo):
    """Control: a broken link, anchor, path, glob, test id and dotted name are each flagged."""
    bad = ["See [the method](method.md#99-no-such-section).",
           "See [gone](no-such-page.md).",
           "Read `viasd_adapt/core/no_such_module.py`.",
           "Results in `benchmarks/results/no_such_*.txt`.",
           "Tested by `tests/core/test_cost.py::test_no_such_test`.",
           "The class `viasd_adapt.core.settings.NoSuchName`.",
           "The module `core/no_such_room.py`."]
    for line in bad:
        assert unresolved_references(repo, "docs/x.md", line), line

    good = ("See [the method](method.md#4-gate-1-the-router-and-escalation), [the root](../README.md), "
            "`viasd_adapt/core/cycle.py`, `benchmarks/results/tune_*.txt`, `core/rules.py`, "
            "`config/tuned.TunedSettings`, `viasd_adapt.core.cycle.decide_cycle`, `resolve_settings(...)`, "
            "`hf/plain`, `$VIASD_CACHE/gguf/<sha256>/`, `mask.json` and https://example.org/x.md.\n"
            "```\nviasd_adapt/not/checked/in/a/code/block.py\n```")
    assert unresolved_references(repo, "docs/x.md", good) == []


@pytest.mark.parametrize("page", _pages())
def test_links_and_paths_of_a_page_resolve(repo, page):
    problems = unresolved_references(repo, page, repo.text(page))
    assert problems == [], "\n".join(problems)


def test_the_documentation_index_links_every_page(repo):
    """docs/README.md names every page of docs/ (control: a text without links misses them all)."""
    index = repo.text("docs/README.md")
    pages = [page for page in markdown_pages(repo) if page != "docs/README.md"]

    def unlinked(text: str) -> list[str]:
        return [page for page in pages if f"]({page.removeprefix('docs/')})" not in text]

    assert unlinked("no links here") == pages
    assert unlinked(index) == []


def test_help_texts_speak_of_the_product_not_of_the_work():
    """Every command's --help passes the same check as the pages; control: a help text with a
    notebook phrase is flagged."""
    import click
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli

    def commands(command, path=()):
        yield path
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from commands(sub, path + (name,))

    assert work_log_phrases("viasd x --help", "Pairs trained here, on the machine with the other core busy.")
    problems, seen = [], 0
    for path in commands(cli):
        output = CliRunner().invoke(cli, [*path, "--help"], terminal_width=400).output
        assert "Usage:" in output
        seen += 1
        problems += work_log_phrases(" ".join(("viasd", *path, "--help")), " ".join(output.split()))
    assert seen >= 8 and problems == [], "\n".join(problems)
