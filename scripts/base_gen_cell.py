# Rule base_gen_cell: file the shared base-on-holdout cell under a rung (no recomputation).
import json
import shutil

from jacrl.io import atomic_path, write_text
from jacrl.workflow import logged

with logged(snakemake):
    cell = json.loads(open(snakemake.input.cell).read())
    cell["rung"] = snakemake.wildcards.rung
    write_text(snakemake.output.cell, json.dumps(cell, indent=1) + "\n")
    with atomic_path(snakemake.output.samples) as tmp:
        shutil.copyfile(snakemake.input.samples, tmp)
