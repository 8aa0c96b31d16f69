# stacklm: one DAG from grammar to tables. Rules only wire files to `stacklm` commands.
from snakemake.utils import min_version

min_version("9.0")

configfile: "config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/settings.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/tracking.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/cfl.smk"
include: "workflow/rules/ptb.smk"


rule all:
    input:
        all_targets(),


onsuccess:
    print(pipeline.finished_message(SETTINGS))
