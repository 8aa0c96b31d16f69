# The functions of the long runs' scripts (docs/table1-paper-data/run.sh,
# docs/cfl-two-languages/run.sh), sourced by them once they have set:
#   root     the repository;
#   here     the run's folder under docs/ (its state in $here/state/<name>/);
#   commit   the commit every run directory is checked out at (frozen for the whole run);
#   mirror   a folder of the upstream files, or empty when the run needs none (then each Snakemake
#            call takes no --configfile);
#   cores    how many jobs Snakemake runs at once (2 on our machines; 1 for each of two runs that
#            share them, one job per core).
# A run directory is runs/<name>, a git worktree at $commit. Killed, a run resumes every training
# job from its last checkpoint when its script is run again.

export PATH=$root/.venv/bin:$PATH

# configuration: the Snakemake options of every call in a run directory (the mirror's config file).
configuration() {
  [ -n "$mirror" ] && echo --configfile mirror.yaml
}

# prepare NAME PRESET: runs/NAME at $commit; made afresh, it gets the state packed in
# $here/state/NAME, if any (docs/restore.sh).
prepare() {
  local run=$root/runs/$1
  local fresh=false
  [ -d "$run" ] || { git -C "$root" worktree add --detach "$run" "$commit" >/dev/null && fresh=true; }
  [ -n "$mirror" ] && printf 'data:\n  upstream_mirror: %s\n' "$mirror" > "$run/mirror.yaml"
  if $fresh; then
    "$root/docs/restore.sh" "$here/state/$1" "$run" $(configuration) --config preset="$2"
  fi
}

# step NAME PRESET TARGET...: Snakemake in runs/NAME, $cores jobs at once, one thread each. The
# settings files the run has written are brought up to date first, in a call of their own: a call
# that rewrites one (after a move to another commit) schedules no job after it, the jobs that read
# it being judged in the next call, so the targets' jobs would wait for the script's next step.
step() {
  local name=$1 preset=$2
  shift 2
  (cd "$root/runs/$name" && export PYTHONPATH=$PWD \
    && snakemake --unlock $(configuration) --config preset="$preset" >/dev/null 2>&1
    settings=(results/settings/*.json)
    [ -e "${settings[0]}" ] && snakemake --cores 1 $(configuration) --config preset="$preset" -- "${settings[@]}" >/dev/null 2>&1
    date -u +"$name $preset start %FT%TZ"
    snakemake --profile profiles/cpu --cores "$cores" $(configuration) --config preset="$preset" \
      --rerun-incomplete --keep-going -- "$@"
    date -u +"$name $preset end %FT%TZ (exit $?)")
}

# snapshot NAME...: each run directory's state into $here/state/NAME (docs/snapshot.sh), to be committed.
snapshot() {
  local pairs=() name
  for name in "$@"; do pairs+=("$root/runs/$name" "$here/state/$name"); done
  nice -n 15 "$root/docs/snapshot.sh" "${pairs[@]}"
}

# keep_snapshots NAME...: snapshot every 30 minutes while the script runs, and once at its end.
keep_snapshots() {
  local names=("$@")
  (while sleep 1800; do snapshot "${names[@]}"; done) &
  local loop=$!
  trap "kill $loop 2>/dev/null; snapshot ${names[*]}" EXIT
}
