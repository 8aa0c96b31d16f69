"""Records of each run: the Parquet files (the source of truth) and their MLflow mirror."""
