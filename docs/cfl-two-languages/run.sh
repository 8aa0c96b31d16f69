#!/usr/bin/env bash
# The CFL experiment of DuSell & Chiang (2022) on two languages at the paper's scale
# (docs/cfl-two-languages.md): the `cfl-two-languages` preset (marked and padded reversal, the seven
# models at App. 8's grid with one restart per grid point: 88 training runs), from a checkout
# frozen at COMMIT (the first argument; a git worktree, runs/cfl-two-languages), marked reversal
# first. Killed, it resumes every training job from its last checkpoint when run again. Every 30
# minutes, and at its end, it packs its state into docs/cfl-two-languages/state/ (docs/snapshot.sh):
# commit that folder as the run goes. When every run has ended, it publishes the summary table
# (between the markers of docs/cfl-two-languages.md), the figures and the Parquet records into
# docs/cfl-two-languages/.
# CORES (default 2) jobs at once: 1 while the Table 1 run (docs/table1-paper-data/run.sh) shares
# the machine, one job per core.
#
#     CORES=1 nohup nice -n 10 docs/cfl-two-languages/run.sh COMMIT >> runs/cfl-two-languages.log 2>&1 &
set -uo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
here=$root/docs/cfl-two-languages
commit=${1:?the commit to run at (the first argument)}
mirror=
cores=${CORES:-2}
source "$root/docs/long-run.sh"

models=(cfl-lstm cfl-gref cfl-jm cfl-ns cfl-ns+s cfl-ns+u cfl-ns+s+u)
prepare cfl-two-languages cfl-two-languages
keep_snapshots cfl-two-languages
marked=(results/cfl/actions.parquet)
for model in "${models[@]}"; do marked+=("results/cfl/evaluation/marked-reversal/$model.parquet"); done
step cfl-two-languages cfl-two-languages "${marked[@]}"
step cfl-two-languages cfl-two-languages
run=$root/runs/cfl-two-languages/results/cfl
[ -f "$run/summary.md" ] || exit 1
cp "$run"/{summary.md,curves.parquet,metrics.parquet,actions.parquet} "$run"/figures/*.png "$here/"
python "$root/docs/put-table.py" "$here/summary.md" cfl-two-languages "$root/docs/cfl-two-languages.md"
