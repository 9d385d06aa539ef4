"""Where does the slim tier pay? Tuned VIA-SD against tuned lenient over a range of fidelity budgets.

`viasd tune` answers for one budget (default: LL drop and regret <= 0.02 nats/token). This script
reads its ``--json`` file and answers for several: for each regret bound R (the LL-drop bound is
max(0.02, R)), the cheapest VIA-SD lossy point, the cheapest lenient grid point, and lenient's
frontier interpolated at VIA-SD's own regret (lenient's grid is coarse; comparing against the
nearest grid point alone would flatter the tier). A positive gain means VIA-SD needs fewer
full-equivalent passes per token than lenient at the same regret.

    python benchmarks/tune_budgets.py benchmarks/results/tune_demo-ee.json [--regrets 0.01,0.02,0.05,0.08]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from viasd_adapt.config.tune_points import TunePoints


def admitted(points: list[dict], family: str, regret_bound: float) -> list[dict]:
    ll_bound = max(0.02, regret_bound)
    return [p for p in points if p["family"] == family and p["regret"] is not None
            and p["regret"] <= regret_bound and p["ll_drop"] <= ll_bound]


def lower_frontier(points: list[dict]) -> list[tuple[float, float]]:
    """(regret, cost) corners of the cheapest-cost-for-a-regret frontier, by increasing regret."""
    corners: list[tuple[float, float]] = []
    for p in sorted(points, key=lambda p: (p["regret"], p["full_equivalent"])):
        if not corners or p["full_equivalent"] < corners[-1][1]:
            corners.append((p["regret"], p["full_equivalent"]))
    return corners


def interpolated_cost(corners: list[tuple[float, float]], regret: float) -> float | None:
    """The frontier's cost at ``regret``, linear between corners; None beyond the last corner."""
    if not corners or regret < corners[0][0]:
        return None
    for (r0, c0), (r1, c1) in zip(corners, corners[1:]):
        if r0 <= regret <= r1:
            return c0 + (c1 - c0) * (regret - r0) / (r1 - r0) if r1 > r0 else min(c0, c1)
    return corners[-1][1]


def describe(point: dict) -> str:
    s = point["settings"]
    if s["mode"] == "lenient":
        return f"a={s['lenience']}"
    mask = Path(point["mask"]).name if point.get("mask") else "-"
    return f"a1={s['alpha1']} a2={s['alpha2']} {s['greedy_gates']} {mask}"


def table(points: list[dict], regrets: list[float]) -> list[dict]:
    lenient_all = [p for p in points if p["family"] == "lenient" and p["regret"] is not None]
    rows = []
    for bound in regrets:
        viasd = admitted(points, "lossy-fixed", bound)
        lenient = admitted(points, "lenient", bound)
        best_v = min(viasd, key=lambda p: p["full_equivalent"]) if viasd else None
        best_l = min(lenient, key=lambda p: p["full_equivalent"]) if lenient else None
        at_same = None
        if best_v is not None:
            at_same = interpolated_cost(lower_frontier([p for p in lenient_all if p["ll_drop"] <= max(0.02, bound)]),
                                        best_v["regret"])
        rows.append({
            "regret_bound": bound,
            "viasd": None if best_v is None else {"feq": best_v["full_equivalent"], "regret": best_v["regret"], "setting": describe(best_v)},
            "lenient": None if best_l is None else {"feq": best_l["full_equivalent"], "regret": best_l["regret"], "setting": describe(best_l)},
            "lenient_at_viasd_regret": at_same,
            "gain_vs_grid": None if best_v is None or best_l is None else 1 - best_v["full_equivalent"] / best_l["full_equivalent"],
            "gain_vs_frontier": None if best_v is None or at_same is None else 1 - best_v["full_equivalent"] / at_same,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tune_json", type=Path)
    parser.add_argument("--regrets", default="0.01,0.02,0.03,0.05,0.08,0.12")
    args = parser.parse_args()
    points = TunePoints.load(args.tune_json).to_json()["points"]
    rows = table(points, [float(r) for r in args.regrets.split(",")])
    pct = lambda x: "-" if x is None else f"{100 * x:+.0f}%"  # noqa: E731
    cell = lambda d: "-" if d is None else f"{d['feq']:.3f} (regret {d['regret']:.3f}; {d['setting']})"  # noqa: E731
    print("| regret <= | VIA-SD lossy | lenient (grid) | lenient frontier at VIA-SD's regret | VIA-SD gain vs grid | vs frontier |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        frontier = "-" if r["lenient_at_viasd_regret"] is None else f"{r['lenient_at_viasd_regret']:.3f}"
        print(f"| {r['regret_bound']} | {cell(r['viasd'])} | {cell(r['lenient'])} | {frontier} | "
              f"{pct(r['gain_vs_grid'])} | {pct(r['gain_vs_frontier'])} |")


if __name__ == "__main__":
    main()
