# The CFL experiments of DuSell & Chiang (2022), App. 8: per language and model, every grid run trains on
# data of its own seed (`cfl_train`), the run with the lowest validation Δ is selected
# (`cfl_select`) and scored on the language's fixed seed-0 test set (`cfl_generate`, which
# keeps and scores only the first cfl.test_strings_per_length strings of each length, and
# `cfl_evaluate`); `cfl_figures` gathers results/cfl/{curves,metrics}.parquet and draws
# Figure 1, test Δ by length and the summary table (results/cfl/summary.md) from them. The runs of NS+S and NS+S+U on marked reversal train
# as `cfl_train_actions` (`cfl_train` logging the stack actions to actions.parquet), and
# `cfl_actions` draws Figure 2 from their selected runs' logs. Rule cfl_X runs `stacklm cfl X`
# (`stacklm cfl select` without torch). With resources.runs_per_job K > 1, the rules
# cfl_train_<language>_group<n>, cfl_select_<language>_group<n> and cfl_evaluate_<language>_group<n>
# train a language's runs K to a job, and select among its models' runs and evaluate the selected
# runs K models to a job, instead.
# No job touches MLflow: `tracking_sync` mirrors each language's curves and evaluations once all are done.
import stacklm.workflow.document as document  # the scale in the `snakemake --report` captions

CFL_FIGURES = {figure: cfl_dag.cfl_figures(figure) for figure in cfl_dag.CFL_FIGURES}
HIERARCHY = "Learning Hierarchical Structures (DuSell & Chiang, 2022)"  # the category of `snakemake --report`


localrules:
    cfl_select,
    cfl_figures,
    cfl_actions,


ruleorder: cfl_train_actions > cfl_train


wildcard_constraints:
    language=r"[a-z0-9-]+",
    model=r"cfl-[^/]+",
    setting=r"lr[^/]+",


rule cfl_generate:
    output:
        cfl_dag.CFL_TEST,
    params:
        strings_per_length=SETTINGS.cfl.test_strings_per_length,
    log:
        "logs/cfl/generate/{language}.log",
    threads: 1
    conda:
        CONDA_ENV
    shell:
        "stacklm cfl generate --language {wildcards.language} --split test --seed 0"
        " --strings-per-length {params.strings_per_length} --out {output} --threads {threads} > {log} 2>&1"


rule cfl_train:
    input:
        settings=settings_file("cfl_train"),
        cadence=ancient(settings_file("cadence")),  # how often progress lines come: a change of it reruns nothing
    output:
        model=cfl_dag.CFL_RUN_MODEL,
        curve=cfl_dag.CFL_RUN_CURVE,
    params:
        architecture=lambda wildcards: common.architecture_name(wildcards.model),
        run_dir=cfl_dag.CFL_RUN_DIR,
        checkpoint=cfl_dag.CFL_CHECKPOINT,
        device=lambda wildcards, resources: common.device(resources.gpu),
        actions=lambda wildcards, output: f"--actions {output.actions}" if "actions" in output.keys() else "",
    log:
        cfl_dag.CFL_TRAIN_LOG,
    wildcard_constraints:
        setting=cfl_dag.single_runs(SETTINGS.resources.runs_per_job, r"lr[^/]+"),
    threads: 1
    resources:
        gpu=0,
        runtime=lambda wildcards, attempt: dag.job_resources(SETTINGS.resources, SETTINGS.resources.cfl, attempt).runtime_min,
        mem_mb=lambda wildcards, attempt: dag.job_resources(SETTINGS.resources, SETTINGS.resources.cfl, attempt).mem_mb,
    conda:
        CONDA_ENV
    shell:
        "stacklm cfl train --language {wildcards.language} --architecture {params.architecture:q} --setting {wildcards.setting}"
        " --settings {input.settings} --cadence {input.cadence} --checkpoint {params.checkpoint} --out {params.run_dir}"
        " --device {params.device} --threads {threads} {params.actions} > {log} 2>&1"


use rule cfl_train as cfl_train_actions with:
    output:
        model=cfl_dag.CFL_RUN_MODEL,
        curve=cfl_dag.CFL_RUN_CURVE,
        actions=cfl_dag.CFL_RUN_ACTIONS,
    wildcard_constraints:
        setting=cfl_dag.single_runs(SETTINGS.resources.runs_per_job, r"lr[^/]+"),
        **cfl_dag.cfl_action_constraints(),


# resources.runs_per_job K > 1: each group of K grid runs of a language (cfl_dag.run_groups: model
# x grid point; the runs of Figure 2's log in groups of their own) trains in one process, one run
# after another. Each run keeps its own outputs, checkpoint and log (the paths above); the group's
# log holds the process's own output.
# Only the directives' values read `group`, when the rule is defined: a shell line runs later, when
# the loop variable names the last group, so it takes the group's values through params.
for group in cfl_dag.run_groups(SETTINGS.cfl, SETTINGS.resources.runs_per_job):

    rule:
        name:
            group.rule
        input:
            settings=settings_file("cfl_train"),
            cadence=ancient(settings_file("cadence")),  # how often progress lines come: a change of it reruns nothing
        output:
            model=group.paths(cfl_dag.CFL_RUN_MODEL),
            curve=group.paths(cfl_dag.CFL_RUN_CURVE),
            actions=group.paths(cfl_dag.CFL_RUN_ACTIONS) if group.actions else [],
        params:
            language=group.language,
            runs=group.train_options,
            run_dirs=group.paths(cfl_dag.CFL_RUN_DIR),
            checkpoints=group.paths(cfl_dag.CFL_CHECKPOINT),
            device=lambda wildcards, resources: common.device(resources.gpu),
            actions=lambda wildcards, output: f"--actions {output.actions}" if output.actions else "",
        log:
            runs=group.paths(cfl_dag.CFL_TRAIN_LOG),
            job=group.log,
        threads: 1
        resources:
            gpu=0,
            runtime=lambda wildcards, attempt, runs=len(group.runs): dag.job_resources(SETTINGS.resources, SETTINGS.resources.cfl, attempt, runs).runtime_min,
            mem_mb=lambda wildcards, attempt: dag.job_resources(SETTINGS.resources, SETTINGS.resources.cfl, attempt).mem_mb,
        conda:
            CONDA_ENV
        shell:
            "stacklm cfl train --language {params.language} {params.runs} --settings {input.settings} --cadence {input.cadence}"
            " --checkpoint {params.checkpoints} --out {params.run_dirs} {params.actions} --log {log.runs}"
            " --device {params.device} --threads {threads} > {log.job} 2>&1"


rule cfl_select:
    input:
        lambda wildcards: cfl_dag.cfl_run_files(SETTINGS.cfl, wildcards.language, wildcards.model, cfl_dag.CFL_RUN_CURVE),
    output:
        cfl_dag.CFL_SELECTED,
    log:
        cfl_dag.CFL_SELECT_LOG,
    wildcard_constraints:
        model=cfl_dag.single_runs(SETTINGS.resources.runs_per_job, r"cfl-[^/]+"),
    conda:
        CONDA_ENV
    shell:
        "stacklm cfl select --curves {input} --out {output} > {log} 2>&1"


# resources.runs_per_job K > 1: the selections of K models of a language (cfl_dag.model_groups, as
# their evaluations below) in one process, each model's written to its own file.
for group in cfl_dag.model_groups(SETTINGS.cfl, SETTINGS.resources.runs_per_job):

    rule:
        name:
            group.rule("select")
        localrule: True
        input:
            group.run_files(SETTINGS.cfl, cfl_dag.CFL_RUN_CURVE),
        output:
            group.paths(cfl_dag.CFL_SELECTED),
        params:
            curves=group.select_options(SETTINGS.cfl),
        log:
            group.log(cfl_dag.CFL_SELECT_GROUP_LOG),
        conda:
            CONDA_ENV
        shell:
            "stacklm cfl select {params.curves} --out {output} > {log} 2>&1"


rule cfl_evaluate:
    input:
        selection=cfl_dag.CFL_SELECTED,
        models=lambda wildcards: cfl_dag.cfl_run_files(SETTINGS.cfl, wildcards.language, wildcards.model, cfl_dag.CFL_RUN_MODEL),
        test=cfl_dag.CFL_TEST,
        settings=settings_file("cfl_evaluate"),
    output:
        cfl_dag.CFL_EVALUATION,
    params:
        runs=cfl_dag.CFL_RUNS,
        device=lambda wildcards, resources: common.device(resources.gpu),
    log:
        cfl_dag.CFL_EVALUATE_LOG,
    wildcard_constraints:
        model=cfl_dag.single_runs(SETTINGS.resources.runs_per_job, r"cfl-[^/]+"),
    threads: 1
    resources:
        gpu=0,
    conda:
        CONDA_ENV
    shell:
        "stacklm cfl evaluate --selection {input.selection} --runs {params.runs} --test {input.test}"
        " --settings {input.settings} --out {output} --device {params.device} --threads {threads} > {log} 2>&1"


# resources.runs_per_job K > 1: the selected runs of K models of a language
# (cfl_dag.model_groups) are evaluated in one process, one after another; each model's
# evaluation and log are the paths above, the group's log holds the process's own output.
for group in cfl_dag.model_groups(SETTINGS.cfl, SETTINGS.resources.runs_per_job):

    rule:
        name:
            group.rule("evaluate")
        input:
            selections=group.paths(cfl_dag.CFL_SELECTED),
            models=group.run_files(SETTINGS.cfl, cfl_dag.CFL_RUN_MODEL),
            test=cfl_dag.CFL_TEST.format(language=group.language),
            settings=settings_file("cfl_evaluate"),
        output:
            group.paths(cfl_dag.CFL_EVALUATION),
        params:
            runs=group.paths(cfl_dag.CFL_RUNS),
            device=lambda wildcards, resources: common.device(resources.gpu),
        log:
            runs=group.paths(cfl_dag.CFL_EVALUATE_LOG),
            job=group.log(cfl_dag.CFL_EVALUATE_GROUP_LOG),
        threads: 1
        resources:
            gpu=0,
        conda:
            CONDA_ENV
        shell:
            "stacklm cfl evaluate --selection {input.selections} --runs {params.runs} --test {input.test}"
            " --settings {input.settings} --out {output} --log {log.runs} --device {params.device} --threads {threads} > {log.job} 2>&1"


rule cfl_figures:
    input:
        curves=cfl_dag.cfl_pair_files(SETTINGS.cfl, cfl_dag.CFL_SELECTED),
        metrics=cfl_dag.cfl_pair_files(SETTINGS.cfl, cfl_dag.CFL_EVALUATION),
    output:
        curves=cfl_dag.CFL_CURVES,
        metrics=cfl_dag.CFL_METRICS,
        summary=cfl_dag.CFL_SUMMARY,
        validation=[report(path, caption="../report/cfl-validation.rst", category=HIERARCHY) for path in CFL_FIGURES["validation"]],
        test=[report(path, caption="../report/cfl-test-by-length.rst", category=HIERARCHY) for path in CFL_FIGURES["test-by-length"]],
    params:
        caption_scale=document.cfl_scale(config.get("preset"), SETTINGS.cfl),  # for the `snakemake --report` captions
    log:
        "logs/cfl/figures.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm cfl figures --curves {input.curves} --metrics {input.metrics} --out-curves {output.curves}"
        " --out-metrics {output.metrics} --validation-figures {output.validation} --test-figures {output.test}"
        " --summary {output.summary} > {log} 2>&1"


rule cfl_actions:
    input:
        selections=cfl_dag.cfl_action_files(cfl_dag.CFL_SELECTED),
        actions=cfl_dag.cfl_action_runs(SETTINGS.cfl),
    output:
        actions=cfl_dag.CFL_ACTIONS,
        figures=[report(path, caption="../report/cfl-stack-actions.rst", category=HIERARCHY) for path in cfl_dag.cfl_figures(cfl_dag.CFL_ACTIONS_FIGURE)],
    params:
        runs=cfl_dag.cfl_action_files(cfl_dag.CFL_RUNS),
        caption_scale=document.cfl_scale(config.get("preset"), SETTINGS.cfl),
    log:
        "logs/cfl/actions.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm cfl actions --selections {input.selections} --runs {params.runs} --out {output.actions}"
        " --figures {output.figures} > {log} 2>&1"
