# Every final run's metrics.parquet -> results/metrics.parquet -> the LaTeX tables in the
# layout of seed 000 Tables 1-7, a standalone document including them, and Figure 3. The
# report reads Parquet only: MLflow is a mirror for browsing.

REPORT = dag.report_outputs(SETTINGS)


localrules:
    aggregate,
    report,


rule aggregate:
    input:
        dag.final_metrics(SETTINGS),
    output:
        dag.METRICS,
    log:
        "logs/aggregate.log",
    shell:
        "stacklm aggregate --out {output} {input} > {log} 2>&1"


rule report:
    input:
        metrics=dag.METRICS,
        settings=dag.SETTINGS_JSON,
    output:
        tables=REPORT["tables"],
        markdown=REPORT["markdown"],
        document=REPORT["document"],
        figures=REPORT["figures"],
    log:
        "logs/report.log",
    shell:
        "stacklm report --metrics {input.metrics} --settings {input.settings} --tables {output.tables}"
        " --markdown {output.markdown} --document {output.document} --figures {output.figures} > {log} 2>&1"
