#!/usr/bin/env bash
# Packs the state of a published run's directory into an archive, to be committed: results/ (data,
# settings, every run's model, curves and metrics, and the resumable state of the runs still
# training: an ended run's state is left out), the jobs' logs and Snakemake's records of the jobs
# that ended. The run's script (docs/table1/run.sh, docs/table1-paper-data/run.sh) unpacks it into
# a new run directory, whose training jobs then resume from their states (tar keeps the files'
# times, which Snakemake compares). Safe while the run trains: states are replaced atomically.
#
#     docs/snapshot.sh RUN_DIR ARCHIVE [RUN_DIR ARCHIVE ...]
set -euo pipefail
while [ $# -ge 2 ]; do
  run=$(realpath "$1") archive=$(realpath "$2")
  shift 2
  ended=()
  for curve in "$run"/results/runs/*/*/*/*/train.parquet; do
    [ -f "$curve" ] || continue
    run_path=${curve#"$run"/results/runs/}
    ended+=(--exclude="results/checkpoints/${run_path%/train.parquet}.*.pt")
  done
  (cd "$run" && tar -czf "$archive.part" --exclude=results/mlflow "${ended[@]}" results logs .snakemake/metadata)
  mv "$archive.part" "$archive"
done
