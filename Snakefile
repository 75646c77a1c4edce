# jacrl — the Jac GRPO ladder as one DAG.
#   drivers → tasks → splits → rungs → (models, adapters) → eval cells → rl_ladder.jsonl → pivot
#   → report items (`snakemake --report report.html`)
from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/tasks.smk"
include: "rules/models.smk"
include: "rules/train.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


rule all:
    input:
        all_targets(),
        report_targets(),
    default_target: True
