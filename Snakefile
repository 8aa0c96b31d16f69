# stacklm: one DAG from grammar to tables. Rules only wire files to `stacklm` commands.
from snakemake.utils import min_version

min_version("9.0")

configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"


rule all:
    input:
        all_targets(),
