"""Training: token-budget batches, the schedules of DuSell & Cotterell (2025) App. D and DuSell & Chiang (2022) App. 8,
checkpoints that resume after a kill, and the ``stacklm train`` command."""
