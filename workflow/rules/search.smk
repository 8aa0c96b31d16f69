# Random search per task x architecture (DuSell & Cotterell (2025) App. D): `hparams` draws every trial's
# HP.json from a seed derived from (task, architecture, trial); `train` runs each trial for at
# most search.max_epochs; `select` keeps the trial with the lowest validation cross-entropy.
# A search of one trial (the small preset) trains no search model: its draw is the selection.
# Both rules are light and run hundreds of times: `stacklm hparams|select` imports
# stacklm.experiments.transformations.search only, never torch.

TRIALS = dag.trials(SETTINGS.search)


localrules:
    hparams,
    select,


rule hparams:
    input:
        settings=settings_file("hparams"),
    output:
        expand(dag.TRIAL_HPARAMS, trial=TRIALS, allow_missing=True),
    params:
        architecture=lambda wildcards: common.architecture_name(wildcards.architecture),
    log:
        "logs/hparams/{task}/{architecture}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm hparams --task {wildcards.task} --architecture {params.architecture:q}"
        " --settings {input.settings} --out {output} > {log} 2>&1"


rule select:
    input:
        settings=settings_file("select"),
        hparams=expand(dag.TRIAL_HPARAMS, trial=TRIALS, allow_missing=True),
        curves=expand(dag.RUN_CURVE, phase="search", index=dag.trained_trials(SETTINGS.search), allow_missing=True),
    output:
        dag.BEST_HPARAMS,
    log:
        "logs/select/{task}/{architecture}.log",
    conda:
        CONDA_ENV
    shell:
        "stacklm select --settings {input.settings} --hparams {input.hparams} --curves {input.curves}"
        " --out {output} > {log} 2>&1"
