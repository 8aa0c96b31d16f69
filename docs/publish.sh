#!/usr/bin/env bash
# Publishes a Table 1 run (a run directory of docs/table1/run.sh or docs/table1-paper-data/run.sh)
# under OUT with this checkout's own commands:
#   metrics.parquet  `stacklm aggregate` of the final runs' metrics
#   settings.json    the report's settings: PRESET, as the run's own checkout resolves it
#   table.md, .tex   `stacklm report` of the two, table.md (with every seed's values) also written
#                    between OUT's markers (<!-- NAME table --> and <!-- end of NAME table -->, NAME
#                    the folder's name) in its page OUT.md
#   table-means.md   the Markdown table as the .tex has it (the mean and the paper's), written
#                    between the same markers in README.md where the README holds them
#   curves.png       `stacklm curves` of the final runs' checkpoints (FA and PA on test and generalization)
#   constructions.md, .parquet
#                    `stacklm constructions`: the final runs' generalization FA and PA per construction,
#                    scored by the run's own checkout (its models, its kernels), as its metrics were
# Each ARCHITECTURE:SEEDS names an architecture's slug and its seeds 1 to SEEDS: every one of them,
# none chosen by hand. Each --config ENTRY is a Snakemake config entry the settings are resolved with
# besides the preset, e.g. 'report={log_ratio: of_means}' for a run whose checkout predates that default. tests/report/test_published.py renders the table again from metrics.parquet
# and settings.json, and checks the pages hold it.
#
#     docs/publish.sh [--config ENTRY]... RUN_DIR PRESET OUT ARCHITECTURE:SEEDS...
#     docs/publish.sh --config 'report={log_ratio: of_means}' runs/table1-paper-data table1 docs/table1-paper-data tf:5 tf+nd:5
set -euo pipefail
entries=()
while [ "${1:-}" = --config ]; do entries+=("$2"); shift 2; done
[ $# -ge 4 ] || { sed -n 's/^#     //p' "$0" >&2; exit 2; }
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
run=$(realpath "$1") preset=$2 out=$(realpath -m "$3")
shift 3
finals=$run/results/runs/question-formation
export PATH=$root/.venv/bin:$PATH
metrics=() curves=() runs=()
for architecture_seeds in "$@"; do
  architecture=${architecture_seeds%:*} seeds=${architecture_seeds##*:}
  for seed in $(seq 1 "$seeds"); do
    metrics+=("$finals/$architecture/final/$seed/metrics.parquet")
    curves+=("$finals/$architecture/final/$seed/train.parquet")
    runs+=("$(realpath --relative-to="$root" "$finals/$architecture/final/$seed")")  # as the pages name them
  done
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$out"
configfile=()
[ -f "$run/mirror.yaml" ] && configfile=(--configfile mirror.yaml)
(cd "$run" && PYTHONPATH=$run snakemake --cores 1 "${configfile[@]}" --config preset="$preset" "${entries[@]}" -- \
  results/settings/report.json > "$scratch/settings.log" 2>&1) || { cat "$scratch/settings.log" >&2; exit 1; }
cp "$run/results/settings/report.json" "$out/settings.json"
stacklm aggregate --out "$out/metrics.parquet" "${metrics[@]}"
stacklm report --metrics "$out/metrics.parquet" --settings "$out/settings.json" --tables "$out/table.tex" \
  --markdown "$out/table.md" --markdown-means "$out/table-means.md" --document "$scratch/report.tex" --figures "$scratch/figure3.png"
stacklm curves --out "$scratch/curves.parquet" --figures "$out/curves.png" -- "${curves[@]}"
(cd "$root" && PYTHONPATH=$run stacklm constructions --data-dir "$(realpath --relative-to="$root" "$run")/results/data/question-formation" \
  --markdown "$out/constructions.md" --parquet "$out/constructions.parquet" "${runs[@]}")
python "$root/docs/put-table.py" "$out/table.md" "$(basename "$out")" "$out.md"
python "$root/docs/put-table.py" "$out/table-means.md" "$(basename "$out")" "$root/README.md" --if-present
