# Random search per task x architecture (seed 000 App. D): `hparams` draws every trial's
# HP.json from a seed derived from (task, architecture, trial); `train` runs each trial for at
# most search.max_epochs; `select` keeps the trial with the lowest validation cross-entropy.
# Both are light and run hundreds of times: `python -m stacklm.workflow` is `stacklm` without
# importing torch and MLflow, which every `stacklm` call pays for.

TRIALS = dag.trials(SETTINGS)


localrules:
    hparams,
    select,


rule hparams:
    input:
        settings=dag.SETTINGS_JSON,
    output:
        expand(dag.TRIAL_HPARAMS, trial=TRIALS, allow_missing=True),
    params:
        architecture=lambda wildcards: dag.architecture_name(wildcards.architecture),
    log:
        "logs/hparams/{task}/{architecture}.log",
    shell:
        "python -m stacklm.workflow hparams --task {wildcards.task} --architecture {params.architecture:q}"
        " --settings {input.settings} --out {output} > {log} 2>&1"


rule select:
    input:
        settings=dag.SETTINGS_JSON,
        hparams=expand(dag.TRIAL_HPARAMS, trial=TRIALS, allow_missing=True),
        curves=expand(dag.RUN_CURVE, phase="search", index=TRIALS, allow_missing=True),
    output:
        dag.BEST_HPARAMS,
    log:
        "logs/select/{task}/{architecture}.log",
    shell:
        "python -m stacklm.workflow select --settings {input.settings} --hparams {input.hparams} --curves {input.curves}"
        " --out {output} > {log} 2>&1"
