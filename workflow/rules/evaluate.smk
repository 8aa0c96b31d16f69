# Metrics of one final model on the test set and on the generalization set under the
# hierarchical and the linear rule: RUN_DIR/metrics.parquet, the source of every table (and of
# the run's final metrics in MLflow, through `tracking_sync`).


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
    threads: 1
    resources:
        gpu=0,
    conda:
        CONDA_ENV
    shell:
        "stacklm evaluate --task {wildcards.task} --run {params.run_dir} --data-dir {params.data_dir}"
        " --settings {input.settings} --out {output} --device {params.device} --threads {threads} > {log} 2>&1"
