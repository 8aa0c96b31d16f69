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
#
#     nohup nice -n 10 docs/table1-paper-data/run.sh [MIRROR] >> runs/table1-paper-data.log 2>&1 &
set -uo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
here=$root/docs/table1-paper-data
mirror=$(realpath "${1:-$root/../shared/upstream}")
commit=e32fc48
export PATH=$root/.venv/bin:$PATH

# prepare NAME PRESET: the run directory runs/NAME at $commit, with the state packed in state/NAME if any.
prepare() {
  local run=$root/runs/$1
  local fresh=false
  [ -d "$run" ] || { git -C "$root" worktree add --detach "$run" "$commit" >/dev/null && fresh=true; }
  printf 'data:\n  upstream_mirror: %s\n' "$mirror" > "$run/mirror.yaml"
  if $fresh; then
    "$root/docs/restore.sh" "$here/state/$1" "$run" --configfile mirror.yaml --config preset="$2"
  fi
}

# step NAME PRESET TARGET...: Snakemake in runs/NAME, one training job per core.
step() {
  local name=$1 preset=$2
  shift 2
  (cd "$root/runs/$name" && export PYTHONPATH=$PWD \
    && snakemake --unlock --configfile mirror.yaml --config preset="$preset" >/dev/null 2>&1
    date -u +"$name $preset start %FT%TZ"
    snakemake --profile profiles/cpu --configfile mirror.yaml --config preset="$preset" \
      --rerun-incomplete --keep-going -- "$@"
    date -u +"$name $preset end %FT%TZ (exit $?)")
}

# snapshot: the state of both run directories into state/ (docs/snapshot.sh), to be committed; every
# 30 minutes while the run goes, and at its end.
snapshot() {
  nice -n 15 "$root/docs/snapshot.sh" "$root/runs/table1-paper-data" "$here/state/table1-paper-data" \
    "$root/runs/table1-fixed-hp" "$here/state/table1-fixed-hp"
}

finals=results/runs/question-formation
prepare table1-paper-data table1
prepare table1-fixed-hp table1-fixed-hp
(while sleep 1800; do snapshot; done) &
trap 'kill $! 2>/dev/null; snapshot' EXIT
step table1-paper-data table1 $finals/{tf,tf+nd}/final/{1,2,3,4,5}/metrics.parquet
step table1-fixed-hp table1-fixed-hp $finals/tf/final/{1,2,3}/metrics.parquet
step table1-paper-data table1 $finals/{tf+sup,lstm}/final/{1,2,3}/metrics.parquet
step table1-paper-data table1 $finals/{tf+sup,lstm}/final/{4,5}/metrics.parquet
