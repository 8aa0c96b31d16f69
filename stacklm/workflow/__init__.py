"""What the Snakefile asks of stacklm across experiments: the resolved settings
(``settings``), the whole DAG's targets and the MLflow mirror's records (``dag``), and the
mirror's commands (``tracking``). Each experiment's own paths and lookups live in
``stacklm.experiments``; no decision lives in Snakemake code.
"""
