#!/usr/bin/env bash
# Unpacks a run's state packed by docs/snapshot.sh into RUN_DIR (a fresh checkout at the run's
# commit): the data, each ended run's model, each unfinished run's resumable state, then the
# rest, with the files' times as packed.
# A STATE_DIR that does not exist restores nothing: the run starts from the beginning.
#
#     docs/restore.sh STATE_DIR RUN_DIR
set -euo pipefail
state=$1 run=$2
[ -d "$state" ] || exit 0
for archive in "$state"/data.tar.gz "$state"/models/*.tar.gz "$state"/training/*.tar.gz "$state"/live.tar.gz; do
  [ -f "$archive" ] && tar -xzf "$archive" -C "$run"
done
exit 0
