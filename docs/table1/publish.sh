#!/usr/bin/env bash
# Publishes the Table 1 run (docs/table1/run.sh) under docs/table1 with this checkout's own commands:
#   metrics.parquet  `stacklm aggregate` of the final runs' metrics (the pipeline's results/metrics.parquet)
#   settings.json    the report's settings: the `table1` preset
#   table.md, .tex   `stacklm report` of the two, also copied into README.md between its table1 markers
#   curves.png       `stacklm curves` of the final runs' checkpoints (FA and PA on test and generalization)
#   constructions.md, .parquet
#                    `stacklm constructions`: the final runs' generalization FA and PA per construction
# tests/report/test_published.py renders the table again from metrics.parquet and settings.json.
#
#     docs/table1/publish.sh [RUN_DIR] [ARCHITECTURE ...]    # default: runs/table1, tf tf+nd
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
run=${1:-runs/table1}
architectures=(tf tf+nd)
[ $# -gt 1 ] && architectures=("${@:2}")
out=docs/table1
finals=$run/results/runs/question-formation
export PATH=$root/.venv/bin:$PATH
metrics=() curves=() runs=()
for architecture in "${architectures[@]}"; do
  for seed in 1 2 3; do
    metrics+=("$finals/$architecture/final/$seed/metrics.parquet")
    curves+=("$finals/$architecture/final/$seed/train.parquet")
    runs+=("$finals/$architecture/final/$seed")
  done
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
stacklm aggregate --out $out/metrics.parquet "${metrics[@]}"
snakemake --cores 1 --config preset=table1 -- results/settings/report.json \
  > "$scratch/settings.log" 2>&1 || { cat "$scratch/settings.log" >&2; exit 1; }
cp results/settings/report.json $out/settings.json
stacklm report --metrics $out/metrics.parquet --settings $out/settings.json --tables $out/table.tex \
  --markdown $out/table.md --document "$scratch/report.tex" --figures "$scratch/figure3.png"
stacklm curves --out "$scratch/curves.parquet" --figures $out/curves.png -- "${curves[@]}"
stacklm constructions --data-dir $run/results/data/question-formation --markdown $out/constructions.md \
  --parquet $out/constructions.parquet "${runs[@]}"
python - "$out/table.md" <<'PY'
import sys
from pathlib import Path

table = Path(sys.argv[1]).read_text()
readme = Path("README.md")
text = readme.read_text()
start, end = "<!-- table1 table -->\n", "<!-- end of table1 table -->"
head, rest = text.split(start)
readme.write_text(head + start + table + end + rest.split(end, 1)[1])
PY
