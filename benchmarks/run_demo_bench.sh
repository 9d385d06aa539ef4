#!/usr/bin/env bash
# Reproduces benchmarks/results/*: the bench on the shipped demo pair with its DIMR mask, with the
# paper's thresholds and with the CONSERVATIVE preset. One thread (VIASD_BENCH_THREADS to change).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results
mkdir -p "$OUT"
COMMON=(--pair demo --frameworks "${FRAMEWORKS:-hf,pearl}" --modes none,lossless,lossy,audit
        --repeats "${REPEATS:-3}" --num-prompts "${PROMPTS:-8}" --max-new-tokens "${TOKENS:-48}" --seed 0)
viasd bench "${COMMON[@]}" --json "$OUT/demo_default.json" --plot "$OUT/demo_default.png" | tee "$OUT/demo_default.txt"
viasd bench "${COMMON[@]}" --preset conservative --json "$OUT/demo_conservative.json" --plot "$OUT/demo_conservative.png" \
  | tee "$OUT/demo_conservative.txt"
