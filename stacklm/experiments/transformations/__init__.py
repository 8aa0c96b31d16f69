"""The syntactic transformations of DuSell & Cotterell (2025) as one experiment: its data stage, search,
training, evaluation and report, and the DAG that wires them."""
