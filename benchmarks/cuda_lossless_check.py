"""Lossless identity on a GPU: tiered lossless output against the target's own greedy output.

For each dtype, the shipped demo pair is loaded with ``device_map`` (as the bench loads it), its
``mask.json`` is checked against the loaded target (the fingerprint must hold in every dtype),
and for a few held-out prompts the target's plain greedy continuation (``generate``) is compared
token by token with:

* ``hf_stock_assisted``: transformers' assisted generation, no tier (the framework itself);
* ``hf_lossless`` / ``hf_lossless_separate``: ``hf.tiered(mode="lossless")``, with and without the
  shared prefix;
* ``pearl_none`` / ``pearl_lossless``: PEARL untiered and tiered.

It prints, per dtype and method, the fraction of prompts whose continuation is identical, and for
each divergence the position and the target's top-1/top-2 logit gap there (teacher-forced on the
reference prefix): a gap at float rounding level says the two computations met a near-tie
(block vs single-token forwards sum in a different order), a large gap says a bug.

    python benchmarks/cuda_lossless_check.py --device cuda --json gpu_results/lossless.json
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from demo_pair_cuda import DTYPES, demo_prompts, environment, load_demo  # noqa: E402

import viasd_adapt  # noqa: E402
from viasd_adapt.io import write_json  # noqa: E402


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.no_grad()
def top2_gap(target, prompt: list[int], reference: list[int], position: int) -> float:
    """The target's logit gap between its two best tokens at ``position`` of the reference."""
    device = next(target.parameters()).device
    ids = torch.tensor([prompt + reference[:position]], device=device)
    logits = target(ids).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def methods(pair, target, drafter, n_new: int):
    """name -> callable(prompt ids) -> generated ids."""
    from viasd_adapt.adapters import hf
    from viasd_adapt.adapters.pearl import pearl_generate
    from viasd_adapt.core.settings import TierSettings

    device = next(target.parameters()).device
    lossless = TierSettings(mode="lossless")

    def hf_call(prompt, settings=None, share_prefix=True):
        ids = torch.tensor([prompt], device=device)
        if settings is None:
            out = target.generate(ids, assistant_model=drafter, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False)
        else:
            run = viasd_adapt.context(target, mask=str(pair.mask), settings=settings)
            with hf.tiered(target, context=run, share_prefix=share_prefix):
                out = target.generate(ids, assistant_model=drafter, max_new_tokens=n_new, min_new_tokens=n_new,
                                      do_sample=False)
        return out[0, len(prompt):].tolist()

    untiered = viasd_adapt.context(target, settings=TierSettings(mode="none"))
    pearl_lossless = viasd_adapt.context(target, settings=lossless, mask=str(pair.mask))
    return {
        "hf_stock_assisted": lambda prompt: hf_call(prompt),
        "hf_lossless": lambda prompt: hf_call(prompt, settings=lossless),
        "hf_lossless_separate": lambda prompt: hf_call(prompt, settings=lossless, share_prefix=False),
        "pearl_none": lambda prompt: pearl_generate(target, drafter, prompt, n_new, context=untiered, seed=0).tokens,
        "pearl_lossless": lambda prompt: pearl_generate(target, drafter, prompt, n_new, context=pearl_lossless,
                                                        seed=0).tokens,
    }


def check_dtype(dtype_name: str, device: torch.device, n_prompts: int, n_new: int) -> dict:
    from viasd_adapt.config.mask import MaskArtifact

    start = time.perf_counter()
    pair, tokenizer, target, drafter = load_demo(DTYPES[dtype_name], device, device_map=device.type == "cuda")
    entry: dict = {"device_map": device.type == "cuda"}
    try:
        MaskArtifact.load(pair.mask, target)
        entry["mask_loads"] = True
    except Exception as err:  # the point of the check: report, then go on
        entry["mask_loads"] = f"{type(err).__name__}: {err}"
    prompts = demo_prompts(tokenizer, n_prompts)
    references = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=device)
        out = target.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False)
        references.append(out[0, len(prompt):].tolist())
    entry["methods"] = {}
    for name, run in methods(pair, target, drafter, n_new).items():
        result = {"identical": 0, "total": len(prompts), "divergences": []}
        try:
            t0 = time.perf_counter()
            for prompt, reference in zip(prompts, references):
                tokens = run(prompt)[:n_new]
                at = first_divergence(tokens, reference)
                if at is None:
                    result["identical"] += 1
                else:
                    gap = top2_gap(target, prompt, reference, at) if at < len(reference) else None
                    result["divergences"].append({"position": at, "target_top2_logit_gap": gap})
            result["seconds"] = round(time.perf_counter() - t0, 2)
        except Exception as err:
            result["error"] = f"{type(err).__name__}: {err}"
        result["fraction_identical"] = result["identical"] / max(1, len(prompts))
        entry["methods"][name] = result
        gaps = [d["target_top2_logit_gap"] for d in result["divergences"] if d["target_top2_logit_gap"] is not None]
        print(f"{dtype_name:>9} {name:<22} identical {result['identical']}/{len(prompts)} "
              f"({result['fraction_identical']:.2f})" + (f"  divergence gaps {['%.3g' % g for g in gaps]}" if gaps else "")
              + (f"  ERROR {result['error']}" if "error" in result else ""), flush=True)
    entry["seconds"] = round(time.perf_counter() - start, 1)
    del target, drafter
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return entry


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--num-prompts", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    result = {"environment": environment(), "num_prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens,
              "dtypes": {}}
    for name in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
        try:
            result["dtypes"][name] = check_dtype(name, device, args.num_prompts, args.max_new_tokens)
        except Exception as err:
            result["dtypes"][name] = {"error": f"{type(err).__name__}: {err}"}
            print(f"{name}: ERROR {type(err).__name__}: {err}", flush=True)
        if args.json:  # written after each dtype, so a timeout keeps what was measured
            write_json(args.json, result, what="lossless check")
    return result


if __name__ == "__main__":
    outcome = main()
    failed = [name for name, entry in outcome["dtypes"].items()
              if "error" in entry or any("error" in m for m in entry.get("methods", {}).values())]
    sys.exit(1 if failed else 0)  # identity itself is reported, not enforced: see the fractions
