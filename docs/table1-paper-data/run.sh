#!/usr/bin/env bash
# The Table 1 run on the paper's data and protocol (docs/table1-paper-data.md): the `table1`
# preset (McCoy et al.'s question-formation files; 10 search trials of at most 5 epochs, then 5
# seeds to convergence) and its extra arm, the `table1-fixed-hp` preset (Tf with the first run's
# selected hyperparameters, 3 seeds), each from a checkout frozen at e32fc48 (git worktrees under
# runs/). In order: Tf's and Tf+Nd's searches and 5 final seeds; the extra arm; Tf+Sup's and
# LSTM's searches and seeds 1-3; their seeds 4 and 5. Killed, it resumes every training job from
# its last checkpoint when run again. Every 30 minutes, and at its end, it packs its state into
# docs/table1-paper-data/state/ (docs/snapshot.sh): commit that folder as the run goes.
#
# The upstream files come from a mirror folder (default ../shared/upstream beside the checkout;
# the first argument overrides it). A session's work tree is not always handed to the next one,
# so the run's state travels in the repository: docs/snapshot.sh packs each run directory into
# docs/table1-paper-data/state/<name>/ (committed), and this script unpacks it into a new run
# directory before it starts (docs/restore.sh; tar keeps the files' times, which Snakemake compares).
# CORES (default 2) jobs at once: 1 while the CFL run (docs/cfl-two-languages/run.sh) shares the machine.
#
#     nohup nice -n 10 docs/table1-paper-data/run.sh [MIRROR] >> runs/table1-paper-data.log 2>&1 &
set -uo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
here=$root/docs/table1-paper-data
mirror=$(realpath "${1:-$root/../shared/upstream}")
commit=e32fc48
cores=${CORES:-2}
source "$root/docs/long-run.sh"

finals=results/runs/question-formation
prepare table1-paper-data table1
prepare table1-fixed-hp table1-fixed-hp
keep_snapshots table1-paper-data table1-fixed-hp
step table1-paper-data table1 $finals/{tf,tf+nd}/final/{1,2,3,4,5}/metrics.parquet
step table1-fixed-hp table1-fixed-hp $finals/tf/final/{1,2,3}/metrics.parquet
step table1-paper-data table1 $finals/{tf+sup,lstm}/final/{1,2,3}/metrics.parquet
step table1-paper-data table1 $finals/{tf+sup,lstm}/final/{4,5}/metrics.parquet
