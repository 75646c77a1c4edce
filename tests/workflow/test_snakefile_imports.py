"""The Snakefile's modules stay light: every `snakemake` start (a dry run, each job's planning on a cluster)
imports them, and scipy, torch or transformers would add seconds to each."""

import re
import subprocess
import sys

HEAVY = ("scipy", "torch", "transformers", "peft", "pandas", "matplotlib")


def test_the_modules_the_snakefile_imports_import_nothing_heavy(repo):
    rules = [repo / "Snakefile", *sorted((repo / "rules").glob("*.smk"))]
    modules = sorted({m for f in rules for m in re.findall(r"^from (jacrl[\w.]*) import", f.read_text(), re.M)})
    assert "jacrl.ladder.plan" in modules, modules
    code = f"import sys; import {', '.join(modules)}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert not [m for m in HEAVY if f"'{m}'" in loaded], loaded
