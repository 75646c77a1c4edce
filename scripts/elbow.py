# Checkpoint elbow: each model's elbow on its SFT curve and the cells the smart plan builds → results/plan.json.
from jacrl.ladder.plan import PlanSpec, write_smart_plan
from jacrl.progress import summary
from jacrl.workflow.job import logged

with logged(snakemake):
    plan = write_smart_plan(
        PlanSpec(**snakemake.params.spec), snakemake.input[0], snakemake.input[1:], snakemake.output[0]
    )
    for e in plan["elbows"]:
        summary(f"{e['model']}: elbow r{e['rung']} ({e['split']}, placed by {e['metric']})")
    summary(f"{plan['jobs']['smart']['total']} model jobs of the full grid's {plan['jobs']['full']['total']}")
