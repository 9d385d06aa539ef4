"""Per-forward costs at real model shapes, random weights: what one pass of each kind costs.

VIA-SD's speed claims are made in full-equivalent passes (docs/method.md section 11), which need the
cost of each kind of forward relative to the full target's block pass. This script builds a
randomly initialised Llama of a given shape (weights do not change the cost of a forward), fills
a KV cache with a ``--context``-token prompt, and times, over a block of ``gamma + 1`` new tokens:

* ``full_token``: the target, one new token (one autoregressive step);
* ``full_block``: the target, the block (the reference: fraction 1.0);
* ``slim_block``: the slim verifier (a mask skipping ``round(r * L)`` layers) with its own cache;
* per mask with first skipped layer s1 in {1, L/4, L/2, 3L/4} (same number of skipped layers, a
  contiguous run from s1; s1 is lowered to L - k when the run would not fit, the pure early exit)
  with the shared prefix (:class:`viasd_adapt.routing.shared.SharedPrefixRunners`):
  ``shared_slim_block`` (u's pass, which also keeps h_s1) and ``resumed_full_block`` (q's pass over
  the block u already processed, layers s1 .. L-1 only);
* ``draft_token``: a drafter of another shape (``--drafter``; Llama-2-7B for the 13B target), one
  token, timed as that model's ``full_token``.

Each row gives milliseconds (median of ``--repeats``, with the device synchronised around each
pass: wall time is what batch-1 decoding pays, launches included), the fraction of
``full_block``, and ``layers_run``: how many decoder layers one pass called (counted with hooks in a
separate, untimed pass), which is what sharing saves whatever the hardware.

    python benchmarks/forward_costs.py                                  # tiny shape on the CPU
    python benchmarks/forward_costs.py --device cuda --dtype bfloat16 --shapes llama2-7b,llama2-13b \\
        --drafter llama2-13b=llama2-7b --json gpu_results/forward_costs.json
"""

from __future__ import annotations

import argparse
import importlib.util
import contextlib
import gc
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viasd_adapt.io import write_json  # noqa: E402
from viasd_adapt.config.mask import RoutingMask  # noqa: E402
from viasd_adapt.routing import SlimVerifier, find_decoder_stack
from viasd_adapt.routing.shared import SharedPrefixRunners  # noqa: E402
from viasd_adapt.routing.runner import CachedRunner  # noqa: E402


class Shape(NamedTuple):
    """A Llama shape (the Llama-2 family; MHA, no GQA)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    vocab: int


SHAPES = {
    "llama2-7b": Shape(4096, 11008, 32, 32, 32000),
    "llama2-13b": Shape(5120, 13824, 40, 40, 32000),
    "tiny": Shape(64, 128, 8, 4, 256),
}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def build(shape: Shape, device: torch.device, dtype: torch.dtype, attn: str, seed: int, context: int):
    """A random model of ``shape`` built directly on ``device`` in ``dtype`` (no CPU copy first)."""
    config = LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.heads,
        max_position_embeddings=max(4096, 2 * context), tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    with device:
        try:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
        except TypeError:  # transformers 4.x spells it torch_dtype
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype, attn_implementation=attn)
    return model.eval()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def counting_layer_calls(model):
    """Counts calls of the target's decoder layers (the real ones, shared by every view)."""
    counter = {"calls": 0}

    def hook(module, args):
        counter["calls"] += 1

    handles = [layer.register_forward_pre_hook(hook) for layer in find_decoder_stack(model).layers]
    try:
        yield counter
    finally:
        for handle in handles:
            handle.remove()


def skip_run_mask(layers: int, skipped: int, s1: int) -> RoutingMask:
    """``skipped`` contiguous layers from ``s1`` (lowered so the run fits)."""
    s1 = min(max(1, s1), layers - skipped)
    return RoutingMask.from_skipped(layers, range(s1, s1 + skipped))


def spread_mask(layers: int, skipped: int) -> RoutingMask:
    """``skipped`` layers spread evenly over 1 .. L-1 (layer 0 kept), for the separate-cache slim row."""
    step = (layers - 1) / skipped
    return RoutingMask.from_skipped(layers, sorted({1 + int(i * step) for i in range(skipped)}))


class Timer:
    """Median wall time of a pass, and the decoder layers it calls."""

    def __init__(self, model, device: torch.device, repeats: int):
        self.model, self.device, self.repeats = model, device, repeats

    def measure(self, run_once, prepare=lambda: None) -> dict:
        prepare()
        run_once()  # warm-up (kernel choice, allocator)
        times = []
        for _ in range(self.repeats):
            prepare()
            sync(self.device)
            start = time.perf_counter()
            run_once()
            sync(self.device)
            times.append(time.perf_counter() - start)
        prepare()
        with counting_layer_calls(self.model) as counter:
            run_once()
        return {"ms": 1e3 * statistics.median(times), "layers_run": counter["calls"]}


@torch.no_grad()
def shape_rows(model, device: torch.device, context: int, gamma: int, ratio: float, repeats: int) -> list[dict]:
    """The rows of one target shape (module docstring)."""
    layers = find_decoder_stack(model).num_layers
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (context,), generator=generator).tolist()
    block = torch.randint(3, vocab, (gamma + 1,), generator=generator).tolist()
    sequence = prompt + block
    timer = Timer(model, device, repeats)
    rows = []

    full = CachedRunner(model)
    full.logits_for(prompt, 1)  # prefill, untimed
    rows.append(dict(row="full_token", s1=None, **timer.measure(lambda: full.logits_for(prompt + block[:1], 1))))
    rows.append(dict(row="full_block", s1=None, **timer.measure(lambda: full.logits_for(sequence, len(block)))))
    full = None  # free before the next row (lambdas close over the name, so not del)

    skipped = round(ratio * layers)
    spread = spread_mask(layers, skipped)
    slim = SlimVerifier(model, spread)
    separate = CachedRunner(slim.model, slim.new_cache)
    separate.logits_for(prompt, 1)
    rows.append(dict(row="slim_block", s1=spread.first_skipped, skipped=list(spread.skipped),
                     **timer.measure(lambda: separate.logits_for(sequence, len(block)))))
    separate = slim = None

    wanted = [1, layers // 4, layers // 2, (3 * layers) // 4]
    masks = {}
    for s1 in wanted:
        mask = skip_run_mask(layers, skipped, s1)
        masks.setdefault(mask.first_skipped, (s1, mask))
    for s1, (asked, mask) in sorted(masks.items()):
        runners = SharedPrefixRunners(model, SlimVerifier(model, mask))
        runners.slim_logits(sequence, len(block))  # u fills the prefix and its own layers over the context
        runners.full_logits(sequence, len(block))  # q's layers from s1, resumed
        note = {"s1": s1, "s1_asked": asked, "skipped": list(mask.skipped)}
        rows.append(dict(row="shared_slim_block", **note, **timer.measure(lambda: runners.slim_logits(sequence, len(block)))))
        # q resumes over the block u just processed: u's pass (untimed) precedes each timed q pass
        resumed_before = runners.resumed_full_passes
        rows.append(dict(row="resumed_full_block", **note, **timer.measure(
            lambda: runners.full_logits(sequence, len(block)), prepare=lambda: runners.slim_logits(sequence, len(block)))))
        if runners.resumed_full_passes - resumed_before != repeats + 2:
            raise RuntimeError(f"s1 = {s1}: q did not resume on every timed pass")
        runners = None
    reference = next(r["ms"] for r in rows if r["row"] == "full_block")
    for row in rows:
        row["fraction_of_full_block"] = row["ms"] / reference
    return rows


def environment(device: torch.device) -> dict:
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "platform": platform.platform(), "torch_threads": torch.get_num_threads()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def print_table(result: dict) -> None:
    for shape in result["shapes"]:
        print(f"\n{shape['shape']} ({shape['layers']} layers, {shape['dtype']}, attn {shape['attn']}, context "
              f"{result['context']}, block {result['block']}, r = {result['ratio']}, skipped {shape['skipped']})")
        print(f"  {'row':<22}{'s1':>4}{'layers':>8}{'ms':>10}{'x full_block':>14}")
        for row in shape["rows"]:
            s1 = "" if row.get("s1") is None else str(row["s1"])
            print(f"  {row['row']:<22}{s1:>4}{row.get('layers_run', ''):>8}{row['ms']:>10.3f}"
                  f"{row['fraction_of_full_block']:>14.3f}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="tiny", help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--drafter", action="append", default=[],
                        help="TARGET=DRAFTER: add a draft_token row to TARGET, timed as DRAFTER's full_token "
                             "(DRAFTER must be among --shapes, listed first); e.g. llama2-13b=llama2-7b")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, choices=sorted(DTYPES), help="default: bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--attn", default="sdpa", help="comma-separated attention implementations (sdpa, eager, ...)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--gamma", type=int, default=5, help="draft length; the block is gamma + 1 tokens")
    parser.add_argument("--ratio", type=float, default=0.45)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the result here (atomically)")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    dtype = DTYPES[args.dtype or ("bfloat16" if device.type == "cuda" else "float32")]
    names = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; known: {', '.join(SHAPES)}")
    drafters = dict(pair.split("=", 1) for pair in args.drafter)
    result = {"context": args.context, "block": args.gamma + 1, "ratio": args.ratio, "device": str(device),
              "environment": environment(device), "shapes": []}
    token_ms: dict[tuple[str, str], float] = {}
    for name in names:
        for attn in [a.strip() for a in args.attn.split(",") if a.strip()]:
            start = time.perf_counter()
            model = build(SHAPES[name], device, dtype, attn, args.seed, args.context)
            built = time.perf_counter() - start
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            rows = shape_rows(model, device, args.context, args.gamma, args.ratio, args.repeats)
            token_ms[(name, attn)] = next(r["ms"] for r in rows if r["row"] == "full_token")
            drafter = drafters.get(name)
            if drafter is not None:
                if (drafter, attn) not in token_ms:
                    raise SystemExit(f"--drafter {name}={drafter}: list {drafter} before {name} in --shapes")
                full_block = next(r["ms"] for r in rows if r["row"] == "full_block")
                ms = token_ms[(drafter, attn)]
                rows.append({"row": "draft_token", "s1": None, "drafter": drafter, "ms": ms,
                             "fraction_of_full_block": ms / full_block})
            entry = {"shape": name, "layers": SHAPES[name].layers, "dtype": str(dtype).replace("torch.", ""),
                     "attn": attn, "skipped": round(args.ratio * SHAPES[name].layers), "build_seconds": round(built, 2),
                     "rows": rows}
            if device.type == "cuda":
                entry["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
            result["shapes"].append(entry)
            del model
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()
    print_table(result)
    if args.json:
        write_json(args.json, result, what="forward-cost table")
    return result


if __name__ == "__main__":
    main()
