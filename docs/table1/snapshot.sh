#!/usr/bin/env bash
# Packs the Table 1 run's state (docs/table1/run.sh) into docs/table1/state.tar.gz, to be committed:
# results/ (data, settings, every run's checkpoint, model, curves and metrics), the jobs' logs and Snakemake's
# records of the jobs that ended. docs/table1/run.sh unpacks it into a new run directory, whose
# training jobs then resume from their checkpoints. Safe while the run trains: checkpoints are
# replaced atomically.
#
#     docs/table1/snapshot.sh [RUN_DIR]
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
run=${1:-$root/runs/table1}
cd "$run"
tar -czf "$root/docs/table1/state.tar.gz.part" --exclude=results/mlflow results logs .snakemake/metadata
mv "$root/docs/table1/state.tar.gz.part" "$root/docs/table1/state.tar.gz"
