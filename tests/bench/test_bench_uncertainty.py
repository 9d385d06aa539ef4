"""The verdict's uncertainty over prompts: the bench keeps per-prompt sums, the verdict resamples them.

Why verdicts carry their uncertainty: on 3 prompts the demo called lossy PEARL a win because one prompt's regret
pushed lenient out of the budget. The pure bootstrap is tested in tests/core/test_uncertainty.py;
here: the verdict's sentences on synthetic rows and the demo's preview line. What a real bench run
keeps per prompt is tested in tests/bench/test_bench.py (on its bench run, at no extra cost).
"""

from __future__ import annotations

from viasd_adapt.bench.verdict import verdict
from viasd_adapt.bench.demo import preview_line

TOKENS = 16


def _row(framework, mode, cost, regret, ll=-1.5):
    n = len(cost)
    return {"framework": framework, "mode": mode, "full_equivalent_per_token": sum(cost) / n,
            "ll_drop": 0.0, "regret": sum(regret) / n,
            "per_prompt": {"tokens": [TOKENS] * n, "cost": [c * TOKENS for c in cost],
                           "log_likelihood": [ll * TOKENS] * n, "regret": [r * TOKENS for r in regret]}}


def test_the_demos_case_a_win_that_hangs_on_one_prompt_is_undetermined_and_recommends_the_simpler_row():
    n = 8
    lenient_regret = [0.3] + [0.0] * (n - 1)  # pooled 0.0375: out of the 0.02 budget because of prompt 0
    rows = [_row("ar", "-", [1.2] * n, [0.0] * n), _row("pearl", "none", [1.0] * n, [0.0] * n),
            _row("pearl", "lenient", [0.6] * n, lenient_regret), _row("pearl", "lossy", [0.8] * n, [0.0] * n)]
    (line,) = verdict(rows)
    assert "is lossy" in line  # the point estimate, as before
    assert "The slim tier pays here." not in line
    assert "undetermined at 8 prompts" in line and "use the simpler none" in line and "lenient" in line
    # the same rows, lenient's regret spread evenly and small: lenient wins for sure
    rows[2] = _row("pearl", "lenient", [0.6] * n, [0.001] * n)
    (line,) = verdict(rows)
    assert "use lenient" in line and "Determined at 8 prompts" in line


def test_the_demo_says_its_verdict_is_a_preview():
    lines = ["hf: cheapest ... Undetermined at 2 prompts (...).", "pearl: cheapest ... Determined at 8 prompts (...)."]
    assert preview_line(lines, 2).startswith("preview on 2 prompts: undetermined for hf.")
    assert "preview on 8 prompts: determined for every framework" in preview_line(lines[1:], 8)
