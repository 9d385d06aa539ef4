"""User pages say what the product does, not what changed: no changelog wording in README.md or
docs/*.md (history goes to CHANGELOG.md).

A page that says "now prices", "as before", "no longer" or "today's names" reads as a diff against
a version the reader never saw. :data:`CHANGELOG_WORDING` lists such phrases; the check reads the
pages' text as ``git grep`` would, line by line, inside code blocks too (a comment in a snippet is
read as well).
"""

from __future__ import annotations

import re

import pytest

from tests.support import REPO_ROOT

#: Phrases that narrate a change rather than describe the product, case-insensitive. A dated
#: measurement ("an earlier run of this command (2026-12-01)") is a result, not changelog wording,
#: and is not matched.
CHANGELOG_WORDING: tuple[str, ...] = (
    r"\bas before\b",
    r"\bships now\b",
    r"\btoday'?s?\b",
    r"\bnow (?:prices|holds|takes|asks|works|warns|reads|runs|ships|uses|gives|says|refuses|writes|records|"
    r"counts|measures|keeps|checks|names|skips|covers|fails|handed|priced|is|are|has|does)\b",
    r"\bno longer\b",
    r"\b(?:is|are) now\b",
    r"\bused to (?:be|run|take|say|write|pick|cost|print|warn|fail|read)\b",
    r"\bbefore the (?:memory|fix|change|rename|work|rewrite)\b",
    r"\bafter the (?:memory work|fix|change|rename|rewrite)\b",
    r"\b(?:previously|formerly|anymore|any more)\b",
    r"\b(?:was|were|has been|have been) (?:renamed|changed|replaced|removed|fixed)\b",
    r"\bwritten before\b",
    r"\bstill (?:means|reads|works)\b",
    r"\bgot no word before\b",
    r"\bdeclared, not shipped\b",
)
PATTERN = re.compile("|".join(f"(?:{p})" for p in CHANGELOG_WORDING), re.IGNORECASE)
#: a command's output pasted by benchmarks/quoted_outputs.py: what the command prints, not the page's prose
QUOTED = re.compile(r"<!-- quoted: (?P<name>[\w-]+) .*?<!-- end quoted: (?P=name) -->", re.S)


def user_pages() -> list[str]:
    return ["README.md", *sorted(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md"))]


def changelog_wording(text: str) -> list[str]:
    """``"LINE: phrase"`` for each changelog phrase in ``text``, outside quoted command outputs (a
    quoted output's lines are blanked, so the line numbers stay the page's)."""
    text = QUOTED.sub(lambda quoted: "\n" * quoted.group(0).count("\n"), text)
    return [f"{number}: {match.group(0)!r}" for number, line in enumerate(text.splitlines(), 1)
            for match in PATTERN.finditer(line)]


def test_every_listed_phrase_is_caught():
    """Control: one sentence per phrase of the issue that asked for this, and each is flagged."""
    for sentence in ("The tier on every cycle, exactly as before.", "the re-tuned one that ships now",
                     "it reads under today's names", "the plan now prices a block of drafter steps",
                     "Before the memory work the run took 53 min", "a verify pass is no longer free",
                     "the bench used to print two tables", "a random drafter now warns in PEARL",
                     "`--modes lossless-adaptive` still means `lossless`", "files written before still read",
                     "smollm2 is declared, not shipped", "`rope_scaling` is now an alias"):
        assert changelog_wording(sentence), sentence


def test_present_tense_and_dated_results_pass():
    """Control: what a page may say is not flagged: the product in the present tense, a dated earlier
    measurement, and words that share a prefix with a phrase."""
    for sentence in ("The adaptive tier probes the idle arm now and then.",
                     "an earlier run of this command (2026-12-01) priced those as block passes",
                     "The pair is built in a hidden folder and renamed into place at the end.",
                     "a mask is used to skip layers", "The search asks only for the cost while searching.",
                     "<!-- quoted: x (s) -->\nthe command printed: no longer found\n<!-- end quoted: x -->"):
        assert changelog_wording(sentence) == [], sentence
    assert changelog_wording("<!-- quoted: x (s) -->\nok\n<!-- end quoted: x -->\nas before") == ["4: 'as before'"]


@pytest.mark.parametrize("page", user_pages())
def test_user_pages_have_no_changelog_wording(page):
    assert changelog_wording((REPO_ROOT / page).read_text()) == [], f"{page}: say what the product does; history goes to CHANGELOG.md"
