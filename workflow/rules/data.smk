# Data stage (docs/design/transformations-data.md): upstream files (fetched, repaired) -> the four splits -> summaries.
# Wiring only; the lookups live in stacklm.experiments.transformations.data. Rule data_X runs `stacklm data X`.


rule data_fetch:
    output:
        data_stage.UPSTREAM_RAW,
    params:
        options=data_stage.fetch_options(SETTINGS.data),
    wildcard_constraints:
        split="train|validation|test|generalization",
    log:
        "logs/data/fetch/{task}/{split}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm data fetch --task {wildcards.task} --split {wildcards.split} {params.options} --out {output} > {log} 2>&1"


rule data_repair:
    input:
        data_stage.UPSTREAM_RAW,
    output:
        data_stage.UPSTREAM_REPAIRED,
    wildcard_constraints:
        split="train|validation|test|generalization",
    log:
        "logs/data/repair/{task}/{split}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm data repair --task {wildcards.task} --input {input} --out {output} > {log} 2>&1"


rule data_generate:
    input:
        unpack(lambda wildcards: data_stage.generate_inputs(SETTINGS.data, wildcards.task)),
    output:
        splits=data_stage.data_files("{task}"),
        counts=data_stage.CONSTRUCTION,
    params:
        options=lambda wildcards: data_stage.generate_options(SETTINGS.data, wildcards.task),
        folder=data_stage.DATA_DIR,
    log:
        "logs/data/generate/{task}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm data generate --task {wildcards.task} {params.options} --out {params.folder} > {log} 2>&1"


rule data_summarize:
    input:
        splits=data_stage.data_files("{task}"),
        counts=data_stage.CONSTRUCTION,
    output:
        data_stage.SUMMARY,
    params:
        folder=lambda wildcards, input: os.path.dirname(input.splits[0]),
    log:
        "logs/data/summarize/{task}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm data summarize --task {wildcards.task} --data {params.folder} --out {output} > {log} 2>&1"


rule data_report:
    input:
        expand(data_stage.SUMMARY, task=SETTINGS.tasks),
    output:
        report(data_stage.REPORT, caption="../report/data.rst", category="Data"),
    log:
        "logs/data/report.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm data report {input} --out {output} 2> {log}"
