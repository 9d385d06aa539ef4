"""Mask-search strategies at equal evaluation budgets, over several seeds.

Usage::

    python benchmarks/search_bo_vs_random.py --pair demo --ratios 0.45 --seeds 3
    python benchmarks/search_bo_vs_random.py --pair demo-ee --ratios 0.45 --seeds 3
    python benchmarks/search_bo_vs_random.py --pair smollm2 --ratios 0.2 --seeds 3 --budget 60 \\
        --methods random,guided --calib-prompts 10 --new-tokens 24 --prompt-tokens 48

Methods (``--methods``, comma-separated):

* ``random``: random masks of the space (``dimr.py``, bo_every = 0);
* ``dimr-bo``: the previous DIMR, random + a BoTorch proposal every 5 steps;
* ``guided``: ``guided.py`` with every ingredient (probes, warm starts, swap trust region, GP);
* ``probe``, ``warm``, ``local``, ``gp``: each ingredient of ``guided`` alone.

Every method scores masks on ONE calibration set with the same objective, and every cost call
counts as an evaluation (the guided search's L single-layer probes included). Costs are
deterministic, so evaluations are memoised across methods and seeds: this saves CPU without
changing any result. Wall time per run is therefore *reconstructed*: the measured time of each of
its evaluations (timed once, when first computed) plus its own proposal overhead (GP fits,
candidate scoring), measured in the run.

Reported per method: best calibration cost (median and per seed), its ratio to the median random
mask, wins against the best random mask of the same seed, held-out greedy agreement of the best
mask (on prompts the search never saw), and wall time. Chat models (a tokenizer with a chat
template) calibrate on Spec-Bench calibration-split questions rendered through the chat template,
held-out agreement uses other calibration-split questions; other pairs use held-out stdlib code.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from viasd_adapt.io import write_json

METHODS = ("random", "dimr-bo", "guided", "probe", "warm", "local", "gp")


def load_pair(args):
    from viasd_adapt.models.loading import load_model, load_tokenizer
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.routing.slim import SlimVerifier

    if args.target:
        target_path, draft_path = Path(args.target), Path(args.draft)
    else:
        from viasd_adapt.models.registry import resolve_pair

        pair = resolve_pair(args.pair)
        target_path, draft_path = pair.target, pair.draft
    target = load_model(target_path, torch.device("cpu"), "target").float().eval()
    tokenizer = load_tokenizer(target_path)
    if isinstance(draft_path, str) or draft_path is None:  # prompt-lookup has no distribution to score
        from viasd_adapt.routing.layers import find_decoder_stack

        L = find_decoder_stack(target).num_layers
        draft = SlimVerifier(target, RoutingMask.from_bits([1] + [0] * (L - 1))).model
        draft_name = "target's first layer + head (proxy p for a drafter without distributions)"
    else:
        draft = load_model(draft_path, torch.device("cpu"), "draft", target=target).float().eval()
        draft_name = _portable(draft_path)
    return target, draft, tokenizer, _portable(target_path), draft_name


def _portable(path) -> str:
    """A path as results record it: relative to the repository (or the package), never absolute."""
    from viasd_adapt.io import relative_name

    text = relative_name(path, Path(__file__).resolve().parent.parent)
    return text if not Path(text).is_absolute() else Path(text).name


def prompt_ids(tokenizer, args):
    """(calibration ids, held-out ids, description)."""
    from viasd_adapt.prompts.chat import has_chat_template

    if has_chat_template(tokenizer):
        from viasd_adapt.prompts import spec_bench
        from viasd_adapt.prompts.chat import encode_prompt

        questions = spec_bench.select(split="calibration")
        # round-robin over tasks so both sets cover every task
        order = sorted(questions, key=lambda q: (questions.index(q) % 16, q.task))
        calib = order[: args.calib_prompts]
        held = order[args.calib_prompts : args.calib_prompts + args.heldout_prompts]

        def enc(q):
            return encode_prompt(tokenizer, q.turns[0])[-args.prompt_tokens:]

        return [enc(q) for q in calib], [enc(q) for q in held], "Spec-Bench calibration split, chat template"
    from viasd_adapt.prompts.splits import search_snippets
    from viasd_adapt.search.decoder_windows import encode_prompts

    calib, held = search_snippets(args.calib_prompts, args.heldout_prompts, seed=0)
    return (encode_prompts(tokenizer, calib, args.prompt_tokens), encode_prompts(tokenizer, held, args.prompt_tokens),
            "held-out stdlib snippets")


def run_method(method, cost, space, budget, seed, bo_every):
    from viasd_adapt.search.config import GuidedConfig, SearchConfig
    from viasd_adapt.search.dimr import dimr_search
    from viasd_adapt.search.guided import guided_search

    if method == "random":
        return dimr_search(cost, space, SearchConfig(strategy="dimr", steps=budget, bo_every=0, patience=0, seed=seed))
    if method == "dimr-bo":
        return dimr_search(cost, space, SearchConfig(strategy="dimr", steps=budget, bo_every=bo_every, patience=0,
                                                     seed=seed))
    flags = {"guided": {}, "probe": dict(warm=False, local=False, gp=False),
             "warm": dict(probe=False, local=False, gp=False), "local": dict(probe=False, warm=False, gp=False),
             "gp": dict(probe=False, warm=False, local=False)}[method]
    return guided_search(cost, space, SearchConfig(steps=budget, seed=seed, patience=0, guided=GuidedConfig(**flags)))


def _arguments(argv) -> tuple[argparse.Namespace, list[str]]:
    """The command line, checked, and the methods it names."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", default="demo", help="registry pair name when --target/--draft are not given")
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--ratios", default="0.45", help="comma-separated routing ratios")
    parser.add_argument("--budget", type=int, default=0, help="evaluations per run (0: guided.default_steps(L))")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--bo-every", type=int, default=5)
    parser.add_argument("--calib-prompts", type=int, default=16)
    parser.add_argument("--heldout-prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--objective", choices=["routed", "q-only", "margin"], default="routed",
                        help="routed: C(u||p) + C(q||u) (the paper); q-only: C(q||u), for drafters without a distribution; "
                             "margin: the log-margin of u's greedy top-1 agreement with q")
    parser.add_argument("--window-cache", help="calibration window cache file (reused across runs)")
    parser.add_argument("--json", dest="json_path", help="write the raw results here")
    parser.add_argument("--plot", dest="plot_path", help="convergence plot (mean best-so-far / median random)")
    args = parser.parse_args(argv)
    if bool(args.target) != bool(args.draft):
        parser.error("give both --target and --draft, or neither")
    methods = [m for m in args.methods.split(",") if m]
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    return args, methods


class _Evaluations:
    """The objective and the held-out agreement of each distinct mask, computed once, with the
    seconds each objective evaluation took (a run is charged for its evaluations as if fresh)."""

    def __init__(self, objective, probe):
        self.objective, self.probe = objective, probe
        self.memo: dict = {}
        self.seconds: dict = {}
        self.agreements: dict = {}

    def cost(self, bits):
        from viasd_adapt.config.mask import RoutingMask

        if bits not in self.memo:
            start = time.perf_counter()
            self.memo[bits] = self.objective(RoutingMask.from_bits(bits))
            self.seconds[bits] = time.perf_counter() - start
            if len(self.memo) % 10 == 0:
                print(f"    {len(self.memo)} distinct masks evaluated, mean {statistics.mean(self.seconds.values()):.2f}s each",
                      flush=True)
        return self.memo[bits]

    def agreement(self, bits):
        from viasd_adapt.config.mask import RoutingMask

        if bits not in self.agreements:
            self.agreements[bits] = self.probe.of_mask(RoutingMask.from_bits(bits))
        return self.agreements[bits]


def _run_row(method: str, seed: int, ratio: float, space, budget: int, bo_every: int, evaluations: _Evaluations) -> dict:
    """One search run (``method``, ``seed``) in ``space``: its best mask, its curve and its time."""
    from viasd_adapt.search.guided import PROBE

    before = time.perf_counter()
    spent_before = sum(evaluations.seconds.values())
    result = run_method(method, evaluations.cost, space, budget, seed, bo_every)
    elapsed = time.perf_counter() - before
    fresh = sum(evaluations.seconds.values()) - spent_before  # evaluations computed in this run
    overhead = elapsed - fresh  # proposals (GP fits, candidate scoring) and memo look-ups
    evals = sum(evaluations.seconds[e.bits] for e in result.history)
    wall = evals + max(0.0, overhead)  # the run's own wall time, had it computed every evaluation
    best = result.best
    row = {"method": method, "seed": seed, "best": best.cost, "best_skipped": [i for i, b in enumerate(best.bits) if b == 0],
           "heldout_agreement": evaluations.agreement(best.bits), "wall_seconds": wall, "eval_seconds": evals,
           "overhead_seconds": max(0.0, overhead), "evaluations": result.evaluations,
           "probe_evaluations": sum(1 for e in result.history if e.kind == PROBE),
           "curve": result.best_curve(), "costs": [e.cost for e in result.history if e.in_space]}
    print(f"  r={ratio} {method:8s} seed {seed}: best {best.cost:10.2f} skips {row['best_skipped']} "
          f"held-out agreement {row['heldout_agreement']:.3f} wall {wall:6.1f}s (overhead {row['overhead_seconds']:.1f}s)",
          flush=True)
    return row


def main(argv=None) -> int:
    args, methods = _arguments(argv)
    torch.set_num_threads(args.threads)

    from viasd_adapt.routing.layers import find_decoder_stack
    from viasd_adapt.config.mask import skip_count
    from viasd_adapt.search.decoder_windows import WindowCache, build_calibration
    from viasd_adapt.search.candidates import FixedCountSpace
    from viasd_adapt.search.guided import default_steps
    from viasd_adapt.search.objective import AgreementProbe, MaskObjective

    t_load = time.perf_counter()
    target, draft, tokenizer, name, draft_name = load_pair(args)
    load_seconds = time.perf_counter() - t_load
    num_layers = find_decoder_stack(target).num_layers
    budget = args.budget or default_steps(num_layers)
    calib_ids, held_ids, prompt_source = prompt_ids(tokenizer, args)
    cache = WindowCache(args.window_cache)
    t0 = time.perf_counter()
    windows = cache.windows(target, calib_ids, args.new_tokens)
    held_windows = cache.windows(target, held_ids, args.new_tokens)
    cache.save()
    windows_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    calibration = build_calibration(target, draft, calib_ids, args.new_tokens, windows=windows)
    objective = MaskObjective(target, calibration, objective=args.objective)
    probe = AgreementProbe(target, held_windows)
    logprob_seconds = time.perf_counter() - t0
    print(f"pair {name} (draft: {draft_name}): L={num_layers}, tau={calibration.tau}, held-out tau={held_windows.num_scored}, "
          f"budget {budget}; load {load_seconds:.1f}s, windows {windows_seconds:.1f}s ({cache.report()}), "
          f"log-probs + prefix states {logprob_seconds:.1f}s; prompts: {prompt_source}", flush=True)

    evaluations = _Evaluations(objective, probe)
    results = {"pair": name, "pair_name": args.pair if not args.target else Path(args.target).parent.name, "draft": draft_name, "L": num_layers, "budget": budget, "seeds": args.seeds,
               "prompts": prompt_source, "objective": args.objective, "calib_prompts": len(calib_ids), "heldout_prompts": len(held_ids),
               "new_tokens": args.new_tokens, "prompt_tokens": args.prompt_tokens, "tau": calibration.tau,
               "heldout_tau": held_windows.num_scored,
               "threads": args.threads, "load_seconds": round(load_seconds, 1),
               "windows_seconds": round(windows_seconds, 1), "logprob_seconds": round(logprob_seconds, 1),
               "drafter_heldout_agreement": round(probe.of_model(draft), 4), "ratios": {}}
    for ratio in [float(r) for r in args.ratios.split(",")]:
        k = skip_count(num_layers, ratio)
        space = FixedCountSpace(num_layers, k)
        rows = [_run_row(method, seed, ratio, space, budget, args.bo_every, evaluations)
                for method in methods for seed in range(args.seeds)]
        summary = summarise(rows, methods)
        results["ratios"][str(ratio)] = {"k": k, "rows": rows, "summary": summary}
        print_table(ratio, k, summary)
        if args.json_path:
            write_json(args.json_path, results)
    results["mean_eval_seconds"] = statistics.mean(evaluations.seconds.values()) if evaluations.seconds else None
    results["distinct_masks"] = len(evaluations.memo)
    if args.json_path:
        write_json(args.json_path, results)
    if args.plot_path:
        plot(results, args.plot_path, methods)
    return 0


def summarise(rows, methods):
    random_rows = [r for r in rows if r["method"] == "random"]
    random_costs = [c for r in random_rows for c in r["costs"]]
    median_random = statistics.median(random_costs) if random_costs else None
    best_random = {r["seed"]: r for r in random_rows}
    out = {"median_random_mask": median_random}
    for method in methods:
        sel = [r for r in rows if r["method"] == method]
        bests = [r["best"] for r in sel]
        entry = {
            "median_best": statistics.median(bests), "bests": bests,
            "ratio_to_median_random": (median_random / statistics.median(bests)) if median_random and statistics.median(bests) > 0 else None,
            "heldout_agreement": [r["heldout_agreement"] for r in sel],
            "median_heldout_agreement": statistics.median(r["heldout_agreement"] for r in sel),
            "median_wall_seconds": statistics.median(r["wall_seconds"] for r in sel),
            "median_overhead_seconds": statistics.median(r["overhead_seconds"] for r in sel),
        }
        if best_random and method != "random":
            entry["beats_best_random"] = sum(r["best"] < best_random[r["seed"]]["best"] for r in sel if r["seed"] in best_random)
            entry["agreement_above_best_random"] = sum(
                r["heldout_agreement"] > best_random[r["seed"]]["heldout_agreement"] for r in sel if r["seed"] in best_random)
        out[method] = entry
    return out


def print_table(ratio, k, summary):
    print(f"\nr = {ratio} (k = {k}); median random mask {summary['median_random_mask']}")
    print(f"{'method':>8} {'median best':>12} {'x below median random':>21} {'beats best random':>18} "
          f"{'held-out agr (median)':>22} {'agr > best random':>18} {'wall s':>7}")
    for method, e in summary.items():
        if method == "median_random_mask":
            continue
        n = len(e["bests"])
        ratio_text = f"{e['ratio_to_median_random']:.2f}x" if e["ratio_to_median_random"] else "-"
        print(f"{method:>8} {e['median_best']:12.2f} {ratio_text:>21} "
              f"{(str(e['beats_best_random']) + '/' + str(n)) if 'beats_best_random' in e else '-':>18} "
              f"{e['median_heldout_agreement']:22.3f} "
              f"{(str(e['agreement_above_best_random']) + '/' + str(n)) if 'agreement_above_best_random' in e else '-':>18} "
              f"{e['median_wall_seconds']:7.1f}", flush=True)


def plot(results, path, methods):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratios = list(results["ratios"])
    fig, axes = plt.subplots(1, len(ratios), figsize=(6.5 * len(ratios), 4.2), dpi=110, squeeze=False)
    for ax, ratio in zip(axes[0], ratios):
        block = results["ratios"][ratio]
        for method in methods:
            curves = [r["curve"] for r in block["rows"] if r["method"] == method]
            if not curves:
                continue
            steps = range(1, min(map(len, curves)) + 1)
            median_curve = [statistics.median(c[i - 1] for c in curves) for i in steps]
            xs = [s for s, v in zip(steps, median_curve) if v != float("inf")]
            ys = [v for v in median_curve if v != float("inf")]
            ax.step(xs, ys, where="post", label=method, linewidth=2 if method in ("guided", "random") else 1)
        if block["summary"]["median_random_mask"]:
            ax.axhline(block["summary"]["median_random_mask"], color="k", linestyle="--", linewidth=1, label="median random mask")
        ax.set_yscale("log")
        ax.set_xlabel("evaluations (probes included)")
        ax.set_ylabel("best routed-path cost so far (median over seeds)")
        label = results.get("pair_name") or Path(results["pair"]).name
        ax.set_title(f"{label}: r = {ratio} (k = {block['k']} of {results['L']}), {results.get('objective', 'routed')} cost")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
