# Every final run's metrics.parquet -> results/metrics.parquet -> the LaTeX tables in the
# layout of DuSell & Cotterell (2025), Tables 1-7, Figure 3, and a standalone document (report.tex)
# including them and the CFL figures and PTB tables and figure where those experiments run. Its title
# page and every caption state the scale (stacklm.workflow.document: preset, data, examples, epochs,
# seeds), and so do the captions of `snakemake --report` (params.caption_scale in workflow/report/*.rst). The report reads Parquet only: MLflow is a mirror for browsing.
import stacklm.workflow.document as document

REPORT = dag.report_outputs(SETTINGS)
# `snakemake --report`: each table (as an HTML page) and Figure 3, grouped by paper and task.
FRUIT = "Bearing Syntactic Fruit (DuSell & Cotterell, 2025)"


localrules:
    aggregate,
    report,
    html,
    curves,


rule aggregate:
    input:
        dag.final_metrics(SETTINGS),
    output:
        dag.METRICS,
    log:
        "logs/aggregate.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm aggregate --out {output} {input} > {log} 2>&1"


rule report:
    input:
        metrics=dag.METRICS,
        settings=settings_file("report"),
        parts=document.document_inputs(config.get("preset"), SETTINGS),
    output:
        tables=REPORT["tables"],
        markdown=REPORT["markdown"],
        document=REPORT["document"],
        figures=[
            report(path, caption="../report/figure3.rst", category=FRUIT, subcategory="Figure 3")
            for path in REPORT["figures"]
        ],
    params:
        document=document.report_options(config.get("preset"), SETTINGS),
        caption_scale=document.transformations_scale(config.get("preset"), SETTINGS),  # for the `snakemake --report` caption
    log:
        "logs/report.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm report --metrics {input.metrics} --settings {input.settings} --tables {output.tables}"
        " --markdown {output.markdown} --document {output.document} --figures {output.figures} {params.document} > {log} 2>&1"


rule html:
    input:
        dag.REPORT_MARKDOWN,
    output:
        report(dag.REPORT_HTML, caption="../report/table.rst", category=FRUIT, subcategory="{task}"),
    params:
        caption_scale=document.transformations_scale(config.get("preset"), SETTINGS),
    log:
        "logs/html/{task}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm html --markdown {input} --title {wildcards.task} --out {output} > {log} 2>&1"


rule curves:
    input:
        lambda wildcards: dag.final_curves(SETTINGS, wildcards.task),
    output:
        curves=dag.CURVES,
        figures=[
            report(path, caption="../report/curves.rst", category=FRUIT, subcategory="{task}")
            for path in dag.curve_figures("{task}")
        ],
    params:
        caption_scale=document.transformations_scale(config.get("preset"), SETTINGS),
    log:
        "logs/curves/{task}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm curves --out {output.curves} --figures {output.figures} -- {input} > {log} 2>&1"
