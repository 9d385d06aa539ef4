"""Re-measures the held-out agreement of the masks a ``search_bo_vs_random.py`` run found, on many
more held-out prompts than the run itself used.

Why: the search benchmark on SmolLM2 holds out 12 prompts x 16 tokens (192 positions), where one
agreement figure has a standard error of about 0.036, the size of the gaps between the searched
and the best random masks. This script takes every best mask of one or more result files (each
method, each seed) and scores it on every Spec-Bench calibration-split question the run did not
calibrate on, with the same prompt cut and greedy length, so the comparison of agreements rests
on enough positions to mean something. It runs no search.

    python benchmarks/search_heldout_recheck.py benchmarks/results/search_smollm2_drafter.json \\
        benchmarks/results/search_smollm2_margin.json --json benchmarks/results/search_smollm2_heldout.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from viasd_adapt.config.schema import read_json

sys.path.insert(0, str(Path(__file__).resolve().parent))

from search_bo_vs_random import load_pair  # noqa: E402  (the benchmark's own pair loading)


def heldout_prompt_ids(tokenizer, calib_prompts: int, prompt_tokens: int) -> list[list[int]]:
    """Every calibration-split question after the run's calibration prompts, in the run's order."""
    from viasd_adapt.prompts import spec_bench
    from viasd_adapt.prompts.chat import encode_prompt

    questions = spec_bench.select(split="calibration")
    order = sorted(questions, key=lambda q: (questions.index(q) % 16, q.task))
    return [encode_prompt(tokenizer, q.turns[0])[-prompt_tokens:] for q in order[calib_prompts:]]


def recheck(paths: list[Path], threads: int, window_cache: Path | None) -> dict:
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.search.decoder_windows import WindowCache
    from viasd_adapt.search.objective import AgreementProbe

    torch.set_num_threads(threads)
    runs = [read_json(p, "search run record") for p in paths]
    first = runs[0]
    for run in runs[1:]:
        for key in ("pair_name", "calib_prompts", "new_tokens"):
            if run.get(key) != first.get(key):
                raise SystemExit(f"{key} differs between the result files; recheck them separately")
    args = argparse.Namespace(pair=first["pair_name"], target=None, draft=None)
    target, _, tokenizer, name, _ = load_pair(args)
    prompt_tokens = first.get("prompt_tokens", 40)
    ids = heldout_prompt_ids(tokenizer, first["calib_prompts"], prompt_tokens)
    started = time.perf_counter()
    cache = WindowCache(window_cache)
    windows = cache.windows(target, ids, first["new_tokens"])
    cache.save()
    probe = AgreementProbe(target, windows)
    positions = windows.num_scored
    print(f"{name}: {len(ids)} held-out prompts x {first['new_tokens']} tokens = {positions} positions "
          f"({time.perf_counter() - started:.0f}s)", flush=True)
    out = {"pair": name, "heldout_prompts": len(ids), "positions": positions, "files": [p.name for p in paths], "rows": []}
    memo: dict = {}
    for path, run in zip(paths, runs):
        for ratio, block in run["ratios"].items():
            for row in block["rows"]:
                skipped = tuple(row["best_skipped"])
                if skipped not in memo:
                    memo[skipped] = probe.of_mask(RoutingMask.from_skipped(run["L"], list(skipped)))
                agreement = memo[skipped]
                out["rows"].append({"file": path.name, "objective": run.get("objective", "routed"), "ratio": ratio,
                                    "method": row["method"], "seed": row["seed"], "best_skipped": list(skipped),
                                    "small_heldout_agreement": row["heldout_agreement"], "heldout_agreement": agreement,
                                    "standard_error": math.sqrt(agreement * (1 - agreement) / positions)})
                print(f"  {run.get('objective', 'routed'):7s} r={ratio} {row['method']:7s} seed {row['seed']}: "
                      f"skips {list(skipped)} agreement {agreement:.3f} +- {out['rows'][-1]['standard_error']:.3f} "
                      f"(run's own held-out: {row['heldout_agreement']:.3f})", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="search_bo_vs_random.py --json files")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--window-cache", type=Path, default=None)
    parser.add_argument("--json", dest="json_path", type=Path, default=None)
    args = parser.parse_args(argv)
    data = recheck(args.results, args.threads, args.window_cache)
    if args.json_path:
        from viasd_adapt.io import write_json

        write_json(args.json_path, data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
