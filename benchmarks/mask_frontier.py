"""Mask frontier: what each DIMR search space buys, in cost and in agreement with the target.

Two search spaces (viasd_adapt.search.candidates):

* ``ratio``: exactly round(r * L) skipped layers, for several r (the paper's space);
* ``budget``: any mask whose retained layers from its first skipped layer s1 on (the work the
  target cannot reuse when it resumes at s1) fit a budget, for several budgets.

For the best mask of each search: its layer prices, its measured per-forward costs with the shared
prefix (the slim pass alone, as a fraction of a full block pass; and the slim pass plus the resumed
target pass, minus one full pass: what the slim tier adds when q runs after it), and its held-out
teacher-forced argmax agreement with the target. One calibration serves every search.

    python benchmarks/mask_frontier.py --pair demo --json benchmarks/results/mask_frontier_demo.json \\
        --plot benchmarks/results/mask_frontier_demo.png
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch


def main() -> None:
    from viasd_adapt.bench.costs import measure_forward_costs
    from viasd_adapt.io import write_json
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.config.mask import RoutingMask, skip_count
    from viasd_adapt.routing.slim import SlimVerifier
    from viasd_adapt.prompts.splits import search_snippets
    from viasd_adapt.search.decoder_windows import build_calibration, build_windows, encode_prompts
    from viasd_adapt.search.candidates import BudgetSpace, FixedCountSpace
    from viasd_adapt.search.config import SearchConfig
    from viasd_adapt.search.dimr import dimr_search
    from viasd_adapt.search.objective import AgreementProbe, MaskObjective
    from viasd_adapt.search.price import mask_price

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="demo")
    parser.add_argument("--ratios", default="0.25,0.35,0.45,0.55,0.65")
    parser.add_argument("--budgets", default="0.1,0.2,0.3,0.4")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    paths = resolve_pair(args.pair)
    pair = load_pair(paths.target, paths.draft, need_mask=False, device="cpu")
    calib, heldout = search_snippets(16, 16, seed=0)
    calibration = build_calibration(pair.target, pair.draft, encode_prompts(pair.tokenizer, calib), 48)
    objective = MaskObjective(pair.target, calibration)
    probe = AgreementProbe(pair.target, build_windows(pair.target, encode_prompts(pair.tokenizer, heldout), 48))
    num_layers = len(pair.target.model.layers)
    context = calibration.windows.input_ids[0, :96].tolist()
    spaces = [("ratio", float(r), FixedCountSpace(num_layers, skip_count(num_layers, float(r)))) for r in args.ratios.split(",")]
    spaces += [("budget", float(b), BudgetSpace(num_layers, int(float(b) * num_layers))) for b in args.budgets.split(",")]
    rows = []
    for kind, value, space in spaces:
        cache: dict = {}

        def cost(bits):
            if bits not in cache:
                cache[bits] = objective(RoutingMask.from_bits(bits))
            return cache[bits]

        config = SearchConfig(strategy="dimr", steps=args.steps, bo_every=5, patience=0, seed=args.seed)
        result = dimr_search(cost, space, config)
        mask = RoutingMask.from_bits(result.best.bits)
        costs = measure_forward_costs(pair.target, pair.draft, SlimVerifier(pair.target, mask), context, 5, 9)
        slim = costs.c_slim / costs.c_full_block
        resume = (costs.c_resume or costs.c_full_block) / costs.c_full_block
        row = {"space": kind, "value": value, "skipped": list(mask.skipped), "price": mask_price(mask),
               "routed_cost": result.best.cost, "heldout_agreement": probe.of_mask(mask),
               "slim_cost": slim, "resume_cost": resume, "added_cost_when_q_runs": slim + resume - 1.0}
        rows.append(row)
        print(f"{kind:6s} {value:.2f}: skips {row['skipped']} (s1 {row['price']['s1']}) agreement {row['heldout_agreement']:.3f} "
              f"slim {slim:.2f} resume {resume:.2f} added {row['added_cost_when_q_runs']:+.2f}", flush=True)
    data = {"pair": str(paths.root), "rows": rows, "drafter_heldout_agreement": probe.of_model(pair.draft),
            "seconds": round(time.perf_counter() - started, 1), "steps": args.steps}
    if args.json:
        write_json(args.json, data)
    if args.plot:
        _plot(rows, data, paths.name, args.plot)


def _plot(rows: list[dict], data: dict, name: str, path: Path) -> None:
    """Agreement against each of the two costs, one line per search space."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from viasd_adapt.io import save_figure

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, key, label in ((axes[0], "slim_cost", "slim pass alone (fraction of a full block pass)"),
                           (axes[1], "added_cost_when_q_runs", "slim + resumed target pass - one full pass")):
        for kind, colour in (("ratio", "#1f77b4"), ("budget", "#d62728")):
            members = sorted((r for r in rows if r["space"] == kind), key=lambda r: r[key])
            ax.plot([r[key] for r in members], [r["heldout_agreement"] for r in members], "-o", color=colour,
                    label=f"{kind} space")
            for r in members:
                ax.annotate(f"s1={r['price']['s1']}", (r[key], r["heldout_agreement"]), fontsize=6,
                            xytext=(3, -8), textcoords="offset points")
        ax.axhline(data["drafter_heldout_agreement"], color="grey", linestyle="--", linewidth=0.8, label="drafter")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out argmax agreement with the target")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"DIMR masks on {name}: cost vs agreement, ratio vs budget search space", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


if __name__ == "__main__":
    main()
