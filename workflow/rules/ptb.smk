# The Penn Treebank experiment of DuSell & Chiang (2022), §5.2 and App. 10-11 (stacklm.experiments.ptb.dag):
# per model and random restart, `ptb_train` (its draw of learning rate and clipping threshold and its
# initial parameters derived from (salt, model, restart); resumable) and `ptb_evaluate` (test
# perplexity and the SG score); per model, `ptb_select` (the restart of lowest validation
# perplexity); then `ptb_report`: results/ptb/metrics.parquet, the PTB and circuit tables and the
# figure of SG score against test perplexity, from that Parquet alone. The `ptb` settings reach the
# jobs as options, so a job reruns when one of its own options changes; but ptb.progress_interval_s
# (how often progress lines come) reaches the training jobs in the cadence file, an ancient input
# passed as --cadence, and a change of it reruns none. Rule ptb_X runs
# `stacklm ptb X`; select and report import no torch. No job touches MLflow: `tracking_sync`
# mirrors the experiment `ptb` once every restart is scored. The PTB files and the suites are inputs:
# ptb.mirror's (checked to exist when the settings are built) or, when it is null, those that
# `ptb_download` (Mikolov's simple-examples.tgz) and `ptb_suites` (the authors' repository) fetch into
# resources/; the jobs refuse a file unless its sha256 is the pinned one. With resources.runs_per_job K > 1, the rules
# ptb_train_group<n> and ptb_evaluate_group<n> train and evaluate the restarts K to a job instead.
import stacklm.experiments.ptb.dag as ptb_dag
import stacklm.workflow.document as document

LANGUAGE_MODELLING = "Learning Hierarchical Structures (DuSell & Chiang, 2022)"  # the category of `snakemake --report`


localrules:
    ptb_download,
    ptb_suites,
    ptb_select,
    ptb_report,


wildcard_constraints:
    ptb_model=r"lstm(-[1-9][0-9]*)?|jm-(hidden|learned)|r?ns-[1-9][0-9]*-[1-9][0-9]*",
    restart=r"[1-9][0-9]*",


rule ptb_download:
    output:
        ptb_dag.downloaded_ptb(),
    params:
        options=ptb_dag.download_options(),
    log:
        ptb_dag.DOWNLOAD_LOG,
    conda:
        CONDA_ENV
    shell:
        "stacklm ptb download {params.options} > {log} 2>&1"


rule ptb_suites:
    output:
        ptb_dag.downloaded_suites(SETTINGS.ptb),
    params:
        options=ptb_dag.suites_options(SETTINGS.ptb),
    log:
        ptb_dag.SUITES_LOG,
    conda:
        CONDA_ENV
    shell:
        "stacklm ptb suites {params.options} > {log} 2>&1"


rule ptb_train:
    input:
        data=SETTINGS.ptb.ptb_files(),
        cadence=ancient(settings_file("cadence")),  # how often progress lines come: a change of it reruns nothing
    output:
        model=ptb_dag.RUN_MODEL,
        curve=ptb_dag.RUN_CURVE,
    params:
        options=ptb_dag.train_options(SETTINGS.ptb),
        run_dir=ptb_dag.RUN_DIR,
        checkpoint=ptb_dag.CHECKPOINT,
        device=lambda wildcards, resources: common.device(resources.gpu),
    log:
        ptb_dag.TRAIN_LOG,
    wildcard_constraints:
        restart=ptb_dag.single_restarts(SETTINGS.resources.runs_per_job),
    threads: 1
    resources:
        gpu=0,
        runtime=lambda wildcards, attempt: dag.job_resources(SETTINGS.resources, SETTINGS.resources.ptb, attempt).runtime_min,
        mem_mb=lambda wildcards, attempt: dag.job_resources(SETTINGS.resources, SETTINGS.resources.ptb, attempt).mem_mb,
    conda:
        CONDA_ENV
    shell:
        "stacklm ptb train --model {wildcards.ptb_model} --restart {wildcards.restart} {params.options} --cadence {input.cadence}"
        " --checkpoint {params.checkpoint} --out {params.run_dir} --device {params.device} --threads {threads} > {log} 2>&1"


rule ptb_evaluate:
    input:
        ptb_dag.RUN_MODEL,
        SETTINGS.ptb.ptb_files(),
        SETTINGS.ptb.syntaxgym_files(),
    output:
        ptb_dag.RUN_METRICS,
    params:
        options=ptb_dag.evaluate_options(SETTINGS.ptb),
        run_dir=lambda wildcards, input: os.path.dirname(input[0]),
        device=lambda wildcards, resources: common.device(resources.gpu),
    log:
        ptb_dag.EVALUATE_LOG,
    wildcard_constraints:
        restart=ptb_dag.single_restarts(SETTINGS.resources.runs_per_job),
    threads: 1
    resources:
        gpu=0,
    conda:
        CONDA_ENV
    shell:
        "stacklm ptb evaluate --run {params.run_dir} {params.options} --out {output}"
        " --device {params.device} --threads {threads} > {log} 2>&1"


# resources.runs_per_job K > 1: each group of K restarts (ptb_dag.run_groups, in the order model x
# restart) trains in one process and is evaluated in another, one restart after another, sharing
# torch's import. Each restart keeps its own outputs, checkpoint and logs (the paths above) and
# equals the restart trained or evaluated alone; the group's log holds the process's own output.
for group in ptb_dag.run_groups(SETTINGS.ptb, SETTINGS.resources.runs_per_job):

    rule:
        name:
            group.rule("train")
        input:
            data=SETTINGS.ptb.ptb_files(),
            cadence=ancient(settings_file("cadence")),  # how often progress lines come: a change of it reruns nothing
        output:
            model=group.paths(ptb_dag.RUN_MODEL),
            curve=group.paths(ptb_dag.RUN_CURVE),
        params:
            runs=group.train_options,
            options=ptb_dag.train_options(SETTINGS.ptb),
            run_dirs=group.paths(ptb_dag.RUN_DIR),
            checkpoints=group.paths(ptb_dag.CHECKPOINT),
            device=lambda wildcards, resources: common.device(resources.gpu),
        log:
            runs=group.paths(ptb_dag.TRAIN_LOG),
            job=group.log(ptb_dag.TRAIN_GROUP_LOG),
        threads: 1
        resources:
            gpu=0,
            runtime=lambda wildcards, attempt, runs=len(group.runs): dag.job_resources(SETTINGS.resources, SETTINGS.resources.ptb, attempt, runs).runtime_min,
            mem_mb=lambda wildcards, attempt: dag.job_resources(SETTINGS.resources, SETTINGS.resources.ptb, attempt).mem_mb,
        conda:
            CONDA_ENV
        shell:
            "stacklm ptb train {params.runs} {params.options} --cadence {input.cadence} --checkpoint {params.checkpoints} --out {params.run_dirs}"
            " --log {log.runs} --device {params.device} --threads {threads} > {log.job} 2>&1"

    rule:
        name:
            group.rule("evaluate")
        input:
            group.paths(ptb_dag.RUN_MODEL),
            SETTINGS.ptb.ptb_files(),
            SETTINGS.ptb.syntaxgym_files(),
        output:
            group.paths(ptb_dag.RUN_METRICS),
        params:
            run_dirs=group.paths(ptb_dag.RUN_DIR),
            options=ptb_dag.evaluate_options(SETTINGS.ptb),
            device=lambda wildcards, resources: common.device(resources.gpu),
        log:
            runs=group.paths(ptb_dag.EVALUATE_LOG),
            job=group.log(ptb_dag.EVALUATE_GROUP_LOG),
        threads: 1
        resources:
            gpu=0,
        conda:
            CONDA_ENV
        shell:
            "stacklm ptb evaluate --run {params.run_dirs} {params.options} --out {output}"
            " --log {log.runs} --device {params.device} --threads {threads} > {log.job} 2>&1"


rule ptb_select:
    input:
        lambda wildcards: ptb_dag.run_files(SETTINGS.ptb, ptb_dag.RUN_CURVE, wildcards.ptb_model),
    output:
        ptb_dag.SELECTED,
    log:
        "logs/ptb/select/{ptb_model}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm ptb select --curves {input} --out {output} > {log} 2>&1"


rule ptb_report:
    input:
        metrics=ptb_dag.run_files(SETTINGS.ptb, ptb_dag.RUN_METRICS),
        selected=ptb_dag.selected_files(SETTINGS.ptb),
    output:
        metrics=ptb_dag.METRICS,
        tables=ptb_dag.TABLES,
        markdown=ptb_dag.MARKDOWN,
        figures=[
            report(path, caption="../report/ptb-sg-against-perplexity.rst", category=LANGUAGE_MODELLING, subcategory="Penn Treebank")
            for path in ptb_dag.figures()
        ],
    params:
        options=ptb_dag.report_options(SETTINGS.ptb),
        scale=document.ptb_report_options(config.get("preset"), SETTINGS),
        caption_scale=document.ptb_scale(config.get("preset"), SETTINGS.ptb),  # for the `snakemake --report` caption
    log:
        "logs/ptb/report.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm ptb report --metrics {input.metrics} --selected {input.selected} {params.options} --out-metrics {output.metrics}"
        " --tables {output.tables} --markdown {output.markdown} --figures {output.figures} {params.scale} > {log} 2>&1"


rule ptb_html:
    input:
        ptb_dag.MARKDOWN_TABLE,
    output:
        report(ptb_dag.PAGE, caption="../report/ptb-table.rst", category=LANGUAGE_MODELLING, subcategory="Penn Treebank"),
    params:
        caption_scale=document.ptb_scale(config.get("preset"), SETTINGS.ptb),
    wildcard_constraints:
        table="|".join(ptb_dag.TABLE_NAMES),
    log:
        "logs/ptb/html/{table}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm html --markdown {input} --title {wildcards.table:q} --out {output} > {log} 2>&1"
