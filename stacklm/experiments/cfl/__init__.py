"""The context-free language experiments of DuSell & Chiang (2022) as one experiment: the grid of
runs, their data, selection, test and figures, and the DAG that wires them."""
