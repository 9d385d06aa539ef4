"""Memory of the slim verifier: full-only vs full + slim decoding (docs/method.md section 2).

The slim verifier u is a routed *view* of the target q: it owns no weights, so the only extra
memory it can cost is the KV cache of its retained layers. Below its first skipped layer s1 it
computes exactly q's keys and values, so with a shared prefix (:mod:`viasd_adapt.routing.shared`)
those layers are stored once; from s1 on, u's retained layers see its own residual stream and need
their own cache. This script measures exactly that, for a long context:

* tensor memory = unique parameter bytes + KV-cache bytes (the runners' ``cache_bytes()``), for
  a run of the target alone (mode ``none``: q verifies every block) and runs with the slim tier
  (mode ``lossless``: u runs every cycle, so its cache covers the whole context), with separate
  caches and with the shared prefix;
* on CUDA, also ``torch.cuda.max_memory_allocated`` for each run (peak, activations included);
* a check that no weight was copied: every parameter of the slim view has the data pointer of a
  target parameter;
* for scale, the same arithmetic for a Llama-2-7B shape (fp16) at the same context, since the
  ratio depends on how KV bytes compare with weight bytes (the paper reports 1.04x).

The model is a randomly initialised Llama with the shape of a preset (``demo``: 16 layers, hidden
160, vocab 4096; ``tiny``: 12 layers, hidden 64): memory does not depend on the weights' values.

    python benchmarks/slim_memory.py                       # demo shape, 512-token context, CPU
    python benchmarks/slim_memory.py --device cuda --json benchmarks/results/slim_memory_cuda.json
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from viasd_adapt.routing.mask import random_mask

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from viasd_adapt.engine.drafters import ModelDrafter  # noqa: E402
from viasd_adapt.engine.context import open_context  # noqa: E402
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.core.hooks import make_plugin_manager  # noqa: E402
from viasd_adapt.io import write_json  # noqa: E402
from viasd_adapt.training.presets import get_preset  # noqa: E402
from viasd_adapt.routing import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig  # noqa: E402
from viasd_adapt.core.settings import TierSettings  # noqa: E402


def llama_from_preset(preset_name: str, which: str, context: int, dtype: torch.dtype, seed: int) -> LlamaForCausalLM:
    preset = get_preset(preset_name)
    shape = getattr(preset, which)
    config = LlamaConfig(
        vocab_size=preset.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        max_position_embeddings=max(1024, 2 * context),
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype).eval()


def unique_parameter_bytes(*models: torch.nn.Module) -> int:
    """Bytes of distinct parameter storage across ``models`` (a shared tensor counts once)."""
    seen: dict[int, int] = {}
    for model in models:
        for p in model.parameters():
            seen[p.data_ptr()] = p.numel() * p.element_size()
    return sum(seen.values())


def check_no_weight_copies(target: torch.nn.Module, slim: SlimVerifier) -> dict:
    target_ptrs = {p.data_ptr() for p in target.parameters()}
    slim_ptrs = {p.data_ptr() for p in slim.model.parameters()}
    foreign = slim_ptrs - target_ptrs
    if foreign:
        raise SystemExit(f"FAIL: the slim view holds {len(foreign)} parameter tensors that are not the target's")
    return {
        "slim_parameter_tensors": len(slim_ptrs),
        "target_parameter_tensors": len(target_ptrs),
        "all_slim_parameters_shared": True,
        "extra_parameter_bytes": unique_parameter_bytes(target, slim.model) - unique_parameter_bytes(target),
    }


def run(target, drafter_model, slim, mode: str, prompt: list[int], new_tokens: int, device: torch.device,
        share_prefix: bool = False) -> dict:
    sampling = SamplingConfig()
    # the tier on every cycle: this measures what the slim verifier's cache holds when it runs
    context = open_context(target, slim.mask if mode != "none" else None, TierSettings(mode=mode, gamma=4, adaptive=False),
                           plugin_manager=make_plugin_manager(load_entrypoints=False))
    verifier = TieredVerifier.of(context, context.verify_step("engine"), sampling, share_prefix=share_prefix)
    drafter = ModelDrafter(drafter_model, sampling)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    out = speculative_generate(drafter, verifier, prompt, new_tokens)
    seconds = time.perf_counter() - start
    kv = verifier.runners.cache_bytes()
    full_kv, slim_kv = kv["full"] + kv["shared"], kv["slim"]
    params = unique_parameter_bytes(target)
    row = {
        "mode": mode,
        "share_prefix": share_prefix,
        "shared_prefix_kv_bytes": kv["shared"],
        "tokens": len(out.tokens),
        "seconds": round(seconds, 3),
        "parameter_bytes": params,
        "full_kv_bytes": full_kv,
        "slim_kv_bytes": slim_kv,
        "verifier_tensor_bytes": params + full_kv + slim_kv,
        "drafter_kv_bytes": drafter.runner.cache_bytes(),
        "full_passes": out.metrics.full_passes,
        "slim_passes": out.metrics.slim_passes,
    }
    if device.type == "cuda":
        torch.cuda.synchronize()
        row["cuda_max_memory_allocated"] = torch.cuda.max_memory_allocated()
    return row


def llama7b_estimate(context: int, ratio: float) -> dict:
    """Weights + KV bytes of a Llama-2-7B shape in fp16 (32 layers, hidden 4096, 6.74e9 parameters)."""
    params, layers, hidden, bytes_per = 6.74e9, 32, 4096, 2
    kv_per_layer = 2 * context * hidden * bytes_per
    retained = layers - round(ratio * layers)
    full = params * bytes_per + layers * kv_per_layer
    return {"context": context, "retained_layers": retained, "ratio": (full + retained * kv_per_layer) / full}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo", help="model shape: demo or tiny (random weights)")
    parser.add_argument("--context", type=int, default=512, help="prompt length in tokens")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--ratio", type=float, default=0.45, help="fraction of layers the slim verifier skips")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    target = llama_from_preset(args.preset, "target", args.context, dtype, args.seed).to(device)
    drafter_model = llama_from_preset(args.preset, "draft", args.context, dtype, args.seed + 1).to(device)
    layers = target.config.num_hidden_layers
    mask = random_mask(layers, args.ratio, torch.Generator().manual_seed(args.seed))
    slim = SlimVerifier(target, mask)
    sharing = check_no_weight_copies(target, slim)

    gen = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, target.config.vocab_size, (args.context,), generator=gen).tolist()
    with torch.no_grad():
        rows = [run(target, drafter_model, slim, mode, prompt, args.new_tokens, device, share)
                for mode, share in (("none", False), ("lossless", False), ("lossless", True))]
    full_only, with_slim, shared = rows
    result = {
        "preset_shape": args.preset,
        "device": str(device),
        "dtype": args.dtype,
        "layers": layers,
        "mask": str(mask),
        "skipped_layers": list(mask.skipped),
        "context": args.context,
        "weight_sharing": sharing,
        "rows": rows,
        "tensor_memory_ratio": with_slim["verifier_tensor_bytes"] / full_only["verifier_tensor_bytes"],
        "shared_prefix_tensor_memory_ratio": shared["verifier_tensor_bytes"] / full_only["verifier_tensor_bytes"],
        "slim_kv_over_full_kv": with_slim["slim_kv_bytes"] / max(1, with_slim["full_kv_bytes"]),
        "llama2_7b_fp16_estimate": llama7b_estimate(args.context, args.ratio),
        "torch": torch.__version__,
        "machine": platform.machine(),
    }
    if device.type == "cuda":
        result["cuda_peak_ratio"] = with_slim["cuda_max_memory_allocated"] / full_only["cuda_max_memory_allocated"]
        result["cuda_device"] = torch.cuda.get_device_name(device)

    mib = 1 / 2**20
    print(f"{args.preset}-shaped Llama, {layers} layers, mask {mask} (skips {len(mask.skipped)}), "
          f"{args.context}-token context + {args.new_tokens} new tokens, {args.dtype} on {device}")
    print(f"weights shared: all {sharing['slim_parameter_tensors']} slim parameter tensors are the target's "
          f"(extra parameter bytes: {sharing['extra_parameter_bytes']})")
    print(f"{'run':<24}{'params MiB':>12}{'q KV MiB':>10}{'u KV MiB':>10}{'total MiB':>11}" +
          (f"{'CUDA peak MiB':>15}" if device.type == "cuda" else ""))
    for name, row in (("full only (mode none)", full_only), ("full + slim, separate", with_slim),
                      ("full + slim, shared", shared)):
        line = (f"{name:<24}{row['parameter_bytes'] * mib:>12.2f}{row['full_kv_bytes'] * mib:>10.2f}"
                f"{row['slim_kv_bytes'] * mib:>10.2f}{row['verifier_tensor_bytes'] * mib:>11.2f}")
        if device.type == "cuda":
            line += f"{row['cuda_max_memory_allocated'] * mib:>15.2f}"
        print(line)
    print(f"tensor-memory ratio full+slim / full-only: {result['tensor_memory_ratio']:.3f}x separate caches "
          f"(slim KV = {result['slim_kv_over_full_kv']:.2f} of q's KV), "
          f"{result['shared_prefix_tensor_memory_ratio']:.3f}x with the shared prefix (layers below s1 = {mask.first_skipped} stored once)")
    if device.type == "cuda":
        print(f"CUDA peak ratio: {result['cuda_peak_ratio']:.3f}x")
    estimate = result["llama2_7b_fp16_estimate"]
    print(f"same arithmetic for a Llama-2-7B shape in fp16 at {args.context} tokens: {estimate['ratio']:.3f}x "
          "(paper: 1.04x); a tiny model's KV is large next to its weights, so its ratio is higher")
    if args.json:
        write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
