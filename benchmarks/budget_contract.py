"""Does ``viasd models add --minutes M`` keep its budget? Estimate against the time taken.

    python benchmarks/budget_contract.py                         # the shipped demo pair, M = 2 and 4
    python benchmarks/budget_contract.py --minutes 3 6 --target T --draft D

Runs ``viasd models add`` once per budget, each in a fresh cache folder and its own process, as a
user would, and reads the pair's ``report.json``: the estimate said before anything long started,
the time taken after the first load (what the budget covers), and the skip ratios tried. Prints
and writes ``benchmarks/results/budget_contract_<name>.txt`` with the command, date, machine and
load average, and for each budget: estimate / budget, taken / budget (the goal: at most 1.1) and
taken / estimate (the goal: within 25%).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from viasd_adapt.config.schema import read_json

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DEMO = REPO / "viasd_adapt" / "assets" / "demo"


def run_once(target: str, draft: str, minutes: float, threads: int) -> dict:
    """One ``viasd models add`` in a fresh cache; its report.json, or the refusal's line."""
    viasd = str(Path(sys.executable).with_name("viasd"))
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "VIASD_CACHE": cache, "OMP_NUM_THREADS": str(threads)}
        command = [viasd, "models", "add", "mine", "--target", target, "--draft", draft, "--minutes", f"{minutes:g}",
                   "--threads", str(threads), "--no-progress"]
        run = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
        if run.returncode != 0:
            return {"minutes": minutes, "refused": run.stderr.strip().splitlines()[-1]}
        report = read_json(Path(cache) / "mine" / "report.json", "onboarding report")
    estimate = report["estimate"]
    return {"minutes": minutes, "estimate_minutes": estimate["expected_minutes"],
            "taken_minutes": round(report["seconds_after_load"] / 60, 2),
            "ratios": [r["ratio"] for r in report.get("ratios", [])],
            "sizes": f"{estimate['search_steps']} masks, {estimate['tune_points']} settings on {estimate['tune_prompts']} prompts"}


def line(result: dict) -> str:
    if "refused" in result:
        return f"--minutes {result['minutes']:g}: refused: {result['refused']}"
    m, est, taken = result["minutes"], result["estimate_minutes"], result["taken_minutes"]
    return (f"--minutes {m:g}: estimate {est:.2f} min ({est / m:.2f} of the budget), taken {taken:.2f} min after the "
            f"first load ({taken / m:.2f} of the budget, goal <= 1.10), taken / estimate {taken / est:.2f} (goal 0.75-1.25); "
            f"{result['sizes']}, skip ratios {', '.join(f'{r:g}' for r in result['ratios'])}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[2.0, 4.0])
    parser.add_argument("--target", default=str(DEMO / "target"))
    parser.add_argument("--draft", default=str(DEMO / "draft"))
    parser.add_argument("--name", default="demo")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    lines = [f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"machine: {platform.machine()}, {os.cpu_count()} cores; load average at the start {os.getloadavg()[0]:.1f}",
             f"command: python benchmarks/budget_contract.py --minutes {' '.join(f'{m:g}' for m in args.minutes)} "
             f"--target {args.target} --draft {args.draft} --threads {args.threads}"]
    for minutes in args.minutes:
        lines.append(line(run_once(args.target, args.draft, minutes, args.threads)))
        print(lines[-1], flush=True)
    lines.append(f"load average at the end {os.getloadavg()[0]:.1f}")
    out = RESULTS / f"budget_contract_{args.name}.txt"
    out.write_text("\n".join(lines).replace(str(REPO), ".") + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
