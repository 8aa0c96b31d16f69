#!/usr/bin/env bash
# The GPU measurement of issues 15 and 30, one script of at most 8 minutes (bench/gpu.py says what
# it measures: CUDA against CPU, the graphed step against the eager one, both steps' tokens/s per
# architecture, the real training loop with and without CUDA graphs, K runs per process and per step).
# On a machine with CUDA it writes $OUT/gpu.json (the device tool's folder), or
# bench/measurements/gpu.json without $OUT; commit that file, and bench/grid.py reads it for GPU-hours.
# Without CUDA it runs the same code on the CPU at tiny sizes (a dry check) and exits 0.
#
#   bash bench/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python=".venv/bin/python"
[ -x "$python" ] || python=python3
out="${OUT:-bench/measurements}"
mkdir -p "$out"
if "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  # The kernel of the CPU path builds first (10-20 s), outside the measurement's budget.
  "$python" -c 'from stacklm.kernels import build; build.load()'
  timeout 470 "$python" bench/gpu.py --out "$out/gpu.json" --budget-s 400
  echo "wrote $out/gpu.json"
else
  dry="$(mktemp -d)"
  "$python" bench/gpu.py --device cpu --dry-run --out "$dry/gpu.json" > "$dry/log"
  echo "no CUDA on this machine: dry check on the CPU passed ($(grep -c '^{' "$dry/log") records); nothing written"
  rm -rf "$dry"
fi
