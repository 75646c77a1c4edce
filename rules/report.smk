# Stage 5: the report's items — `snakemake --report report.html` (or `make report`) gathers them.
#   ladder rows → the ladder page; metrics.jsonl → training curves; cells → completion pages.
#   Each is a job of seconds: they run where Snakemake runs (localrule), never as cluster jobs.


# Everything `snakemake --report` embeds; building it runs the ladder first where missing.
rule report_items:
    input:
        report_targets,
    localrule: True


rule report_ladder:
    input:
        layout.LADDER_ROWS,
    output:
        report(f"{REPORT}/ladder.html", category="Ladder", caption="../report/ladder_table.rst"),
    log:
        "logs/report/ladder.log",
    localrule: True
    resources:
        mem_mb=1000,
    params:
        allow_mixed_machines=CFG.ladder.allow_mixed_machines,
    script:
        "../scripts/report_ladder.py"


rule report_splits:
    input:
        f"{layout.RL}/splits.md",
    output:
        report(f"{REPORT}/splits.html", category="Data", caption="../report/splits.rst"),
    log:
        "logs/report/splits.log",
    localrule: True
    resources:
        mem_mb=500,
    script:
        "../scripts/report_splits.py"


rule report_mutation:
    input:
        f"{layout.RL}/mutation.md",
    output:
        report(f"{REPORT}/mutation.html", category="Data", caption="../report/mutation.rst"),
    log:
        "logs/report/mutation.log",
    localrule: True
    resources:
        mem_mb=500,
    script:
        "../scripts/report_mutation.py"


rule report_curves:
    input:
        layout.adapter("{rung}", "{model}", "{cond}"),
    output:
        report(
            f"{REPORT}/curves/r{{rung}}/{{model}}/{{cond}}.png",
            category="Training curves",
            subcategory="{model}",
            # condition first: the report may turn a later label with two values into a toggle
            labels={"condition": "{cond}", "rung": "r{rung}"},
            caption="../report/curves.rst",
        ),
    log:
        "logs/report/curves/r{rung}/{model}/{cond}.log",
    wildcard_constraints:
        cond=one_of([*TRAINED, *ARM_CONDITIONS]),
    localrule: True
    resources:
        mem_mb=1000,
    params:
        title=lambda wc: layout.adapter(wc.rung, wc.model, wc.cond),
    script:
        "../scripts/report_curves.py"


rule report_samples:
    input:
        unpack(cell_files),
    output:
        report(
            f"{REPORT}/samples/r{{rung}}/{{model}}/{{cond}}/{{split}}.html",
            category="Completions",
            subcategory="{model} · {split}",
            # condition first: the report may turn a later label with two values into a toggle
            labels={"condition": "{cond}", "rung": "r{rung}"},
            caption="../report/samples.rst",
        ),
    log:
        "logs/report/samples/r{rung}/{model}/{cond}/{split}.log",
    localrule: True
    resources:
        mem_mb=1000,
    script:
        "../scripts/report_samples.py"
