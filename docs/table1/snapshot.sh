#!/usr/bin/env bash
# Packs the Table 1 run's state (docs/table1/run.sh) into docs/table1/state.tar.gz, to be committed:
# results/ (data, settings, every run's model, curves and metrics, and the resumable state of the
# runs still training: an ended run's state, 3 MB, is left out), the jobs' logs and Snakemake's
# records of the jobs that ended. docs/table1/run.sh unpacks it into a new run directory, whose
# training jobs then resume from their states. Safe while the run trains: states are replaced
# atomically.
#
#     docs/table1/snapshot.sh [RUN_DIR]
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
run=${1:-$root/runs/table1}
cd "$run"
ended=()
for curve in results/runs/*/*/*/*/train.parquet; do
  [ -f "$curve" ] || continue
  run_path=${curve#results/runs/}
  ended+=(--exclude="results/checkpoints/${run_path%/train.parquet}.*.pt")
done
tar -czf "$root/docs/table1/state.tar.gz.part" --exclude=results/mlflow "${ended[@]}" results logs .snakemake/metadata
mv "$root/docs/table1/state.tar.gz.part" "$root/docs/table1/state.tar.gz"
