# Random search per task x architecture (DuSell & Cotterell (2025) App. D): `hparams` draws every trial's
# HP.json from a seed derived from (task, architecture, trial); `train` runs each trial for at
# most search.max_epochs; `select` keeps the trial with the lowest validation cross-entropy.
# A search of one trial (the small preset) trains no search model: its draw is the selection.
# Both rules are light and run hundreds of times: `stacklm hparams|select` imports
# stacklm.experiments.transformations.search only, never torch.
# With resources.runs_per_job K > 1, the rules at the end draw and select K architectures' trials to a job instead.

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
        dag.HPARAMS_LOG,
    wildcard_constraints:
        architecture=dag.single_architectures(SETTINGS.resources),
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
        dag.SELECT_LOG,
    wildcard_constraints:
        architecture=dag.single_architectures(SETTINGS.resources),
    conda:
        CONDA_ENV
    shell:
        "stacklm select --settings {input.settings} --hparams {input.hparams} --curves {input.curves}"
        " --out {output} > {log} 2>&1"


# resources.runs_per_job K > 1: the trials of each group of K architectures (dag.architecture_groups, in
# the order of `architectures`) are drawn in one process and selected among in another, one
# architecture after another, for every task. Each trial keeps its trial<k>.json and each
# architecture its best.json (the paths above); the group's log holds the process's output. The
# small preset (K = 17): 119 hparams and 119 select jobs become 7 and 7, of a fraction of a second each.
for group in dag.architecture_groups(SETTINGS):

    rule:
        name:
            group.rule("hparams")
        localrule: True
        input:
            settings=settings_file("hparams"),
        output:
            group.trial_paths(),
        params:
            architectures=group.architecture_options,
        log:
            group.log(dag.HPARAMS_GROUP_LOG),
        conda:
            CONDA_ENV
        shell:
            "stacklm hparams --task {wildcards.task} {params.architectures}"
            " --settings {input.settings} --out {output} > {log} 2>&1"

    rule:
        name:
            group.rule("select")
        localrule: True
        input:
            settings=settings_file("select"),
            hparams=group.trial_paths(),
            curves=group.curve_paths(),
        output:
            group.best_paths(),
        params:
            trials=group.select_options,
        log:
            group.log(dag.SELECT_GROUP_LOG),
        conda:
            CONDA_ENV
        shell:
            "stacklm select --settings {input.settings} {params.trials} --out {output} > {log} 2>&1"
