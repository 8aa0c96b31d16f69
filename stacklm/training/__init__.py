"""Training: token-budget batches, the schedules of seed 000 App. D and seed 002 App. 8,
checkpoints that resume after a kill, and the ``stacklm train`` command."""
