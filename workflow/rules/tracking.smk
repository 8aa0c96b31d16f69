# MLflow mirrors the Parquet files for browsing. Its SQLite store and experiments are created
# once, serially, before any training job writes to it (concurrent first writers race on the
# schema migration). Jobs take the marker as `ancient`: a later re-initialisation, or a deleted
# store, never re-runs a finished model.


localrules:
    tracking,


rule tracking:
    input:
        settings=dag.SETTINGS_JSON,
    output:
        touch(dag.TRACKING_MARKER),
    log:
        "logs/tracking.log",
    shell:
        "stacklm tracking init --settings {input.settings} > {log} 2>&1"
