#!/usr/bin/env bash
# Packs the state of a published run's directory into STATE_DIR, to be committed: everything a
# fresh checkout needs to resume the run where it stands (docs/restore.sh unpacks it). A session's
# work tree is not always handed to the next one, so this state travels in the repository, in
# parts that git stores once each:
#
#   STATE_DIR/data-times.tsv            each file of results/upstream and results/data with its time,
#                                       not its bytes: the data are the upstream files, which the
#                                       project downloads or reads from a mirror and never copies,
#                                       so docs/restore.sh has the workflow fetch them again, and
#                                       gives them back these times;
#   STATE_DIR/models/<run>.tar.gz       an ended run's model.pt, written once when the run has ended
#                                       (<run>: task.architecture.phase.index);
#   STATE_DIR/training/<run>.tar.gz     the resumable state of a run still training, rewritten at
#                                       each snapshot and removed once the run has ended (about
#                                       3 MB each: no file of the state is larger);
#   STATE_DIR/live.tar.gz               the rest: settings, search draws, every run's curve and
#                                       metrics, the jobs' logs and Snakemake's records of the
#                                       jobs that ended.
#
# MLflow's store is left out (`tracking_sync` rebuilds it from the Parquet). The archives are
# byte-reproducible (names sorted, owners numeric, gzip without a name or time), so an unchanged
# part is not a new blob; tar keeps the files' times, which Snakemake compares. Safe while the run
# trains: states are replaced atomically. A run directory without data yet is skipped.
#
#     docs/snapshot.sh RUN_DIR STATE_DIR [RUN_DIR STATE_DIR ...]
set -euo pipefail

# pack ARCHIVE ARGS...: tar ARGS... (run in the run directory) into ARCHIVE, atomically.
pack() {
  local archive=$1
  shift
  tar --sort=name --owner=0 --group=0 --numeric-owner -cf - "$@" | gzip -n > "$archive.part"
  mv "$archive.part" "$archive"
}

while [ $# -ge 2 ]; do
  run=$(realpath "$1") state=$2
  shift 2
  [ -d "$run/results/data" ] || continue  # nothing to keep yet
  mkdir -p "$state/models"
  state=$(realpath "$state")
  cd "$run"
  find results/upstream results/data -type f -printf '%p\t%TY-%Tm-%Td %TH:%TM:%TS %Tz\n' 2>/dev/null | LC_ALL=C sort \
    > "$state/data-times.tsv"
  live=(--exclude=results/mlflow --exclude=results/upstream --exclude=results/data --exclude=results/checkpoints)
  for curve in results/runs/*/*/*/*/train.parquet; do
    [ -f "$curve" ] || continue
    dir=${curve%/train.parquet}
    run_path=${dir#results/runs/}
    live+=(--exclude="$dir/model.pt")
    model="$state/models/${run_path//\//.}.tar.gz"
    [ -f "$model" ] || pack "$model" "$dir/model.pt"
  done
  rm -rf "$state/training" && mkdir -p "$state/training"
  for checkpoint in results/checkpoints/*/*/*/*.pt; do
    [ -f "$checkpoint" ] || continue
    run_path=${checkpoint#results/checkpoints/}
    run_path=${run_path%%.*}
    [ -f "results/runs/$run_path/train.parquet" ] && continue  # ended: its model is kept instead
    pack "$state/training/${run_path//\//.}.tar.gz" "$checkpoint"
  done
  pack "$state/live.tar.gz" "${live[@]}" results logs .snakemake/metadata
  cd - > /dev/null
done
