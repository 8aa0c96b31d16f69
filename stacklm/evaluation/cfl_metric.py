"""The name of the CFL metric Δ (``stacklm.evaluation.cfl``) in the Parquet records: a column of
a CFL run's learning curve and the ``metric`` of its evaluation rows. Apart from
``stacklm.evaluation.cfl``, which imports torch, since the run selection (``stacklm cfl
select``) and the MLflow mirror read the name without loading a model."""

DELTA = "cross_entropy_above_truth"
