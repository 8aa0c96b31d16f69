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
#   STATE_DIR/models/<run>.tar.gz       an ended run's model.pt, written once when the run has ended;
#   STATE_DIR/training/<run>.tar.gz     the resumable state of a run still training, rewritten at
#                                       each snapshot and removed once the run has ended (at most
#                                       about 3 MB each: no file of the state is larger);
#   STATE_DIR/live.tar.gz               the rest: settings, search draws, every run's curve and
#                                       metrics, the CFL experiments' generated test sets, the jobs'
#                                       logs and Snakemake's records of the jobs that ended.
#
# A run is a transformation task's (results/runs/TASK/ARCHITECTURE/PHASE/INDEX, <run> =
# TASK.ARCHITECTURE.PHASE.INDEX) or a CFL grid point's (results/cfl/runs/LANGUAGE/MODEL/SETTING,
# <run> = cfl.LANGUAGE.MODEL.SETTING); its checkpoint is the same path under checkpoints/ instead of
# runs/, with the settings' hash before `.pt`, and it has ended when its train.parquet exists.
# MLflow's store and its records (results/mlflow, results/tracking) are left out: after a restore,
# `tracking` and `tracking_sync` build the store again from the Parquet. The archives are
# byte-reproducible (names sorted, owners numeric, gzip without a name or time), so an unchanged
# part is not a new blob; tar keeps the files' times, which Snakemake compares. Safe while the run
# trains: states are replaced atomically. A run directory without results yet is skipped.
#
#     docs/snapshot.sh RUN_DIR STATE_DIR [RUN_DIR STATE_DIR ...]
set -euo pipefail
shopt -s nullglob

# pack ARCHIVE ARGS...: tar ARGS... (run in the run directory) into ARCHIVE, atomically.
pack() {
  local archive=$1
  shift
  tar --sort=name --owner=0 --group=0 --numeric-owner -cf - "$@" | gzip -n > "$archive.part"
  mv "$archive.part" "$archive"
}

# name DIR: the archive name of the run in DIR (results/runs/… or results/cfl/runs/…).
name() {
  local path=${1#results/}
  path=${path/runs\//}
  echo "${path//\//.}"
}

while [ $# -ge 2 ]; do
  run=$(realpath "$1") state=$2
  shift 2
  [ -d "$run/results" ] || continue  # nothing to keep yet
  mkdir -p "$state/models"
  state=$(realpath "$state")
  cd "$run"
  data=()
  for folder in results/upstream results/data; do
    if [ -d "$folder" ]; then data+=("$folder"); fi
  done
  if [ ${#data[@]} -gt 0 ]; then
    find "${data[@]}" -type f -printf '%p\t%TY-%Tm-%Td %TH:%TM:%TS %Tz\n' | LC_ALL=C sort
  fi > "$state/data-times.tsv"
  live=(--exclude=results/mlflow --exclude=results/tracking --exclude=results/upstream --exclude=results/data
        --exclude=results/checkpoints --exclude=results/cfl/checkpoints)
  for curve in results/runs/*/*/*/*/train.parquet results/cfl/runs/*/*/*/train.parquet; do
    dir=${curve%/train.parquet}
    live+=(--exclude="$dir/model.pt")
    model="$state/models/$(name "$dir").tar.gz"
    [ -f "$model" ] || pack "$model" "$dir/model.pt"
  done
  rm -rf "$state/training" && mkdir -p "$state/training"
  for checkpoint in results/checkpoints/*/*/*/*.pt results/cfl/checkpoints/*/*/*.pt; do
    dir=${checkpoint%.*.pt}
    dir=${dir/checkpoints/runs}
    [ -f "$dir/train.parquet" ] && continue  # ended: its model is kept instead
    pack "$state/training/$(name "$dir").tar.gz" "$checkpoint"
  done
  pack "$state/live.tar.gz" "${live[@]}" results logs .snakemake/metadata
  cd - > /dev/null
done
