"""What the README and docs/verdicts.md say about `viasd demo` and the test command is what the code
and `.ci/run` do."""

from __future__ import annotations

import re

from tests.support import REPO_ROOT
from viasd_adapt.bench.demo import BUDGETS, DemoBudget, preview_line


def demo_claim_problems(readme: str, verdicts: str, budget: DemoBudget) -> list[str]:
    """Where the two pages disagree with the demo's default sizes: one question answered, a bench
    of one question per task of ``budget.tasks`` (or as many held-out snippets), previewed."""
    n, first = len(budget.tasks), budget.tasks[0]
    readme, verdicts = " ".join(readme.split()), " ".join(verdicts.split())
    expected = {
        "README: the question answered": (readme, f"one Spec-Bench question ({first}) answered"),
        "README: the bench's questions": (readme, f"bench of every mode on {n} questions ({', '.join(budget.tasks)})"),
        "README: the command list": (readme, f"viasd demo # the real model: one answer, a {n}-question bench"),
        "verdicts: the bench's size": (verdicts, f"small bench of {n} prompts"),
        "verdicts: the preview line": (verdicts, f'"{preview_line([], n).split(":")[0]}: undetermined'),
        "verdicts: the prompt count": (verdicts, f"`viasd demo`'s {n}-prompt bench"),
    }
    problems = [f"{what}: expected {phrase!r}" for what, (text, phrase) in expected.items() if phrase not in text]
    stale = re.findall(r"three Spec-Bench questions answered|\b\d-prompt (?:bench|preview)|preview on \d+ prompts", readme + verdicts)
    problems += [f"a stale count: {s!r}" for s in stale if str(n) not in s]
    return problems


def test_readme_and_verdicts_describe_the_demo_the_code_runs():
    budget = BUDGETS["default"]
    assert budget.snippets == len(budget.tasks)  # a code pair's bench is as large, so one count fits both
    readme, verdicts = (REPO_ROOT / "README.md").read_text(), (REPO_ROOT / "docs" / "verdicts.md").read_text()
    assert demo_claim_problems(readme, verdicts, budget) == []


def test_control_the_old_wording_and_another_budget_are_flagged():
    budget = BUDGETS["default"]
    old_readme = "package: three Spec-Bench questions answered by the model alone and by its tuned setting"
    old_verdicts = "runs a small bench of 2 prompts ... `viasd demo`'s 2-prompt bench ends with \"preview on 2 prompts: undetermined ...\""
    problems = demo_claim_problems(old_readme, old_verdicts, budget)
    assert len(problems) >= 6 and any("stale" in p for p in problems)

    readme, verdicts = (REPO_ROOT / "README.md").read_text(), (REPO_ROOT / "docs" / "verdicts.md").read_text()
    two_tasks = DemoBudget(tasks=("translation", "qa"), snippets=2)
    assert demo_claim_problems(readme, verdicts, two_tasks)


def test_the_demo_help_says_one_question():
    from click.testing import CliRunner

    from viasd_adapt.cli.main import cli

    output = " ".join(CliRunner().invoke(cli, ["demo", "--help"]).output.split())
    assert "one question answered by the target alone and by the tuned setting" in output


def _readme_commands() -> list[str]:
    readme = (REPO_ROOT / "README.md").read_text()
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)]


def test_ci_runs_exactly_the_readme_test_command_which_lists_skip_reasons():
    """`.ci/run` ends with the README's second set-up command, verbatim; that command asks pytest for
    the reasons of skipped tests (`-rs`), as the README says. Control: the first (demo) command is
    not the CI's."""
    ci_lines = [line for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    demo, tests = _readme_commands()[:2]
    assert ci_lines[-1] == tests
    assert ci_lines[-1] != demo
    assert re.search(r"python -m pytest .*-rs\b", tests)
