"""Training: the loop every experiment shares, over strings (token-budget or same-length batches)
or a PTB stream's truncated-BPTT chunks; the schedules of DuSell & Cotterell (2025) App. D and
DuSell & Chiang (2022) App. 8 and App. 10; checkpoints that resume after a kill; a run's files."""
