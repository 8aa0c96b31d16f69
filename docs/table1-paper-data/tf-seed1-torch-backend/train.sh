#!/usr/bin/env bash
# Tf's final seed 1 of the Table 1 rerun again, on the PyTorch backend (the control: the rerun's own seed 1 on cpu-compiled).
cd /work/main && PYTHONPATH=/work/main exec .venv/bin/stacklm train --task question-formation --architecture Tf --data-dir /work/main/runs/table1-paper-data/results/data/question-formation \
  --hparams /work/main/runs/table1-paper-data/results/search/question-formation/tf/best.json --phase final --seed 1 --settings /work/main/runs/table1-paper-data/results/settings/train.json \
  --checkpoint runs/tf-torch-backend/checkpoint.pt --out runs/tf-torch-backend/run --device cpu --threads 1 --backend torch \
  --log runs/tf-torch-backend/train.log
