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


def test_a_lossy_row_is_used_only_when_its_saving_over_the_exact_row_holds_in_the_resamples():
    """The exact-first rule in the bench's verdict, on synthetic rows: lossy saves 20% over untiered
    SD on every prompt, so it is used; the same average saving resting on two prompts out of eight
    (the others cost more than untiered SD) is within noise, and untiered SD is used, with the
    comparison's figures in the line. lenient is out of the budget on all prompts pooled (one
    prompt's regret), so it is never a candidate."""
    n = 8
    lenient_regret = [0.3] + [0.0] * (n - 1)  # pooled 0.0375: out of the 0.02 budget because of prompt 0
    rows = [_row("ar", "-", [1.2] * n, [0.0] * n), _row("pearl", "none", [1.0] * n, [0.0] * n),
            _row("pearl", "lenient", [0.6] * n, lenient_regret), _row("pearl", "lossy", [0.8] * n, [0.0] * n)]
    (line,) = verdict(rows)
    assert "The default (adaptive) tier pays here: use lossy" in line and "Determined at 8 prompts" in line
    assert "lossy (lossy) costs 0.800 against none's 1.000: 20.0% less" in line
    # control: the same pooled saving, carried by two prompts
    noisy = [0.2, 0.2] + [1.05] * (n - 2)
    rows[3] = _row("pearl", "lossy", noisy, [0.0] * n)
    (line,) = verdict(rows)
    assert "The slim tier does not pay here: use none" in line and "Undetermined at 8 prompts" in line
    assert "but it holds in only" in line and "within noise" in line and "so none (exact, simpler) is written" in line
    assert "100%" not in line  # "undetermined" never stands beside a share that reads as certainty
    # fewer than 5 prompts: undetermined, and the comparison that decided is quoted without its share
    few = [dict(r, per_prompt={k: v[:3] for k, v in r["per_prompt"].items()}) for r in rows[:2]]
    (line,) = verdict(few)
    assert "Undetermined at 3 prompts" in line and "none (exact) costs 1.000 against ar's 1.200" in line
    assert "% of 1000 resamples" not in line


def test_the_demo_says_its_verdict_is_a_preview():
    lines = ["hf: cheapest ... Undetermined at 2 prompts (...).", "pearl: cheapest ... Determined at 8 prompts (...)."]
    assert preview_line(lines, 2).startswith("preview on 2 prompts: undetermined for hf.")
    assert "preview on 8 prompts: determined for every framework" in preview_line(lines[1:], 8)
