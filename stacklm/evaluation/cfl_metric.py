"""The name of the CFL metric Δ (``stacklm.evaluation.cfl``) in the Parquet records: a column of
a CFL run's learning curve and the ``metric`` of its evaluation rows, and the paper's bound on
it. Apart from ``stacklm.evaluation.cfl``, which imports torch, since the run selection
(``stacklm cfl select``), the MLflow mirror and ``stacklm cfl progress`` read them without
loading a model."""

DELTA = "cross_entropy_above_truth"
NEAR_OPTIMAL = 0.05
"""The paper's "near-optimal" bound on validation Δ, in nats per symbol (DuSell & Chiang, 2022, §4, Figure 1)."""
