# Validation and lookups only: every decision lives in `stacklm`, where tests reach it.
from snakemake.utils import validate

import stacklm.workflow

validate(config, "../schemas/config.schema.yaml")
SETTINGS = stacklm.workflow.resolve(config)


def all_targets():
    return stacklm.workflow.all_targets(SETTINGS)
