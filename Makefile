# jacrl — the entry points are `make ladder` (or `make ladder-smart`) and `make test`; they bootstrap .venv first.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all

# python3.12 from PATH, else a pyenv-installed 3.12 (whose shim may not be active).
PYTHON ?= $(shell for p in python3.12 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && { echo $$p; break; }; done)

.PHONY: ladder ladder-smart report test test-slow test-slurm lint dryrun lock clean-results venv extras

venv: $(STAMP)

$(STAMP): requirements.lock pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: python3.12 not found (jaclang 0.16.7 needs Python >= 3.12)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

ladder: $(STAMP)
	$(BIN)/snakemake --profile profiles/default --cores $(CORES) results/rl_ladder.jsonl results/ladder.md
	$(BIN)/python -m jacrl.ladder timings benchmarks

# The ladder as the source recommends running it (ladder.plan: smart): a smoke gate, base and sft on
# every rung, then GRPO (every arm of grpo_arms) only at each model's elbow and one raw_grpo at rung 1.
# The plan and its reasons: results/plan.json and the head of results/ladder.md.
ladder-smart: $(STAMP)
	$(BIN)/snakemake --profile profiles/default --cores $(CORES) results/rl_ladder.jsonl results/ladder.md --config 'ladder={"plan": "smart"}'
	$(BIN)/python -m jacrl.ladder timings benchmarks

# The report: builds every report item first (and so the ladder, where missing), then bundles them.
report: $(STAMP)
	$(BIN)/snakemake --profile profiles/default --cores $(CORES) report_items
	$(BIN)/snakemake --report report.html
	@echo "report.html written: open it in a browser (one self-contained file)"

# The optional extras, kept out of the default install: interop (mlx-lm-lora, for
# `python -m jacrl.interop`), bench (trl and mlx-lm-lora, for bench/), env and datasets (verifiers,
# datasets and pyarrow: the verifiers environment and the dataset export) and the live-curve trackers
# (tensorboard, mlflow: `tracking:`; their tests skip without them); the lock's pins hold.
extras: $(STAMP)
	$(BIN)/python -m pip install --quiet -c requirements.lock --no-build-isolation -e '.[interop,bench,tensorboard,mlflow,env,datasets]'

# On every core (pytest-xdist), a test file to a worker: a module's fixtures are built once.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --dist worksteal

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# Style and workflow lint: ruff (lint, format), snakefmt, and every `snakemake --lint` finding but
# the conda/container one (.ci/snakemake_lint.py says why). Settings: pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile rules/
	$(BIN)/python .ci/snakemake_lint.py

# A slice of the DAG through a real single-node SLURM that scripts/slurm-local/up stands up on this
# machine (root, Debian/Ubuntu packages, a few minutes); not part of `make test`.
test-slurm: $(STAMP)
	scripts/slurm-local/up
	$(BIN)/python scripts/slurm-local/check.py

dryrun: $(STAMP)
	$(BIN)/snakemake -n results/rl_ladder.jsonl

# Re-pin requirements.lock from pyproject.toml (needs `uv` on PATH); the lock carries no index URL.
lock:
	uv pip compile pyproject.toml --extra test --extra slurm --extra lint --universal --python-version 3.12 --no-header --no-annotate -o requirements.lock
	@! grep -nE 'index[-]url|://' requirements.lock || { echo "error: requirements.lock names a registry"; exit 1; }

clean-results:
	rm -rf results/ adapters/ .snakemake/
