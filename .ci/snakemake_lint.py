"""`make lint`'s workflow check: every `snakemake --lint` finding fails it, except one.

Not applicable here: "Specify a conda environment or container for each rule." Every job runs in
the project's own pinned environment (requirements.lock, installed by `make`), by design, so no
rule names a conda environment or a container.

Reads the text report: in Snakemake 9.27 `--lint json` prints text from the command line and fails
to serialise from the API. A run that fails without a lint in its output fails this check too.
"""

import re
import subprocess
import sys
from pathlib import Path

NOT_APPLICABLE = {"Specify a conda environment or container for each rule."}
ROOT = Path(__file__).resolve().parents[1]
WHERE = re.compile(r"^Lints for (.+):$")  # "Lints for rule eval (line 104, …/rules/eval.smk):"
TITLE = re.compile(r"^    \* (.+):$")  # "    * Mixed rules and functions in same snakefile.:"


def main() -> int:
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    found, where = [], None
    for line in run.stdout.splitlines():
        if m := WHERE.match(line):
            where = m[1]
        elif (m := TITLE.match(line)) and where:
            found.append((where, m[1]))
    if run.returncode != (1 if found else 0):
        print(run.stdout + f"snakemake --lint exited {run.returncode} without lints to show for it")
        return 1
    failing = [(where, title) for where, title in found if title not in NOT_APPLICABLE]
    for where, title in failing:
        print(f"{where}: {title}")
    print(f"snakemake --lint: {len(failing)} failing, {len(found) - len(failing)} not applicable (conda/container)")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
