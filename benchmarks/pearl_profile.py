"""Why is PEARL slow on CUDA? Measurements that confirm or refute each hypothesis.

Observed on one H200 (demo pair, 48 tokens, greedy): float16 2.8 s with the roles on two threads,
1.2 s sequential; float32 0.4 s either way; plain decoding about 79 tok/s. Hypotheses, and the
measurement here that decides each:

H1  GIL hand-offs. PyTorch releases the GIL inside every op and takes it back after. Two Python
    threads that both launch kernels hand the GIL over at op granularity, with an OS thread
    switch each time, so launch-bound work gets slower on two threads than on one.
    -> ``gil``: host time to *launch* one drafter forward (no sync) alone vs while a second
       thread launches target forwards (on its own stream); ``generations``: parallel vs
       sequential wall time per dtype; ``switch_interval``: parallel with a 10x shorter GIL
       switch interval. Confirmed if launches slow down >1.5x under contention and parallel is
       slower than sequential in every dtype.
H2  Per-role CUDA streams: each job ends with a stream synchronisation, and the caching allocator
    keeps per-stream pools. -> ``generations``: parallel with and without streams.
H3  First use in the timed region: kernels are loaded lazily (CUDA_MODULE_LOADING=LAZY) and
    cuBLAS/cuBLASLt pick and load kernels per new shape and dtype; the threads of a generation are
    new each call. -> ``generations``: every repetition's time (rep 0 includes first use of the
    dtype's kernels, rep 1+ does not); the ``sequential`` configuration is run first and again
    last. Confirmed if rep 0 >> rep 1 and the float16 gap closes from rep 1 on.
H4  float16 costs more host work per forward (casts around RMSNorm/softmax/rotary: more kernels
    per layer; cuBLASLt heuristics per GEMM). -> ``forwards``: per dtype and attention
    implementation, wall ms per forward and kernel launches per forward (profiler), and CPU
    microseconds per ``aten::mm``/``aten::linear``.
H5  float16 changes the decisions (more rounds: the drafter agrees less) -> ``generations``:
    rounds, full and draft passes per dtype (on the CPU these are identical across dtypes for
    the demo prompts: checked before shipping).
H6  Host syncs per round in the verify/draft loops (``.item()``, ``.tolist()``, H2D copies of
    pageable lists). -> ``profiles``: counts of cudaStreamSynchronize / cudaMemcpyAsync /
    kernel launches per generated token, sequential and parallel, float16 (compare with the
    counts before the one-transfer-per-decision change, if a run of the old code exists).

Everything is written to one JSON file (``--json``); the profiler tables are in it as text.

    python benchmarks/pearl_profile.py --device cuda --json gpu_results/pearl_profile.json
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
if importlib.util.find_spec("viasd_adapt") is None:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from demo_pair_cuda import DTYPES, demo_prompts, environment, load_demo, sync  # noqa: E402

from viasd_adapt.engine.context import resolve_context  # noqa: E402
from viasd_adapt.engine.pearl import PearlDecoder, pearl_verifier  # noqa: E402
from viasd_adapt.engine.drafters import ModelDrafter  # noqa: E402
from viasd_adapt.core.hooks import make_plugin_manager  # noqa: E402
from viasd_adapt.io import write_json  # noqa: E402
from viasd_adapt.routing.runner import CachedRunner  # noqa: E402
from viasd_adapt.core.sampling import SamplingConfig  # noqa: E402
from viasd_adapt.core.settings import TierSettings  # noqa: E402

CONFIGS = {  # name -> (parallel, streams)
    "sequential": (False, True),
    "parallel_streams": (True, True),
    "parallel_no_streams": (True, False),
}


def pearl_once(target, drafter, prompt: list[int], n_new: int, parallel: bool, streams: bool) -> dict:
    sampling = SamplingConfig()
    context = resolve_context(target, TierSettings(mode="none"), plugin_manager=make_plugin_manager(load_entrypoints=False))
    verifier = pearl_verifier(context, sampling)
    decoder = PearlDecoder(ModelDrafter(drafter, sampling), verifier, parallel=parallel, seed=0, streams=streams)
    device = next(target.parameters()).device
    sync(device)
    start = time.perf_counter()
    out = decoder.generate(prompt, n_new)
    sync(device)
    wall = time.perf_counter() - start
    stats = out.stats
    return {"wall_s": round(wall, 4), "tokens_per_s": round(len(out.tokens) / wall, 1), "rounds": stats.rounds,
            "full_passes": out.metrics.full_passes, "draft_passes": out.metrics.draft_passes,
            "draft_busy_s": round(stats.draft_busy_s, 4), "target_busy_s": round(stats.target_busy_s, 4),
            "overlap": round(stats.overlap, 2), "tokens": out.tokens}


def generations(target, drafter, prompt, n_new: int, repeats: int) -> dict:
    """H1, H2, H3, H5: every configuration, every repetition kept; sequential first and last."""
    order = list(CONFIGS) + ["sequential_again"]
    result = {}
    for name in order:
        parallel, streams = CONFIGS[name.replace("_again", "")]
        runs = [pearl_once(target, drafter, prompt, n_new, parallel, streams) for _ in range(repeats)]
        tokens = runs[0]["tokens"]
        result[name] = {
            "wall_s": [r["wall_s"] for r in runs],
            "tokens_per_s": [r["tokens_per_s"] for r in runs],
            "rounds": runs[0]["rounds"], "full_passes": runs[0]["full_passes"], "draft_passes": runs[0]["draft_passes"],
            "draft_busy_s": [r["draft_busy_s"] for r in runs], "target_busy_s": [r["target_busy_s"] for r in runs],
            "overlap": [r["overlap"] for r in runs],
            "same_tokens_every_repeat": all(r["tokens"] == tokens for r in runs),
            "tokens": tokens,
        }
    first = result["sequential"]["tokens"]
    result["all_configurations_same_tokens"] = all(v["tokens"] == first for k, v in result.items() if isinstance(v, dict))
    for value in result.values():
        if isinstance(value, dict):
            value.pop("tokens")
    return result


def switch_interval(target, drafter, prompt, n_new: int) -> dict:
    """H1: parallel with the default GIL switch interval and a 10x shorter one (restored after)."""
    saved = sys.getswitchinterval()
    out = {"default_interval_s": saved}
    try:
        for label, interval in (("default", saved), ("tenth", saved / 10)):
            sys.setswitchinterval(interval)
            runs = [pearl_once(target, drafter, prompt, n_new, True, True)["wall_s"] for _ in range(2)]
            out[label] = runs
    finally:
        sys.setswitchinterval(saved)
    return out


@torch.no_grad()
def gil(target, drafter, prompt, repeats: int = 40) -> dict:
    """H1: host time to launch a drafter forward, alone and with a second thread launching target
    forwards on its own stream (the drafter's own work is synchronised outside the timed part)."""
    device = next(target.parameters()).device
    runner = CachedRunner(drafter)
    runner.logits_for(prompt, 1)
    sequence = prompt + [prompt[-1]]

    def launch_times() -> dict:
        launches, walls = [], []
        for _ in range(repeats):
            torch.cuda.current_stream(device).synchronize()
            t0 = time.perf_counter()
            runner.logits_for(sequence, 1)  # returns once launched (logits stay on the device)
            t1 = time.perf_counter()
            torch.cuda.current_stream(device).synchronize()
            launches.append(t1 - t0)
            walls.append(time.perf_counter() - t0)
        return {"launch_ms": 1e3 * statistics.median(launches), "wall_ms": 1e3 * statistics.median(walls)}

    alone = launch_times()
    stop = threading.Event()

    def busy():
        stream = torch.cuda.Stream(device=device)
        other = CachedRunner(target)
        with torch.cuda.stream(stream):
            other.logits_for(prompt, 1)
            block = prompt + prompt[-6:]
            while not stop.is_set():
                other.logits_for(block, 6)
                stream.synchronize()

    thread = threading.Thread(target=busy, name="busy-target", daemon=True)
    thread.start()
    time.sleep(0.2)
    try:
        contended = launch_times()
    finally:
        stop.set()
        thread.join(timeout=30)
    return {"alone": alone, "with_target_thread": contended,
            "launch_slowdown": contended["launch_ms"] / alone["launch_ms"] if alone["launch_ms"] else None}


def _profile_counts(prof, per: int) -> dict:
    counts: dict[str, int] = {}
    for event in prof.events():
        name = event.name
        if "LaunchKernel" in name:
            key = "kernel_launches"
        elif "StreamSynchronize" in name or "DeviceSynchronize" in name or "EventSynchronize" in name:
            key = "synchronizations"
        elif "Memcpy" in name and not name.startswith("Memcpy"):  # runtime call, not the device-side copy
            key = "memcpy_calls"
        else:
            continue
        counts[key] = counts.get(key, 0) + 1
    return {key: round(value / per, 2) for key, value in sorted(counts.items())}


@torch.no_grad()
def forwards(dtype_name: str, device: torch.device, attn: str, prompt: list[int], repeats: int = 20) -> dict:
    """H4: wall time and kernel launches of one forward, target (1 and 6 tokens) and drafter."""
    from torch.profiler import ProfilerActivity, profile

    _, _, target, drafter = load_demo(DTYPES[dtype_name], device)
    for model in (target, drafter):
        model.set_attn_implementation(attn)
    out = {}
    for label, model, n in (("target_1", target, 1), ("target_6", target, 6), ("drafter_1", drafter, 1)):
        runner = CachedRunner(model)
        runner.logits_for(prompt, 1)
        sequence = prompt + prompt[-n:]
        runner.logits_for(sequence, n)
        times = []
        for _ in range(repeats):
            sync(device)
            t0 = time.perf_counter()
            runner.logits_for(sequence, n)
            sync(device)
            times.append(time.perf_counter() - t0)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                runner.logits_for(sequence, n)
            sync(device)
        ops = {e.key: e for e in prof.key_averages()}
        entry = {"ms": round(1e3 * statistics.median(times), 3), **_profile_counts(prof, 5)}
        for op in ("aten::mm", "aten::linear", "aten::matmul", "aten::_to_copy"):
            if op in ops:
                entry[f"{op}_cpu_us_per_call"] = round(ops[op].cpu_time_total / max(1, ops[op].count), 1)
                entry[f"{op}_calls_per_forward"] = round(ops[op].count / 5, 1)
        out[label] = entry
    del target, drafter
    return out


def profiles(target, drafter, prompt, n_new: int) -> dict:
    """H6 (and H1/H4 detail): one generation under the profiler, sequential and parallel."""
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for name in ("sequential", "parallel_streams"):
        parallel, streams = CONFIGS[name]
        pearl_once(target, drafter, prompt, n_new, parallel, streams)  # warm
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            run = pearl_once(target, drafter, prompt, n_new, parallel, streams)
        out[name] = {
            "wall_s_under_profiler": run["wall_s"],
            "per_generated_token": _profile_counts(prof, max(1, len(run["tokens"]))),
            "top_ops_by_self_cpu": prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20),
        }
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--forward-dtypes", default="float32,float16", help="dtypes of the per-forward section (H4)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type != "cuda":
        raise SystemExit("pearl_profile.py measures CUDA behaviour; run it with --device cuda on a GPU")
    result: dict = {"environment": environment(), "max_new_tokens": args.max_new_tokens, "sections": {}}

    def section(name: str, fn):
        start = time.perf_counter()
        try:
            result["sections"][name] = fn()
        except Exception as err:  # keep going: each section answers its own hypothesis
            result["sections"][name] = {"error": f"{type(err).__name__}: {err}"}
        result["sections"][name + "_seconds"] = round(time.perf_counter() - start, 1)
        print(f"[pearl_profile] {name}: {time.perf_counter() - start:.1f} s", flush=True)
        if args.json:
            write_json(args.json, result, what="PEARL profile")

    dtype_names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for dtype_name in dtype_names:
        pair, tokenizer, target, drafter = load_demo(DTYPES[dtype_name], device)
        prompt = demo_prompts(tokenizer, 1)[0]
        section(f"generations_{dtype_name}", lambda: generations(target, drafter, prompt, args.max_new_tokens, args.repeats))
        if dtype_name == "float16":
            section("gil_float16", lambda: gil(target, drafter, prompt))
            section("switch_interval_float16", lambda: switch_interval(target, drafter, prompt, args.max_new_tokens))
            section("profiles_float16", lambda: profiles(target, drafter, prompt, args.max_new_tokens))
        target = drafter = None  # free the weights before the next dtype (not del: the lambdas above close over the names)
        torch.cuda.empty_cache()
    for dtype_name in [d.strip() for d in args.forward_dtypes.split(",") if d.strip()]:
        for attn in ("sdpa", "eager"):
            section(f"forwards_{dtype_name}_{attn}", lambda: forwards(dtype_name, device, attn, prompt))
    for name, value in result["sections"].items():
        if name.startswith("generations_") and isinstance(value, dict) and "error" not in value:
            walls = {k: v["wall_s"] for k, v in value.items() if isinstance(v, dict)}
            print(f"{name}: wall seconds per repetition {walls}; rounds {value['sequential']['rounds']}; "
                  f"same tokens everywhere {value['all_configurations_same_tokens']}")
    gil_result = result["sections"].get("gil_float16", {})
    if isinstance(gil_result, dict) and gil_result.get("launch_slowdown"):
        print(f"GIL: a drafter forward's launch takes {gil_result['launch_slowdown']:.2f}x as long with a target thread")
    return result


if __name__ == "__main__":
    main()
