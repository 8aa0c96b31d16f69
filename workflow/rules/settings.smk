# The resolved settings (preset applied) as one JSON file that every job reads. A change of
# config rewrites it, and with it every result downstream.


localrules:
    settings,


rule settings:
    output:
        dag.SETTINGS_JSON,
    params:
        settings=json.dumps(SETTINGS, sort_keys=True),
    log:
        "logs/settings.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm settings --json {params.settings:q} --out {output} > {log} 2>&1"
