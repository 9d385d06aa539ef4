"""Lossless identity on a target split by a device map (``--device-map auto``), on a GPU or the CPU.

The shipped demo pair is loaded with ``load_pair(..., device_map="auto", max_memory=...)``, the
path of every command's ``--device-map``: ``max_memory`` gives the first device (``cuda:0``, or
the CPU without a GPU) about half the target, so accelerate puts the rest on the CPU (and the
disk) and every forward runs through its hooks. For a few held-out prompts the split target's
own greedy output (``generate``) is compared token for token with stock HF assisted generation,
``hf.tiered`` lossless (with and without the shared prefix) and PEARL (untiered and lossless),
the methods of ``cuda_lossless_check.py``. A divergence is reported with the target's top-1/top-2
logit gap there (a near-tie at rounding level, or a bug).

    python benchmarks/device_map_check.py --json gpu_results/device_map.json       # cuda:0 + CPU
    python benchmarks/device_map_check.py --num-prompts 2 --max-new-tokens 8        # on a CPU: CPU + disk
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cuda_lossless_check import first_divergence, methods, top2_gap  # noqa: E402
from demo_pair_cuda import demo_prompts, environment  # noqa: E402

from viasd_adapt.io import write_json  # noqa: E402


def half_the_target(folder: Path, dtype: str) -> int:
    """About half the target's bytes in ``dtype`` (its float32 safetensors, scaled)."""
    stored = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    return max(1, stored * (4 if dtype == "float32" else 2) // 4 // 2)


def split_load(dtype: str, offload: Path):
    """The demo pair, its target spread over the first device and the CPU (or the CPU and the disk)."""
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.models.registry import demo_pair_paths

    paths = demo_pair_paths()
    first = 0 if torch.cuda.is_available() else "cpu"
    budget = {first: half_the_target(paths.target, dtype)}
    if first == 0:
        budget["cpu"] = 64 * 2**30
    pair = load_pair(paths.target, paths.draft, paths.mask, device_map="auto", max_memory=budget, offload_folder=offload,
                     dtype=dtype, spec=None)
    return paths, pair


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="viasd-device-map-") as offload:
        paths, pair = split_load(args.dtype, Path(offload))
        target, drafter = pair.target, pair.draft
        places = sorted({str(v) for v in target.hf_device_map.values()})
        print(f"device map over {', '.join(places)}; inputs on {pair.device}", flush=True)
        prompts = demo_prompts(pair.tokenizer, args.num_prompts)
        report = {"environment": environment(), "dtype": args.dtype, "device_map_places": places,
                  "hf_device_map": {k: str(v) for k, v in target.hf_device_map.items()}, "methods": {}}
        references = []
        with torch.no_grad():
            for prompt in prompts:
                out = target.generate(torch.tensor([prompt], device=pair.device), max_new_tokens=args.max_new_tokens,
                                      min_new_tokens=args.max_new_tokens, do_sample=False)
                references.append(out[0, len(prompt):].tolist())
        for name, run in methods(SimpleNamespace(mask=paths.mask), target, drafter, args.max_new_tokens).items():
            result = {"identical": 0, "total": len(prompts), "divergences": []}
            try:
                for prompt, reference in zip(prompts, references):
                    at = first_divergence(run(prompt)[: args.max_new_tokens], reference)
                    if at is None:
                        result["identical"] += 1
                    else:
                        gap = top2_gap(target, prompt, reference, at) if at < len(reference) else None
                        result["divergences"].append({"position": at, "target_top2_logit_gap": gap})
            except Exception as err:  # the point of the check: report, then go on
                result["error"] = f"{type(err).__name__}: {err}"
            report["methods"][name] = result
            print(f"{name:<22} identical {result['identical']}/{len(prompts)}"
                  + (f"  ERROR {result['error']}" if "error" in result else ""), flush=True)
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
