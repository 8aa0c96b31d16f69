# One training run: a search trial (phase `search`, index = trial, seed derived from it) or a final
# model (phase `final`, index = seed). The resumable state lives at a `params:` path, not an output:
# Snakemake deletes the outputs of a failed job, and a retried or re-run job resumes from it.
# The job never touches MLflow: `tracking_sync` mirrors its train.parquet once the task's runs are done.
# With resources.runs_per_job (or runs_per_step) K > 1, the rules below train the runs instead, K to a job.


rule train:
    input:
        data=lambda wildcards: data_stage.data_files(wildcards.task),
        hparams=lambda wildcards: dag.hparams_path(
            wildcards.task, wildcards.architecture, wildcards.phase, wildcards.index
        ),
        settings=settings_file("train"),
        cadence=ancient(settings_file("cadence")),  # how often progress lines come: a change of it reruns nothing
    output:
        model=dag.RUN_MODEL,
        curve=dag.RUN_CURVE,
    params:
        architecture=lambda wildcards: common.architecture_name(wildcards.architecture),
        data_dir=data_stage.DATA_DIR,
        run_dir=dag.RUN_DIR,
        checkpoint=dag.CHECKPOINT,
        device=lambda wildcards, resources: common.device(resources.gpu),
        trial=lambda wildcards: dag.trial_option(wildcards.phase, wildcards.index),
        seed=lambda wildcards: dag.run_seed(wildcards.phase, wildcards.index),
    log:
        dag.TRAIN_LOG,
    wildcard_constraints:
        phase=dag.single_run_phases(SETTINGS.resources),
    threads: 1
    resources:
        gpu=0,
        runtime=lambda wildcards, attempt: dag.train_resources(SETTINGS.resources, wildcards.architecture, attempt).runtime_min,
        mem_mb=lambda wildcards, attempt: dag.train_resources(SETTINGS.resources, wildcards.architecture, attempt).mem_mb,
    conda:
        CONDA_ENV
    shell:
        "stacklm train --task {wildcards.task} --architecture {params.architecture:q}"
        " --data-dir {params.data_dir} --hparams {input.hparams} --phase {wildcards.phase}{params.trial} --seed {params.seed}"
        " --settings {input.settings} --cadence {input.cadence} --checkpoint {params.checkpoint} --out {params.run_dir}"
        " --device {params.device} --threads {threads} > {log} 2>&1"


# resources.runs_per_job K > 1: each group of K runs of a task's phase (dag.run_groups: the
# architecture x index pairs of the final seeds, or of the search trials) trains in one process, one
# run after another, for every task. Each run keeps its own outputs, checkpoint and log (the same
# paths as above); the group's log holds the process's own output. The time is the sum of the runs'
# and the memory the most of them; threads are the rule `train`'s default. With resources.runs_per_step
# K > 1 (dag.run_groups) a group is K runs of one architecture and asks for a GPU, where `stacklm train`
# trains them in one step (profiles/cpu caps the GPU at 0: one after another on the CPU).
for group in dag.run_groups(SETTINGS):

    rule:
        name:
            group.rule("train")
        input:
            data=lambda wildcards: data_stage.data_files(wildcards.task),
            hparams=group.hparams_inputs,
            settings=settings_file("train"),
            cadence=ancient(settings_file("cadence")),  # how often progress lines come: a change of it reruns nothing
        output:
            model=group.paths(dag.RUN_MODEL),
            curve=group.paths(dag.RUN_CURVE),
        params:
            data_dir=data_stage.DATA_DIR,
            hparams=group.hparams,
            run_dirs=group.paths(dag.RUN_DIR),
            checkpoints=group.paths(dag.CHECKPOINT),
            device=lambda wildcards, resources: common.device(resources.gpu),
            phase=group.phase,
            runs=group.train_options,
        log:
            runs=group.paths(dag.TRAIN_LOG),
            job=group.log(dag.TRAIN_GROUP_LOG),
        threads: 1
        resources:
            gpu=dag.group_gpus(SETTINGS.resources),
            runtime=lambda wildcards, attempt, group=group: group.resources(SETTINGS.resources, attempt).runtime_min,
            mem_mb=lambda wildcards, attempt, group=group: group.resources(SETTINGS.resources, attempt).mem_mb,
        conda:
            CONDA_ENV
        shell:
            "stacklm train --task {wildcards.task} {params.runs}"
            " --data-dir {params.data_dir} --hparams {params.hparams} --phase {params.phase}"
            " --settings {input.settings} --cadence {input.cadence} --checkpoint {params.checkpoints} --out {params.run_dirs} --log {log.runs}"
            " --device {params.device} --threads {threads} > {log.job} 2>&1"
