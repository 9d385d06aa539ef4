"""The README's set-up section tells a new user what command 1 prints that looks like a failure
(pip's resolver message about eagle-llm's pins) and where the counts of its own command 2 are."""

from __future__ import annotations

from tests.support import REPO_ROOT

RESOLVER_MESSAGE = "ERROR: pip's dependency resolver"
SUITE_LINK = "docs/results.md#test-suite"


def setup_section(readme: str) -> str:
    start = readme.index("\n## Set-up")
    end = readme.find("\n## ", start + 1)
    return readme[start:end if end != -1 else None]


def setup_problems(readme: str) -> list[str]:
    section = setup_section(readme)
    problems = []
    if RESOLVER_MESSAGE not in section:
        problems.append("the set-up does not name pip's resolver message")
    elif "harmless" not in section:
        problems.append("the set-up names pip's resolver message without saying it is harmless")
    if SUITE_LINK not in section:
        problems.append("the set-up does not link the test counts of its command 2")
    return problems


def test_the_setup_names_the_resolver_message_and_links_the_suite_counts():
    assert setup_problems((REPO_ROOT / "README.md").read_text()) == []


def test_control_a_setup_without_them_is_caught():
    readme = (REPO_ROOT / "README.md").read_text()
    section = setup_section(readme)
    assert setup_problems(readme.replace(section, section.replace(RESOLVER_MESSAGE, "pip prints"))) == [
        "the set-up does not name pip's resolver message"]
    assert setup_problems(readme.replace(section, section.replace("harmless", "odd"))) == [
        "the set-up names pip's resolver message without saying it is harmless"]
    assert setup_problems(readme.replace(section, section.replace(SUITE_LINK, "docs/results.md"))) == [
        "the set-up does not link the test counts of its command 2"]
