#!/usr/bin/env bash
# Unpacks a run's state packed by docs/snapshot.sh into RUN_DIR (a fresh checkout at the run's
# commit): each ended run's model, each unfinished run's resumable state, then the rest, with the
# files' times as packed; then has Snakemake (with SNAKEMAKE_OPTION..., e.g. the run's
# --configfile and --config) fetch the data again, from the pinned upstream files, and gives each
# data file its packed time, so that nothing trained on it is rerun.
# A STATE_DIR that does not exist restores nothing: the run starts from the beginning.
#
#     docs/restore.sh STATE_DIR RUN_DIR [SNAKEMAKE_OPTION...]
set -euo pipefail
state=$1 run=$2
shift 2
[ -d "$state" ] || exit 0
for archive in "$state"/models/*.tar.gz "$state"/training/*.tar.gz "$state"/live.tar.gz; do
  [ -f "$archive" ] && tar -xzf "$archive" -C "$run"
done
times=$(realpath "$state/data-times.tsv")
[ -s "$times" ] || exit 0
cd "$run"
PYTHONPATH=$PWD snakemake --cores 1 "$@" -- $(cut -f1 "$times")
while IFS=$'\t' read -r path time; do
  touch -d "$time" "$path"
done < "$times"
