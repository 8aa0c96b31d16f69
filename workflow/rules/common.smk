# Validation and lookups only: every decision lives in `stacklm.workflow`, where tests reach it.
import json
import os

import stacklm.workflow as dag

# `config` is config.yaml with the user's keys merged in; `overwrite_config` holds those keys
# alone (the --configfile files, then --config), so that they win over the preset's. The
# resolved settings are checked against ../schemas/config.schema.yaml and what no schema can
# express, every bad value named by its key, before any job runs.
SETTINGS = dag.snakefile_settings(config, workflow.config_settings.overwrite_config)
# One conda env for every job, all of which run stacklm (the path is relative to this folder).
CONDA_ENV = "../../envs/stacklm.yaml"


wildcard_constraints:
    task=r"[a-z0-9-]+",
    architecture=r"[^/]+",
    phase="|".join(dag.PHASES),
    index=r"\d+",
    trial=r"\d+",
    extension="|".join(dag.FIGURE_EXTENSIONS),


def all_targets():
    return dag.all_targets(SETTINGS)

