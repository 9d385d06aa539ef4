"""Each figure the pages share is stated in one place, and the others link to it.

A figure stated on two pages drifts: one copy is updated, the other is not, and a reader finds two
answers (the paper's scale as 7B-70B on one page and 9B-72B on another; the first-load speed three
ways). Each check below names the one page that states a figure and finds it stated elsewhere.
"""

from __future__ import annotations

import re

from tests.support import REPO_ROOT

#: a command's output pasted by benchmarks/quoted_outputs.py: what the command prints, not the page's prose
QUOTED = re.compile(r"<!-- quoted: (?P<name>[\w-]+) .*?<!-- end quoted: (?P=name) -->", re.S)

PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md"))]

#: figure -> (the one page that states it, a pattern that finds a statement of it)
ONE_PLACE: dict[str, tuple[str, re.Pattern[str]]] = {
    # the paper's model scale: a range of parameter counts such as "9B to 72B" or "7B-70B"
    "the paper's scale": ("docs/paper.md", re.compile(r"\b\d+(?:\.\d+)?B\s*(?:-|–|to)\s*\d+(?:\.\d+)?B\b")),
    # how long a GGUF file's first load takes per billion parameters
    "the first-load speed": ("docs/results.md", re.compile(r"per\s+billion\s+parameters", re.IGNORECASE)),
    # the test suite's counts
    "the suite's counts": ("docs/results.md", re.compile(r"\b\d{1,3},\d{3}\s+passed\b")),
    # the shipped pairs' tuned choices, said in prose (the table in docs/tuning.md is rendered from
    # the tuned.json files): "writes lenient on both demo pairs", "lenient on demo, untiered SD on demo-ee"
    "the shipped tuned choices": ("docs/tuning.md", re.compile(
        r"(?:writes|picks|records|recommends|holds)\s+(?:lenient|untiered SD|`?sd`?|`?ar`?|the target alone)\s+"
        r"(?:on|for)\s+(?:both demo|demo|smollm2|SmolLM2)|lenient on demo, untiered SD on demo-ee"
        r"|on the shipped pairs:\s*(?:lenient|untiered SD|`?sd`?|`?ar`?)\b", re.IGNORECASE)),
}


def statements(text: str, pattern: re.Pattern[str]) -> list[str]:
    """Each statement of a figure in ``text`` (its line breaks read as spaces)."""
    return [match.group(0) for match in pattern.finditer(" ".join(text.split()))]


def stated_elsewhere(pages: dict[str, str]) -> list[str]:
    """``"FIGURE: PAGE: statement"`` for a figure stated outside its one page, or missing there."""
    problems = []
    for figure, (home, pattern) in ONE_PLACE.items():
        for page, text in pages.items():
            found = statements(text, pattern)
            if page != home:
                problems += [f"{figure}: {page}: {statement!r}" for statement in found]
            elif figure != "the shipped tuned choices" and not found:
                problems.append(f"{figure}: {page} does not state it")
    return problems


def _pages() -> dict[str, str]:
    """Each page's prose: quoted command outputs left out (the demo's output states the first-load
    speed its own way, and is re-made from the command, not written)."""
    return {page: QUOTED.sub("", (REPO_ROOT / page).read_text()) for page in PAGES}


def test_each_shared_figure_is_stated_in_one_place():
    assert stated_elsewhere(_pages()) == []


def test_control_the_old_statements_are_caught():
    """Control: the README's and results page's former wording, put back, is flagged."""
    pages = _pages()
    pages["README.md"] += "\nHow these small pairs compare with the paper's 7B-70B figures.\n"
    pages["docs/real-models.md"] += "\nthe first load took 63-94 s (about 2.5 min per\nbillion parameters).\n"
    pages["docs/results.md"] += "\n`viasd tune` writes lenient on both demo pairs and untiered SD on SmolLM2.\n"
    pages["docs/hf.md"] += "\nthe suite: 1,965 passed, 13 skipped.\n"
    pages["docs/pearl.md"] += "\n`settings=None` runs the tuned choice (on the shipped pairs: lenient).\n"
    problems = stated_elsewhere(pages)
    assert any(p.startswith("the paper's scale: README.md: '7B-70B'") for p in problems)
    assert any(p.startswith("the first-load speed: docs/real-models.md") for p in problems)
    assert any(p.startswith("the shipped tuned choices: docs/results.md") for p in problems)
    assert any(p.startswith("the suite's counts: docs/hf.md") for p in problems)
    assert any(p.startswith("the shipped tuned choices: docs/pearl.md") for p in problems)
    assert len(problems) == 5


def test_control_a_figure_gone_from_its_page_is_caught():
    pages = _pages()
    pages["docs/paper.md"] = pages["docs/paper.md"].replace("9B to 72B", "large")
    assert stated_elsewhere(pages) == ["the paper's scale: docs/paper.md does not state it"]


SUITE_MARKER = "<!-- suite figures: one line, updated after each full run -->"
SUITE_LINE = re.compile(r"\*\*Latest:\*\* [\d,]+ passed and \d+ skipped in (?:\d+ min )?\d+ s, 20\d\d-\d\d-\d\d\b.*")


def suite_line_problem(results: str) -> str | None:
    """Why ``results`` does not hold the suite's figures as one line under their marker (None: it does)."""
    if results.count(SUITE_MARKER) != 1:
        return "the marker is missing or repeated"
    line = results.split(SUITE_MARKER, 1)[1].lstrip("\n").split("\n", 1)[0]
    return None if SUITE_LINE.fullmatch(line) else f"not one line of counts, time and date: {line!r}"


def test_the_suite_figures_are_one_line_under_their_marker():
    """The README's command 2's test counts are one line, right under a marker comment, so that one
    edit after a full run updates them; the README states no count and links there. Control: the
    counts split over two lines, or without a date, are refused."""
    results = (REPO_ROOT / "docs" / "results.md").read_text()
    assert suite_line_problem(results) is None
    assert "(docs/results.md#test-suite)" in (REPO_ROOT / "README.md").read_text()
    assert suite_line_problem(results.replace(SUITE_MARKER + "\n**Latest:** ", SUITE_MARKER + "\n**Latest:**\n"))
    assert suite_line_problem(re.sub(r"(\*\*Latest:\*\*.*?s), 20\d\d-\d\d-\d\d", r"\1", results))
    assert suite_line_problem(results + "\n" + SUITE_MARKER)
