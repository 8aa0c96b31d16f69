# Validation and lookups only: every decision lives in `stacklm.workflow`, where tests reach it.
import json
import os

from snakemake.utils import validate

import stacklm.workflow as dag

validate(config, "../schemas/config.schema.yaml")
# The preset is applied here, after the schema ran; `resolve` re-checks what it changed and
# what no schema can (architecture names), naming the key, before any job runs.
SETTINGS = dag.resolve(config)
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

