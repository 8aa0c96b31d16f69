"""Reporting: every run's ``metrics.parquet`` → one aggregate Parquet → LaTeX tables in the
layout of DuSell & Cotterell (2025), Tables 1–7 (beside the paper's own numbers) and Figure 3.

The report reads Parquet only; the MLflow store is a mirror for browsing and never a source.
"""
