#!/usr/bin/env bash
# Packs the Table 1 run's state (docs/table1/run.sh) into docs/table1/state.tar.gz, to be committed
# (docs/snapshot.sh says what it holds).
#
#     docs/table1/snapshot.sh [RUN_DIR]
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
exec "$root/docs/snapshot.sh" "${1:-$root/runs/table1}" "$root/docs/table1/state.tar.gz"
