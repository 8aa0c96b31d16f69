# MLflow mirrors the Parquet files for browsing; no training or evaluation job touches it, and
# the report never reads it. `tracking` creates the SQLite store and the experiments once,
# serially (concurrent first writers race on the schema migration). `tracking_sync` then mirrors
# one experiment (a task or a CFL language) from its runs' Parquet files once they are all
# written, into results/tracking/{experiment}.json (run key -> MLflow run id); a rerun skips the
# runs whose files did not change, and logs each run with results' model as an MLflow model (the
# only use of torch here). A deleted store is rebuilt by
# `--forcerun tracking` (init, then every sync). With resources.runs_per_job K > 1, the rules
# tracking_sync_group<n> mirror each kind's experiments (tasks, CFL languages, PTB) K to a job instead.


localrules:
    tracking,
    tracking_sync,


wildcard_constraints:
    experiment=r"[a-z0-9-]+",


rule tracking:
    input:
        settings=settings_file("tracking"),
    output:
        touch(pipeline.TRACKING_MARKER),
    log:
        "logs/tracking.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm tracking init --settings {input.settings} > {log} 2>&1"


rule tracking_sync:
    input:
        unpack(lambda wildcards: pipeline.tracking_inputs(SETTINGS, wildcards.experiment)),
        settings=settings_file("tracking"),
        store=pipeline.TRACKING_MARKER,
    output:
        pipeline.TRACKING_MANIFEST,
    params:
        logs=lambda wildcards: pipeline.tracking_log_options(SETTINGS, wildcards.experiment),
    log:
        pipeline.TRACKING_LOG,
    wildcard_constraints:
        experiment=pipeline.single_experiments(SETTINGS),
    conda:
        CONDA_ENV
    shell:
        "stacklm tracking sync --settings {input.settings} --experiment {wildcards.experiment}"
        " --curves {input.curves} --metrics {input.metrics} {params.logs} --out {output} > {log} 2>&1"


# resources.runs_per_job K > 1: the experiments of each kind, K to a group (pipeline.tracking_groups),
# mirrored by one process, one experiment after another (MLflow imported once), each into its own
# manifest; the group's log holds the process's output. The small preset: 13 jobs become 3.
for group in pipeline.tracking_groups(SETTINGS):

    rule:
        name:
            group.rule
        localrule: True
        input:
            **pipeline.tracking_group_inputs(SETTINGS, group),
            settings=settings_file("tracking"),
            store=pipeline.TRACKING_MARKER,
        output:
            group.manifests,
        params:
            experiments=pipeline.tracking_group_options(SETTINGS, group),
        log:
            group.log,
        conda:
            CONDA_ENV
        shell:
            "stacklm tracking sync --settings {input.settings} {params.experiments} --out {output} > {log} 2>&1"
