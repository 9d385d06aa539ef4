"""Price a saved ``viasd bench --json`` report with another machine's forward costs.

    python benchmarks/project_saved.py benchmarks/results/bench_demo.json [--costs h200-llama2-7b]

The same projection as ``viasd bench --costs`` (:func:`viasd_adapt.bench.projection.project_rows`),
applied to a report already written, so that a figure measured before can be projected without
running it again. Pass counts do not depend on the machine; their prices do. A projection, not a
measurement: it assumes time is spent in forwards only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from viasd_adapt.bench.projection import load_cost_model, project_rows
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.bench.report import load_bench_report


def projected(report: dict, costs: str) -> list[dict]:
    """The report's rows priced by ``costs`` (each row keeps its measured price as ``measured_*``)."""
    run = report["run"]
    mask = run.get("mask") or {}
    routing = RoutingMask.from_skipped(len(mask["bits"]), mask["skipped_layers"]) if mask.get("bits") else None
    return project_rows(report["rows"], load_cost_model(costs), routing, run["settings"]["gamma"] + 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--costs", default="h200-llama2-7b")
    args = parser.parse_args(argv)
    for path in args.reports:
        report = load_bench_report(path).to_json()
        print(f"# {path}: {report['run']['command']}\n# priced with --costs {args.costs} (a projection)")
        print(f"{'row':24s} {'feq/tok measured':>17s} {'feq/tok projected':>18s} {'x_ar projected':>15s}")
        for row in projected(report, args.costs):
            name = row["framework"] if row["framework"] == "ar" else f"{row['framework']}/{row['mode']}"
            measured, price, speedup = (row.get("measured_full_equivalent_per_token"), row.get("full_equivalent_per_token"),
                                        row.get("projected_speedup_vs_ar"))
            cells = [f"{v:.3f}" if isinstance(v, float) else "-" for v in (measured, price)]
            shown = "-" if speedup is None else f"{speedup:.2f}"
            print(f"{name:24s} {cells[0]:>17s} {cells[1]:>18s} {shown:>15s}")
        print()


if __name__ == "__main__":
    main()
