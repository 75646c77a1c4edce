# Stage 5: the report's items — `snakemake --report report.html` (or `make report`) gathers them.
#   ladder rows → the ladder page; metrics.jsonl → training curves; cells → completion pages.
#   Each is a job of seconds: they run where Snakemake runs (localrule), never as cluster jobs.

REPORT = "results/report"


def curve_figures():
    """One figure per adapter the ladder trains (every condition but `base`)."""
    conds = [c for c in CFG.ladder.conditions if c in ADAPTER_CONDITIONS]
    return expand(f"{REPORT}/curves/r{{rung}}/{{model}}/{{cond}}.png",
                  rung=CFG.ladder_rungs, model=CFG.ladder_models, cond=conds)


def sample_pages():
    """One completions page per ladder cell."""
    return expand(f"{REPORT}/samples/r{{rung}}/{{model}}/{{cond}}/{{split}}.html",
                  rung=CFG.ladder_rungs, model=CFG.ladder_models, cond=CFG.ladder.conditions, split=CFG.ladder.splits)


def report_targets():
    return [f"{REPORT}/ladder.html", f"{REPORT}/splits.html", "results/ladder.png", *curve_figures(), *sample_pages()]


rule report_items:
    # Everything `snakemake --report` embeds; building it runs the ladder first where missing.
    localrule: True
    input:
        report_targets(),


rule report_ladder:
    localrule: True
    input:
        "results/rl_ladder.jsonl",
    output:
        report(f"{REPORT}/ladder.html", category="Ladder", caption="../report/ladder_table.rst"),
    log:
        "logs/report/ladder.log",
    resources:
        mem_mb=1000,
    script:
        "../scripts/report_ladder.py"


rule report_splits:
    localrule: True
    input:
        f"{RL}/splits.md",
    output:
        report(f"{REPORT}/splits.html", category="Data", caption="../report/splits.rst"),
    log:
        "logs/report/splits.log",
    resources:
        mem_mb=500,
    script:
        "../scripts/report_splits.py"


rule report_curves:
    localrule: True
    input:
        "adapters/r{rung}/{model}/{cond}",
    output:
        report(
            f"{REPORT}/curves/r{{rung}}/{{model}}/{{cond}}.png",
            category="Training curves",
            subcategory="{model}",
            # condition first: the report may turn a later label with two values into a toggle
            labels={"condition": "{cond}", "rung": "r{rung}"},
            caption="../report/curves.rst",
        ),
    wildcard_constraints:
        cond="|".join(ADAPTER_CONDITIONS),
    params:
        title=lambda wc: f"adapters/r{wc.rung}/{wc.model}/{wc.cond}",
    log:
        "logs/report/curves/r{rung}/{model}/{cond}.log",
    resources:
        mem_mb=1000,
    script:
        "../scripts/report_curves.py"


rule report_samples:
    localrule: True
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
    resources:
        mem_mb=1000,
    script:
        "../scripts/report_samples.py"
