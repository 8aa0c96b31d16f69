# Validation and lookups only: every decision lives in `stacklm.workflow` (the settings, the
# whole DAG) and `stacklm.experiments` (each experiment's paths and lookups), where tests reach it.
import json
import os

import stacklm.experiments.cfl.dag as cfl_dag
import stacklm.experiments.common as common
import stacklm.experiments.transformations.dag as dag
import stacklm.experiments.transformations.data as data_stage
import stacklm.workflow.dag as pipeline
from stacklm.workflow.settings import SETTINGS_FILE, SETTINGS_READ, settings_file, settings_for, snakefile_settings

# `config` is config.yaml with the user's keys merged in; `overwrite_config` holds those keys
# alone (the --configfile files, then --config), so that they win over the preset's. The
# resolved settings are checked against ../schemas/config.schema.yaml and built into one typed
# tree (stacklm.workflow.settings.ResolvedSettings: SETTINGS.search.trials, SETTINGS.cfl), every
# bad value named by its key, before any job runs.
SETTINGS = snakefile_settings(config, workflow.config_settings.overwrite_config)
# One conda env for every job, all of which run stacklm (the path is relative to this folder).
CONDA_ENV = "../../envs/stacklm.yaml"


wildcard_constraints:
    task=r"[a-z0-9-]+",
    architecture=r"[^/]+",
    phase="|".join(dag.PHASES),
    index=r"\d+",
    trial=r"\d+",
    extension="|".join(common.FIGURE_EXTENSIONS),


def all_targets():
    return pipeline.all_targets(SETTINGS)

