#!/usr/bin/env bash
# Reproduces benchmarks/results/*: tune and bench every shipped pair, the mask frontier and the
# capacity-gap study. One thread each (VIASD_BENCH_THREADS to change); about 2 CPU hours in all
# on a quiet 2-core machine (tunes ~15 min each, benches ~3 min, frontier and capacity ~15 min per pair).
# Steps run in order; STEPS="bench" (or tune, frontier, capacity) runs a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results
mkdir -p "$OUT"
STEPS=${STEPS:-"tune bench frontier capacity"}
BENCH=(--frameworks "${FRAMEWORKS:-hf,pearl}" --modes none,lenient,lossless,lossy,audit
       --repeats "${REPEATS:-3}" --num-prompts "${PROMPTS:-8}" --max-new-tokens "${TOKENS:-48}" --seed 0)
for step in $STEPS; do
  case $step in
    tune)
      viasd tune --pair demo --exits 8,10 --ratios 0.3 --prompts 32 --force \
        --plot "$OUT/tune_demo.png" --json "$OUT/tune_demo.json" | tee "$OUT/tune_demo.txt"
      viasd tune --pair demo-ee --exits 6,8,10 --prompts 32 --force \
        --plot "$OUT/tune_demo-ee.png" --json "$OUT/tune_demo-ee.json" | tee "$OUT/tune_demo-ee.txt" ;;
    bench)
      for pair in demo demo-ee; do
        viasd bench --pair "$pair" "${BENCH[@]}" --json "$OUT/bench_$pair.json" --plot "$OUT/bench_$pair.png" \
          | tee "$OUT/bench_$pair.txt"
      done ;;
    frontier)
      for pair in demo demo-ee; do
        python benchmarks/mask_frontier.py --pair "$pair" --steps 40 --json "$OUT/mask_frontier_$pair.json" \
          --plot "$OUT/mask_frontier_$pair.png" | tee "$OUT/mask_frontier_$pair.txt"
      done ;;
    capacity)
      python benchmarks/capacity_gap.py train
      python benchmarks/capacity_gap.py study --target-pair demo --prompts 8 --tokens 32 --json "$OUT/capacity_demo.json" \
        --plot "$OUT/capacity_demo.png" | tee "$OUT/capacity_demo.txt"
      python benchmarks/capacity_gap.py study --target-pair demo-ee --exits 6,8,10 --prompts 8 --tokens 32 \
        --json "$OUT/capacity_demo-ee.json" --plot "$OUT/capacity_demo-ee.png" | tee "$OUT/capacity_demo-ee.txt" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
