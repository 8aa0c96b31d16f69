#!/usr/bin/env bash
# Packs a run directory of docs/table1-paper-data/run.sh (runs/NAME) into
# docs/table1-paper-data/NAME.tar.gz, to be committed: results/ (data, settings, every run's model,
# curves and metrics, and the resumable state of the runs still training: an ended run's state is
# left out), the jobs' logs and Snakemake's records of the jobs that ended. run.sh unpacks it into a new run directory, whose
# training jobs then resume from their states. Safe while the run trains: states are replaced
# atomically.
#
#     docs/table1-paper-data/snapshot.sh NAME...     # table1-paper-data, table1-fixed-hp
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
for name in "$@"; do
  cd "$root/runs/$name"
  ended=()
  for curve in results/runs/*/*/*/*/train.parquet; do
    [ -f "$curve" ] || continue
    run_path=${curve#results/runs/}
    ended+=(--exclude="results/checkpoints/${run_path%/train.parquet}.*.pt")
  done
  archive=$root/docs/table1-paper-data/$name.tar.gz
  tar -czf "$archive.part" --exclude=results/mlflow "${ended[@]}" \
    results logs .snakemake/metadata
  mv "$archive.part" "$archive"
done
