#!/usr/bin/env bash
# The Table 1 run (docs/table1.md): the `table1` preset from a checkout frozen at
# ae51a98 (a git worktree, runs/table1 by default), Tf's and Tf+Nd's jobs (Tf+Nd's first), then
# Tf+Sup's and LSTM's. Killed, it resumes every training job from its last checkpoint when run again.
#
# A session's work tree is not always handed to the next one, so the run's state travels in the
# repository: docs/table1/snapshot.sh packs it into docs/table1/state.tar.gz (committed), and this
# script unpacks it into a new run directory before it starts (tar keeps the files' times, which
# Snakemake compares).
#
#     nohup docs/table1/run.sh [RUN_DIR] >> runs/table1.log 2>&1 &
set -uo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
run=${1:-$root/runs/table1}
state=$root/docs/table1/state.tar.gz
if [ ! -d "$run" ]; then
  git -C "$root" worktree add --detach "$run" ae51a98
  [ -f "$state" ] && tar -xzf "$state" -C "$run"
fi
cd "$run"
export PYTHONPATH=$PWD PATH=$root/.venv/bin:$PATH
snakemake --unlock --config preset=table1 >/dev/null 2>&1
date -u +"start %FT%TZ"
snakemake --profile profiles/cpu --config preset=table1 --rerun-incomplete --keep-going \
  --prioritize results/runs/question-formation/tf+nd/final/{1,2,3}/metrics.parquet -- \
  results/runs/question-formation/{tf,tf+nd}/final/{1,2,3}/metrics.parquet
date -u +"first %FT%TZ"
snakemake --profile profiles/cpu --config preset=table1 --rerun-incomplete --keep-going -- \
  results/runs/question-formation/{tf+sup,lstm}/final/{1,2,3}/metrics.parquet
date -u +"end %FT%TZ"
