# Metrics of one final model on the test set and on the generalization set under the
# hierarchical and the linear rule: RUN_DIR/metrics.parquet, the source of every table (and of
# the run's final metrics in MLflow, through `tracking_sync`).
# With resources.runs_per_job K > 1, the rules at the end evaluate the runs instead, K to a job.


rule evaluate:
    input:
        model=dag.RUN_MODEL,
        data=lambda wildcards: data_stage.data_files(wildcards.task),
        settings=settings_file("evaluate"),
    output:
        dag.RUN_METRICS,
    params:
        data_dir=lambda wildcards, input: os.path.dirname(input.data[0]),
        run_dir=lambda wildcards, input: os.path.dirname(input.model),
        device=lambda wildcards, resources: common.device(resources.gpu),
    log:
        dag.EVALUATE_LOG,
    wildcard_constraints:
        phase=dag.single_run_phases(SETTINGS.resources),
    threads: 1
    resources:
        gpu=0,
    conda:
        CONDA_ENV
    shell:
        "stacklm evaluate --task {wildcards.task} --run {params.run_dir} --data-dir {params.data_dir}"
        " --settings {input.settings} --out {output} --device {params.device} --threads {threads} > {log} 2>&1"


# resources.runs_per_job K > 1: the final runs of each group that trains together
# (dag.evaluation_groups) are evaluated in one process, one run after another, for every task;
# each run writes its own metrics.parquet and log (the paths above), the group's log holds the
# process's own output.
for group in dag.evaluation_groups(SETTINGS):

    rule:
        name:
            group.rule("evaluate")
        input:
            models=group.paths(dag.RUN_MODEL),
            data=lambda wildcards: data_stage.data_files(wildcards.task),
            settings=settings_file("evaluate"),
        output:
            group.paths(dag.RUN_METRICS),
        params:
            data_dir=data_stage.DATA_DIR,
            run_dirs=group.paths(dag.RUN_DIR),
            device=lambda wildcards, resources: common.device(resources.gpu),
        log:
            runs=group.paths(dag.EVALUATE_LOG),
            job=group.log(dag.EVALUATE_GROUP_LOG),
        threads: 1
        resources:
            gpu=0,
        conda:
            CONDA_ENV
        shell:
            "stacklm evaluate --task {wildcards.task} --run {params.run_dirs} --data-dir {params.data_dir}"
            " --settings {input.settings} --out {output} --log {log.runs} --device {params.device} --threads {threads} > {log.job} 2>&1"
