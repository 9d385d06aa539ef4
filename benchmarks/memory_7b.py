"""Peak memory at the Llama-2-7B shape, measured: the target alone vs the target with the slim tier.

``slim_memory.py`` counts tensor bytes on a small model and projects the ratio to 7B; this script
measures it. A randomly initialised Llama at the Llama-2-7B shape (32 layers, hidden 4096, 6.74e9
parameters; about 13.5 GB in bfloat16) is built directly in the asked dtype (no float32 copy: that
would be 27 GB) in two separate processes, so each one's peak resident set (``ru_maxrss``) is its
own:

* ``alone``: the target decodes with a small drafter in mode ``none`` (q verifies every block; no
  slim verifier exists);
* ``tier``: the same, in mode ``lossless`` with a slim verifier (a mask skipping ``round(r * L)``
  layers) and the shared prefix: u runs every cycle, so its cache covers the whole context.

The ``tier`` process then times a full pass, a slim pass and a resumed pass over a block at a short
context (``forward_costs.shape_rows``, medians of ``--repeats``) and gives them as fractions of the
full pass at that shape on this machine. Weights' values change neither memory nor cost.

Needs about 15 GB of free memory per process (they run one after the other); it refuses to start
with less than ``--min-free-gb`` available.

    python benchmarks/memory_7b.py --json benchmarks/results/memory_7b_cpu.json
    python benchmarks/memory_7b.py --shape tiny          # the same path in seconds (a smoke run)
"""

from __future__ import annotations

import argparse
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))

from viasd_adapt.config.schema import read_json  # noqa: E402
from viasd_adapt.io import write_json  # noqa: E402


def available_gb() -> float:
    """MemAvailable from /proc/meminfo in GB (inf where there is no /proc)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return float("inf")


def peak_rss_bytes() -> int:
    """This process's peak resident set (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def interleaved_costs(model, context: int, gamma: int, ratio: float, repeats: int) -> dict:
    """Milliseconds (medians) of a full pass over a block, a full one-token step, a slim pass over the
    block with its own cache (a mask spread over the stack), and, with the shared prefix at a mask
    skipping a contiguous run from the middle layer, the slim pass and the resumed full pass; timed
    round-robin, so that other work on a shared machine slows every row alike."""
    import statistics

    import torch
    from forward_costs import skip_run_mask, spread_mask
    from viasd_adapt.routing import SlimVerifier
    from viasd_adapt.routing.runner import CachedRunner
    from viasd_adapt.routing.shared import SharedPrefixRunners

    layers, vocab = model.config.num_hidden_layers, model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (context,), generator=generator).tolist()
    block = torch.randint(3, vocab, (gamma + 1,), generator=generator).tolist()
    sequence, skipped = prompt + block, round(ratio * layers)
    full = CachedRunner(model)
    spread = SlimVerifier(model, spread_mask(layers, skipped))
    separate = CachedRunner(spread.model, spread.new_cache)
    shared_mask = skip_run_mask(layers, skipped, layers // 2)
    shared = SharedPrefixRunners(model, SlimVerifier(model, shared_mask))
    passes = {
        "full_block": lambda: full.logits_for(sequence, len(block)),
        "full_token": lambda: full.logits_for(prompt + block[:1], 1),
        "slim_block": lambda: separate.logits_for(sequence, len(block)),
        "shared_slim_block": lambda: shared.slim_logits(sequence, len(block)),
        "resumed_full_block": lambda: shared.full_logits(sequence, len(block)),  # right after u's pass
    }
    times: dict[str, list[float]] = {name: [] for name in passes}
    with torch.no_grad():
        for runner in (full, separate):
            runner.logits_for(prompt, 1)  # prefill, untimed
        for round_ in range(repeats + 1):  # the first round warms up
            for name, run in passes.items():
                start = time.perf_counter()
                run()
                if round_:
                    times[name].append(time.perf_counter() - start)
    ms = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    return {"ms": ms, "fraction_of_full_block": {name: value / ms["full_block"] for name, value in ms.items()},
            "slim_mask_skipped": list(spread_mask(layers, skipped).skipped),
            "shared_mask_skipped": list(shared_mask.skipped), "shared_s1": shared_mask.first_skipped,
            "context": context, "block": len(block), "repeats": repeats}


def child(args: argparse.Namespace) -> dict:
    """One process: build, decode in the role's mode, report peak RSS (and, for ``tier``, pass costs)."""
    import torch
    import transformers
    from forward_costs import DTYPES, SHAPES, Shape, build
    from viasd_adapt.core.hooks import make_plugin_manager
    from viasd_adapt.core.sampling import SamplingConfig
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.engine.drafters import ModelDrafter
    from viasd_adapt.engine.loop import speculative_generate
    from viasd_adapt.engine.verifier import TieredVerifier
    from viasd_adapt.engine.context import open_context
    from viasd_adapt.routing.mask import random_mask

    torch.set_num_threads(args.threads)
    device, dtype = torch.device("cpu"), DTYPES[args.dtype]
    shape = SHAPES[args.shape]
    start = time.perf_counter()
    target = build(shape, device, dtype, "sdpa", args.seed, args.context + args.new_tokens)
    built = time.perf_counter() - start
    after_build = peak_rss_bytes()
    drafter_model = build(Shape(256, 512, 2, 4, shape.vocab), device, dtype, "sdpa", args.seed + 1,
                          args.context + args.new_tokens)
    layers = target.config.num_hidden_layers
    mask = random_mask(layers, args.ratio, torch.Generator().manual_seed(args.seed))
    tier = args.role == "tier"
    sampling = SamplingConfig()
    context = open_context(target, mask if tier else None,
                           TierSettings(mode="lossless" if tier else "none", gamma=args.gamma, adaptive=False),
                           plugin_manager=make_plugin_manager(load_entrypoints=False))
    verifier = TieredVerifier.of(context, context.verify_step("engine"), sampling, share_prefix=tier)
    prompt = torch.randint(3, shape.vocab, (args.context,), generator=torch.Generator().manual_seed(args.seed)).tolist()
    start = time.perf_counter()
    with torch.no_grad():
        out = speculative_generate(ModelDrafter(drafter_model, sampling), verifier, prompt, args.new_tokens)
    result = {
        "role": args.role, "shape": args.shape, "dtype": args.dtype, "layers": layers, "mask": str(mask),
        "build_seconds": round(built, 1), "generate_seconds": round(time.perf_counter() - start, 1),
        "tokens": len(out.tokens), "full_passes": out.metrics.full_passes, "slim_passes": out.metrics.slim_passes,
        "peak_rss_after_build": after_build, "peak_rss": peak_rss_bytes(),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in target.parameters()),
        "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads(),
    }
    if tier and args.repeats > 0:
        verifier = out = None
        result["costs"] = interleaved_costs(target, args.cost_context, args.gamma, args.ratio, args.repeats)
    return result


def summary(alone: dict, tier: dict) -> dict:
    """The ratios the docs quote (peaks; pass costs as fractions of a full block pass)."""
    out = {"peak_ratio": tier["peak_rss"] / alone["peak_rss"]}
    if "costs" in tier:
        out.update({name: round(value, 3) for name, value in tier["costs"]["fraction_of_full_block"].items()})
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="llama2-7b", help="llama2-7b (default) or tiny (a smoke run)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--context", type=int, default=128, help="prompt tokens of the decoding run")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--ratio", type=float, default=0.45, help="fraction of layers the slim verifier skips")
    parser.add_argument("--cost-context", type=int, default=64, help="context of the timed passes")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per cost row (0: no cost rows)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-free-gb", type=float, default=17.0)
    parser.add_argument("--role", choices=["alone", "tier"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--roles", default="alone,tier", help="the runs to make (tier alone: pass costs only)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    if args.role:  # a child: its result goes to the file --json names
        write_json(args.json, child(args))
        return {}

    passed = [f"--{name.replace('_', '-')}={value}" for name, value in vars(args).items()
              if name not in ("role", "roles", "json", "min_free_gb")]
    results = {}
    for role in args.roles.split(","):
        free = available_gb()
        if args.shape != "tiny" and free < args.min_free_gb:
            raise SystemExit(f"only {free:.1f} GB available, {args.min_free_gb} needed for the {role} run")
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / f"{role}.json"
            proc = subprocess.run([sys.executable, __file__, *passed, "--role", role, "--json", str(out)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"the {role} run failed:\n{proc.stderr[-3000:]}")
            results[role] = read_json(out, f"the {role} run's result")
        print(f"{role}: peak RSS {results[role]['peak_rss'] / 1e9:.2f} GB "
              f"(after building the target {results[role]['peak_rss_after_build'] / 1e9:.2f} GB; "
              f"weights {results[role]['parameter_bytes'] / 1e9:.2f} GB), "
              f"{results[role]['tokens']} tokens in {results[role]['generate_seconds']} s", flush=True)
    if "alone" not in results:
        results["alone"] = results["tier"]  # a costs-only run: no peak to compare
    ratios = summary(results["alone"], results["tier"])
    print(f"peak with the tier / target alone: {ratios['peak_ratio']:.4f}x")
    if "costs" in results["tier"]:
        costs = results["tier"]["costs"]
        print(f"passes at a {costs['context']}-token context, a {costs['block']}-token block, medians of "
              f"{costs['repeats']} (round-robin), as fractions of the full block pass ({costs['ms']['full_block']:.0f} ms):")
        for name, fraction in costs["fraction_of_full_block"].items():
            print(f"  {name:<20}{costs['ms'][name]:>10.0f} ms{fraction:>8.3f}")
    result = {"machine": platform.machine(), "processor": platform.processor(), "args": vars(args) | {"json": None},
              "runs": results, "summary": ratios}
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
