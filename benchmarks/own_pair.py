"""``viasd models add`` on a model at the real shape, timed stage by stage, with its peak memory.

    python benchmarks/qwen2_gguf.py /tmp/qwen2                     # the random-weight 0.5B-shape GGUFs
    python benchmarks/own_pair.py /tmp/qwen2/target.gguf prompt-lookup --name q05-lookup --minutes 30
    python benchmarks/own_pair.py /tmp/qwen2/target.gguf /tmp/qwen2/drafter.gguf --name q05-draft --minutes 40

Runs, each as its own process, as a user would: ``viasd models add`` under ``/usr/bin/time -v`` (its
peak resident memory, children included), then ``viasd generate --pair NAME`` twice, timing how
long each takes to print its first answer token (the second start is the one the goal is about:
the GGUF cache is warm). The cache is a fresh folder (``--cache``) so that the first load is
measured. Writes ``benchmarks/results/own_pair_<name>.txt`` with the command, date, machine and
load average, and prints each goal with its value:

* ``models add`` within 45 minutes with prompt lookup, 60 with a drafter model;
* a second ``viasd generate --pair NAME`` prints its first token within 20 s;
* peak memory within 6 GB.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GOALS = {"add_lookup_minutes": 45.0, "add_drafter_minutes": 60.0, "second_start_seconds": 20.0, "peak_gb": 6.0}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def first_token_seconds(command: list[str], env: dict) -> tuple[float, float, str]:
    """``(seconds to the first byte of stdout, seconds in all, stderr)`` of ``command``."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    first = process.stdout.read(1)
    first_at = time.perf_counter() - started
    rest, errors = process.communicate()
    if process.returncode != 0 or not first:
        raise SystemExit(f"{' '.join(command)} failed:\n{errors.decode()}")
    return first_at, time.perf_counter() - started, errors.decode()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("draft")
    parser.add_argument("--name", required=True)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/viasd-own-pair-cache"))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    env = {**os.environ, "VIASD_CACHE": str(args.cache), "OMP_NUM_THREADS": str(args.threads)}
    viasd = str(Path(sys.executable).with_name("viasd"))
    add = [viasd, "models", "add", args.name, "--target", args.target, "--draft", args.draft, "--minutes", str(args.minutes),
           "--threads", str(args.threads), "--no-progress"]
    lines = [f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
             f"load average before: {load_average()}", f"command: {' '.join(add)}"]
    started = time.perf_counter()
    run = subprocess.run(["/usr/bin/time", "-v", *add], capture_output=True, text=True, env=env)
    add_seconds = time.perf_counter() - started
    lines += ["--- viasd models add (stdout: its report) ---", run.stdout.strip(),
              "--- viasd models add (stderr: its progress) ---", run.stderr.strip(), "---"]
    if run.returncode != 0:
        (RESULTS / f"own_pair_{args.name}.txt").write_text("\n".join(lines) + "\n")
        raise SystemExit(f"viasd models add failed:\n{run.stderr}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    generate = [viasd, "generate", "--pair", args.name, "--prompt", "Write a haiku about the sea.", "--max-new-tokens",
                "16", "--no-show-tiers", "--threads", str(args.threads)]
    first, first_total, _ = first_token_seconds(generate, env)
    second, second_total, second_err = first_token_seconds(generate, env)
    goal = GOALS["add_lookup_minutes" if args.draft == "prompt-lookup" else "add_drafter_minutes"]
    lines += [f"load average after: {load_average()}",
              f"models add: {add_seconds / 60:.1f} min (goal {goal:g} min: {'met' if add_seconds / 60 <= goal else 'MISSED'})",
              f"peak memory of models add: {peak_kb / 1e6:.2f} GB (goal {GOALS['peak_gb']:g} GB: "
              f"{'met' if peak_kb / 1e6 <= GOALS['peak_gb'] else 'MISSED'})",
              f"first generate --pair: first token after {first:.1f}s ({first_total:.1f}s in all)",
              f"second generate --pair: first token after {second:.1f}s ({second_total:.1f}s in all; goal "
              f"{GOALS['second_start_seconds']:g} s: {'met' if second <= GOALS['second_start_seconds'] else 'MISSED'})",
              "--- second generate (stderr) ---", second_err.strip()]
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"own_pair_{args.name}.txt"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-7:]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
