# The resolved settings (preset applied), one JSON file per kind of job holding only the
# sections it reads (stacklm.workflow.settings.SETTINGS_READ): a change of config rewrites the files
# whose sections changed, and reruns only the jobs that read them.


localrules:
    settings,


rule settings:
    output:
        SETTINGS_FILE,
    params:
        settings=lambda wildcards: json.dumps(settings_for(SETTINGS, wildcards.reader), sort_keys=True),
    wildcard_constraints:
        reader="|".join(SETTINGS_READ),
    log:
        "logs/settings/{reader}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm settings --json {params.settings:q} --out {output} > {log} 2>&1"
