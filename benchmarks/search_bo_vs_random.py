"""Random-only vs. random + BO mask search at equal evaluation budgets, over several seeds.

Usage::

    python benchmarks/search_bo_vs_random.py                      # the tiny preset (built if missing)
    python benchmarks/search_bo_vs_random.py --target viasd_adapt/assets/demo/target \
        --draft viasd_adapt/assets/demo/draft --seeds 4 --budgets 30,60

Both strategies score masks on ONE calibration set. Costs are deterministic, so evaluations are
memoised across runs: this saves CPU without changing any result. The price of BO is therefore
reported separately as its proposal overhead (GP fit + acquisition), next to the measured mean cost
of one mask evaluation, so "does BO earn its overhead" can be read off directly.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch


def load_pair(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.target:
        target_path, draft_path = Path(args.target), Path(args.draft)
    else:
        from viasd_adapt.errors import ViasdError
        from viasd_adapt.models.registry import resolve_pair

        try:
            pair = resolve_pair(args.pair)
        except ViasdError:
            from viasd_adapt.models.build import build_pair

            print(f"building the {args.pair} preset ...", file=sys.stderr)
            build_pair(args.pair, seed=0, progress=False)
            pair = resolve_pair(args.pair)
        target_path, draft_path = pair.target, pair.draft
    target = AutoModelForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_path, dtype=torch.float32).eval()
    return target, draft, AutoTokenizer.from_pretrained(target_path), str(target_path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="tiny", help="registry pair name when --target/--draft are not given")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--ratio", type=float, default=0.45)
    parser.add_argument("--budgets", default="20,40", help="comma-separated evaluation budgets")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--bo-every", type=int, default=5)
    parser.add_argument("--calib-prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", dest="json_path", help="also write the raw results here")
    args = parser.parse_args(argv)
    if bool(args.target) != bool(args.draft):
        parser.error("give both --target and --draft, or neither")
    torch.set_num_threads(args.threads)

    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.routing.mask import RoutingMask, skip_count
    from viasd_adapt.search.calibration import build_calibration, default_prompts, encode_prompts
    from viasd_adapt.search.candidates import FixedCountSpace
    from viasd_adapt.search.dimr import SearchSettings, dimr_search
    from viasd_adapt.search.objective import MaskObjective

    target, draft, tokenizer, name = load_pair(args)
    num_layers = find_decoder_stack(target).num_layers
    k = skip_count(num_layers, args.ratio)
    prompts, _ = default_prompts(args.calib_prompts, 0, seed=0)
    t0 = time.perf_counter()
    calibration = build_calibration(target, draft, encode_prompts(tokenizer, prompts), args.new_tokens)
    objective = MaskObjective(target, calibration)
    print(f"pair {name}: L={num_layers}, k={k}, tau={calibration.tau}, calibration {time.perf_counter() - t0:.1f}s")

    memo: dict = {}
    eval_seconds: list[float] = []

    def cost(bits):
        if bits not in memo:
            start = time.perf_counter()
            memo[bits] = objective(RoutingMask.from_bits(bits))
            eval_seconds.append(time.perf_counter() - start)
        return memo[bits]

    budgets = [int(b) for b in args.budgets.split(",")]
    rows = []
    for budget in budgets:
        for seed in range(args.seeds):
            for method, bo_every in (("random", 0), ("random+BO", args.bo_every)):
                settings = SearchSettings(steps=budget, bo_every=bo_every, patience=0, seed=seed)
                result = dimr_search(cost, FixedCountSpace(num_layers, k), settings)
                rows.append({"budget": budget, "seed": seed, "method": method, "best": result.best.cost,
                             "bo_seconds": result.bo_seconds, "evaluations": result.evaluations})
                print(f"  budget {budget:4d} seed {seed} {method:10s} best {result.best.cost:9.3f} "
                      f"(BO overhead {result.bo_seconds:5.1f}s)", flush=True)

    mean_eval = statistics.mean(eval_seconds) if eval_seconds else float("nan")
    overall_best = min(memo.values())
    print(f"\nmean mask evaluation {mean_eval:.3f}s; {len(memo)} distinct masks evaluated; best of all {overall_best:.3f}")
    print(f"{'budget':>6} {'method':>10} {'median best':>12} {'mean best':>10} {'median gap':>11} {'BO s/run':>9} {'BO wins':>8}")
    for budget in budgets:
        for method in ("random", "random+BO"):
            sel = [r for r in rows if r["budget"] == budget and r["method"] == method]
            bests = [r["best"] for r in sel]
            wins = ""
            if method == "random+BO":
                rand = {r["seed"]: r["best"] for r in rows if r["budget"] == budget and r["method"] == "random"}
                wins = f"{sum(r['best'] < rand[r['seed']] for r in sel)}/{len(sel)}"
            print(f"{budget:6d} {method:>10} {statistics.median(bests):12.3f} {statistics.mean(bests):10.3f} "
                  f"{statistics.median(b - overall_best for b in bests):11.3f} "
                  f"{statistics.mean(r['bo_seconds'] for r in sel):9.1f} {wins:>8}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"pair": name, "L": num_layers, "k": k, "tau": calibration.tau,
                                                    "mean_eval_seconds": mean_eval, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
