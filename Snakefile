# jacrl — the Jac GRPO ladder as one DAG.
#   drivers → tasks → splits → rungs → (models, adapters) → eval cells → rl_ladder.jsonl → pivot
#   → report items (`snakemake --report report.html`)
# `ladder.plan: smart` stages the cells behind two checkpoints (rules/plan.smk): smoke gate → SFT
# curve → GRPO at the elbow.
from snakemake.utils import min_version

min_version("9.0")


# The bundled default, found from the workflow's folder (so `-d elsewhere` works); --configfile
# files are merged over it.
configfile: f"{workflow.basedir}/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/tasks.smk"
include: "rules/models.smk"
include: "rules/train.smk"
include: "rules/plan.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


# Jobs of a few seconds run where Snakemake runs, not as cluster jobs; registry_model fetches
# packages, and cluster nodes often have no network.
localrules:
    all,
    splits,
    valid_split,
    rung,
    rl_ladder,
    show_ladder,
    smoke,
    elbow,
    registry_model,


rule all:
    default_target: True
    input:
        all_targets(),
        report_targets,
