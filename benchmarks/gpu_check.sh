#!/usr/bin/env bash
# One GPU check of viasd-adapt, at most ~10 minutes on one H100 or H200, nothing installed from the network.
#
#   bash benchmarks/gpu_check.sh            # writes into $OUT when set, else ./gpu_results
#
# Needs: python3 with torch (CUDA), transformers, accelerate, botorch, pluggy, click, matplotlib
# (the device image has them); eagle-llm as a wheel in .whl/ (optional: without it the EAGLE bench
# rows are skipped). The package is used from this checkout: viasd_adapt/ and adapters/ are copied
# into a scratch site folder (the layout `pip install` makes), so no build step is needed.
#
# Steps, each under `timeout` (a hang cannot eat the budget) and each run even when an earlier one
# failed; a step is skipped when less than 20 s of the budget (GPU_CHECK_BUDGET_S, default 570 s)
# is left. Output files (at most 8, as the device tool returns):
#   env.txt            nvidia-smi, versions, clocks
#   lossless.json      tiered lossless vs the target's greedy output, fp32/fp16/bf16 (+ mask loads)
#   device_map.json    the same on the demo target split by `device_map="auto"` over cuda:0 and the CPU
#   bench.json         `viasd bench --pair demo --device cuda`, per framework (hf, pearl, eagle)
#   pearl_profile.json PEARL on CUDA: threads vs sequential, streams, GIL, dtypes, profiler tables
#   forward_costs.json per-forward costs at Llama-2 7B/13B shapes, bf16, random weights
#   summary.txt        step status, the key figures, and the hardware stamp of each file written
#                      (`viasd models add --device cuda` on a random model: mask.json, tuned.json,
#                      report.json; the bench's JSON)
#   log.txt            everything the steps printed
set -u
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT_DIR="${OUT:-$REPO/gpu_results}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
PY="${PYTHON:-python3}"
BUDGET_S="${GPU_CHECK_BUDGET_S:-570}"
DEADLINE=$(( $(date +%s) + BUDGET_S ))
LOG="$OUT_DIR/log.txt"
SUMMARY="$OUT_DIR/summary.txt"
WORK="$(mktemp -d /tmp/viasd_gpu_check.XXXXXX)"
: > "$LOG"
: > "$SUMMARY"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg

# step NAME LIMIT_S CMD...: runs CMD under timeout in $WORK (so this checkout's unmapped
# viasd_adapt/ never shadows the copied site), appends its output to the log, records the status.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( DEADLINE - $(date +%s) - 5 ))
  if (( left < 20 )); then
    printf '%-22s %-16s\n' "$name" "SKIPPED (budget)" | tee -a "$SUMMARY"
    return 0
  fi
  (( limit > left )) && limit=$left
  echo "===== $name (limit ${limit}s) $(date -u +%T)" >> "$LOG"
  local t0=$(date +%s) rc=0
  (cd "$WORK" && timeout --kill-after=10 "$limit" "$@") >> "$LOG" 2>&1 || rc=$?
  local status="ok"
  if (( rc == 124 || rc == 137 )); then status="TIMEOUT"; elif (( rc != 0 )); then status="FAILED rc=$rc"; fi
  printf '%-22s %-16s %4ss\n' "$name" "$status" "$(( $(date +%s) - t0 ))" | tee -a "$SUMMARY"
  return 0
}

# ---------------------------------------------------------------- environment facts
{
  echo "date: $(date -u)"; echo "repo: $(cd "$REPO" && git log --oneline -1 2>/dev/null || echo 'not a git checkout')"
  nvidia-smi 2>&1
  nvidia-smi -q -d CLOCK,POWER,PERFORMANCE 2>&1 | head -60
  "$PY" - <<'EOF' 2>&1
import os, platform, sys
import torch, transformers
print("python", sys.version.split()[0], platform.platform())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("transformers", transformers.__version__)
for name in ("accelerate", "botorch", "pluggy", "click", "eagle"):
    try:
        module = __import__(name)
        print(name, getattr(module, "__version__", "present"))
    except Exception as err:
        print(name, "MISSING", type(err).__name__)
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NONE")
print("CUDA_MODULE_LOADING", os.environ.get("CUDA_MODULE_LOADING", "(unset)"), "cpus", os.cpu_count())
EOF
} > "$OUT_DIR/env.txt" 2>&1
printf '%-22s %-16s\n' "environment" "ok" | tee -a "$SUMMARY"

# ---------------------------------------------------------------- the package, eagle's wheel
SITE="$WORK/site"
mkdir -p "$SITE"
cp -r "$REPO/viasd_adapt" "$SITE/" && rm -rf "$SITE/viasd_adapt/adapters" && cp -r "$REPO/adapters" "$SITE/viasd_adapt/adapters"
if compgen -G "$REPO/.whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$REPO"/.whl/*.whl >> "$LOG" 2>&1 \
    && echo "wheels: $(cd "$REPO/.whl" && ls *.whl | tr '\n' ' ')" >> "$OUT_DIR/env.txt" \
    || echo "wheel install FAILED (see log)" | tee -a "$SUMMARY"
else
  echo "no .whl/ in the checkout: eagle-llm missing, EAGLE rows will be skipped" | tee -a "$SUMMARY"
fi
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
VIASD=("$PY" -c 'import sys; from viasd_adapt.cli.main import cli; sys.argv[0] = "viasd"; cli()')
step "import" 60 "$PY" -c 'import viasd_adapt, viasd_adapt.adapters.pearl, viasd_adapt.adapters.hf; print("viasd_adapt from", viasd_adapt.__file__)'

# ---------------------------------------------------------------- checks, most important first
step "lossless_identity" 80 "$PY" "$REPO/benchmarks/cuda_lossless_check.py" --device cuda \
  --dtypes float32,float16 --num-prompts 4 --max-new-tokens 48 --json "$OUT_DIR/lossless.json"

# a target split by a device map: Python (every method, beside stock) and the command (--device-map auto)
step "device_map_identity" 60 "$PY" "$REPO/benchmarks/device_map_check.py" --dtype float32 --num-prompts 4 \
  --max-new-tokens 32 --json "$OUT_DIR/device_map.json"
step "generate_device_map" 40 "${VIASD[@]}" generate --pair demo --device-map auto --framework hf --mode lossless \
  --prompt "def add(a, b):" --max-new-tokens 24 --no-show-tiers --json "$WORK/generate_device_map.json"

# the onboarding of a user's own model on the GPU (a random 0.3B Llama stands in), within its --minutes
step "random_model" 60 "$PY" "$REPO/benchmarks/random_model.py" "$WORK/random-llama" --layers 24 --hidden 1024 \
  --dtype bfloat16
step "models_add_cuda" 240 "${VIASD[@]}" models add gpu-random --target "$WORK/random-llama" --draft prompt-lookup \
  --device cuda --minutes 3 --out "$WORK/pairs" --no-progress

for framework in hf pearl eagle; do
  step "bench_$framework" 80 "${VIASD[@]}" bench --pair demo --device cuda --frameworks "$framework" \
    --modes none,lenient,lossless,lossy,audit --repeats 2 --num-prompts 3 --max-new-tokens 32 \
    --json "$WORK/bench_$framework.json"
done
"$PY" - "$WORK" "$OUT_DIR/bench.json" <<'EOF' >> "$LOG" 2>&1
import json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
merged = {}
for framework in ("hf", "pearl", "eagle"):
    path = work / f"bench_{framework}.json"
    try:
        merged[framework] = json.loads(path.read_text()) if path.is_file() else {"error": "no output (see log.txt)"}
    except ValueError as err:
        merged[framework] = {"error": f"unreadable: {err}"}
out.write_text(json.dumps(merged, indent=2) + "\n")
EOF

step "pearl_profile" 100 "$PY" "$REPO/benchmarks/pearl_profile.py" --device cuda --dtypes float32,float16 \
  --forward-dtypes float32,float16 --repeats 2 --max-new-tokens 48 --json "$OUT_DIR/pearl_profile.json"

step "forward_costs" 110 "$PY" "$REPO/benchmarks/forward_costs.py" --device cuda --dtype bfloat16 \
  --shapes llama2-7b,llama2-13b --drafter llama2-13b=llama2-7b --attn sdpa,eager --context 512 --gamma 5 \
  --ratio 0.45 --repeats 10 --json "$OUT_DIR/forward_costs.json"

# ---------------------------------------------------------------- summary
{
  echo
  "$PY" "$REPO/benchmarks/gpu_summary.py" "$OUT_DIR" 2>&1
  echo
  echo "hardware stamps of the files written:"
  "$PY" "$REPO/benchmarks/print_stamps.py" "$WORK/pairs/gpu-random" "$WORK" 2>&1
  echo
  echo "total $(( $(date +%s) - DEADLINE + BUDGET_S )) s of a ${BUDGET_S} s budget"
} >> "$SUMMARY"
cat "$SUMMARY"
rm -rf "$WORK"
exit 0
