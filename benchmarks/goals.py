"""The project's speed targets, checked against a bench JSON (and a tune JSON): MET, MISSED, or n/a.

Targets are fixed here and never tuned to a result; a missed target is reported as missed. They live
in benchmarks/, not in the installed package: they are this project's targets, not the library's.

    python benchmarks/goals.py benchmarks/results/bench_demo.json [--tune benchmarks/results/tune_demo.json]

Targets (their short names in brackets):
* [vs-lenient] tuned VIA-SD costs >= 15% fewer full-equivalent passes per token than the best
  lenient point within the same fidelity budget (from the tune JSON);
* [lossy-1.2x] the tuned lossy row runs >= 1.2x the tokens/s of untiered lossless SD (same framework);
* [lossless-1.0x] lossless mode is no cost: >= 1.0x the tokens/s of untiered SD (hf and pearl);
* [lossy-1.3x] lossy mode at the tuner's setting: >= 1.3x untiered SD tokens/s;
* [gpu] (GPU runs) tier-off overhead (none vs plain) <= 3% and every row at >= 80% of its bound.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from viasd_adapt.bench.report import load_bench_report
from viasd_adapt.config.tune_points import TunePoints

FEQ_GAIN_MIN = 0.15
LOSSY_VS_SD_MIN = 1.2
LOSSLESS_VS_SD_MIN = 1.0
LOSSY_VS_SD_TUNED_MIN = 1.3
TIER_OFF_OVERHEAD_MAX = 0.03
BOUND_FRACTION_MIN = 0.80


@dataclass(frozen=True)
class Goal:
    target: str  # its short name
    goal: str
    framework: str
    value: float | None
    threshold: str
    met: bool | None

    def line(self) -> str:
        status = {True: "MET", False: "MISSED", None: "n/a"}[self.met]
        value = "-" if self.value is None else f"{self.value:.3f}"
        return f"[{status:6s}] {self.target} {self.framework}: {self.goal} = {value} (goal {self.threshold})"


def _row(rows: list[dict], framework: str, mode: str) -> dict | None:
    return next((r for r in rows if r["framework"] == framework and r["mode"] == mode), None)


def check(bench: dict, tune: dict | None = None) -> list[Goal]:
    rows = bench["rows"]
    goals: list[Goal] = []
    if tune is not None:
        best = tune["tuned"]["report"]["best_within_budget"]
        viasd, lenient = best.get("lossy-fixed"), best.get("lenient")
        gain = None
        if viasd and lenient:
            gain = 1 - viasd["full_equivalent"] / lenient["full_equivalent"]
        elif viasd and not lenient:
            gain = float("inf")
        goals.append(Goal("vs-lenient", "tuned VIA-SD vs best lenient within budget, fewer feq/token", "tune", gain,
                          f">= {FEQ_GAIN_MIN:.0%}", None if gain is None else gain >= FEQ_GAIN_MIN))
    gpu = "cuda" in bench.get("environment", {}).get("device", "")
    for framework in dict.fromkeys(r["framework"] for r in rows if r["framework"] != "ar"):
        for mode, target, minimum, label in (("lossy", "lossy-1.2x", LOSSY_VS_SD_MIN, "lossy tokens/s vs untiered SD"),
                                             ("lossless", "lossless-1.0x", LOSSLESS_VS_SD_MIN, "lossless tokens/s vs untiered SD"),
                                             ("lossy", "lossy-1.3x", LOSSY_VS_SD_TUNED_MIN, "lossy tokens/s vs untiered SD")):
            row = _row(rows, framework, mode)
            if row is not None:
                value = row.get("speedup_vs_untiered")
                goals.append(Goal(target, label, framework, value, f">= {minimum:.2f}x",
                                  None if value is None else value >= minimum))
        plain = _row(rows, framework, "plain")
        if gpu and plain is not None and plain.get("speedup_vs_untiered"):
            overhead = 1 - 1 / plain["speedup_vs_untiered"]
            goals.append(Goal("gpu", "tier-off overhead (none vs plain)", framework, overhead,
                              f"<= {TIER_OFF_OVERHEAD_MAX:.0%}", overhead <= TIER_OFF_OVERHEAD_MAX))
        if gpu:
            for row in (r for r in rows if r["framework"] == framework and r.get("fraction_of_bound") is not None):
                goals.append(Goal("gpu", f"{row['mode']} share of its analytic bound", framework, row["fraction_of_bound"],
                                  f">= {BOUND_FRACTION_MIN:.0%}", row["fraction_of_bound"] >= BOUND_FRACTION_MIN))
    return goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", type=Path)
    parser.add_argument("--tune", type=Path, default=None)
    args = parser.parse_args()
    tune = TunePoints.load(args.tune).to_json() if args.tune else None
    for goal in check(load_bench_report(args.bench).to_json(), tune):
        print(goal.line())


if __name__ == "__main__":
    main()
