"""Small eval cells, samples and training metrics in the shapes the workflow writes, and an HTML
reader that gives back what a browser would show (tables as rows of cell text)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from fixtures.machine import ZEN4

TASKS = ["t0", "t1", "t2", "t3"]


def make_cell(rung, cond, split, passes, policy=None, flagged=0, isolation="strict"):
    """A cell record as `evaluate_cell` writes it (per-task entries included)."""
    policy = policy or {}
    per_task = {
        t: {
            "family": "fa" if i < 2 else "fb",
            "pass1": int(i in passes),
            "n": 2,
            "c": int(i in passes),
            "passk": float(i in passes),
            "verified": int(i in passes),
            "policy_n": 4 if policy else 0,
            "policy_c": policy.get(i, 0),
            "idiom": 0.25,
        }
        for i, t in enumerate(TASKS)
    }
    p, n = len(passes), len(TASKS)
    return {
        "rung": rung,
        "model": "tiny",
        "cond": cond,
        "split": split,
        "tasks": n,
        "samples": 2,
        "k": 2,
        "temperature": 0.8,
        "policy_temperature": 0.3 if policy else None,
        "runs": p,
        "pass1": p,
        "near_pass": 0,
        "norm_pass": p,
        "verified": p,
        "run_pct": 100 * p / n,
        "pass1_pct": 100 * p / n,
        "passk_pct": 100 * p / n,
        "verified_pct": 100 * p / n,
        "near_pct": 0.0,
        "norm_pct": 100 * p / n,
        "policy_samples": 4 if policy else 0,
        "policy_pass_pct": 100 * sum(policy.values()) / (4 * n) if policy else None,
        "avg_osim": 0.5,
        "avg_idiom": 0.25,
        "trunc_rate": 0.0,
        "passes": p,
        "flagged_passes": flagged,
        "flagged_pass_share": flagged / p if p else 0.0,
        "isolation": isolation,
        "by_family": {},
        "per_task": per_task,
        "config_hash": "abc",
        "code_version": "test",
        "machine": ZEN4,
    }


@pytest.fixture
def cells():
    return [
        make_cell("1", "base", "gen", {0}),
        make_cell("1", "sft", "gen", {0, 1}, policy={0: 2, 1: 3}),
        make_cell("1", "sft_grpo", "gen", {0, 1, 2}, policy={0: 4, 1: 3, 2: 2}, flagged=1, isolation="weak"),
        make_cell("1", "base", "mem", {1}),
        make_cell("1", "sft", "mem", {0, 1, 2, 3}),
    ]


def score(**kw):
    base = {
        "score": 0.0,
        "scheme": "tiered",
        "compiles": False,
        "runs": False,
        "exact": False,
        "norm_exact": False,
        "output_ratio": 0.0,
        "line_frac": 0.0,
        "idiom": 0.0,
        "body_sim": 0.0,
        "timed_out": False,
        "killed": "",
        "exit_code": None,
        "stderr_tail": "",
        "extract": "fenced",
        "rejected": "",
        "task_id": "t0",
        "cached": False,
        "isolation": "strict",
    }
    return {**base, **kw}


HOSTILE = 'print("<b>bold</b>");\n</pre></details></td></tr><script>window.__pwned = 1;</script> & &amp;'


@pytest.fixture
def samples():
    """One record per outcome, a flagged pass, and a completion made of markup."""
    return [
        {
            "task_id": "t0",
            "family": "fa",
            "kind": "greedy",
            "index": 0,
            "truncated": False,
            "tokens": 12,
            "completion": "```jac\nprint(1);\n```",
            "score": score(score=1.0, compiles=True, runs=True, exact=True, output_ratio=1.0),
        },
        {
            "task_id": "t0",
            "family": "fa",
            "kind": "sample",
            "index": 1,
            "truncated": True,
            "tokens": 160,
            "completion": HOSTILE,
            "score": score(score=0.4, compiles=True, runs=True, output_ratio=0.95, stderr_tail="Error: <stderr>"),
        },
        {
            "task_id": "t1",
            "family": "fb",
            "kind": "policy",
            "index": 0,
            "truncated": False,
            "tokens": 9,
            "completion": "import os;",
            "score": score(
                score=1.0, compiles=True, runs=True, exact=True, output_ratio=1.0, flags=["file", "module:os"]
            ),
        },
        {
            "task_id": "t1",
            "family": "fb",
            "kind": "sample",
            "index": 0,
            "truncated": False,
            "tokens": 3,
            "completion": "",
            "score": score(rejected="no body found"),
        },
        {
            "task_id": "t2",
            "family": "fb",
            "kind": "greedy",
            "index": 0,
            "truncated": False,
            "tokens": 5,
            "completion": "x = ;",
            "score": score(),
        },
    ]


def grpo_rows():
    """GRPO metrics rows: step 2 trained nothing (no loss keys), step 3 lost a non-finite value."""
    rows = []
    for step in (1, 2, 3, 4):
        r = {
            "step": step,
            "lr": 1e-5,
            "reward/mean": 0.1 * step,
            "reward/std": 0.05,
            "reward/pass_rate": 0.25 * (step > 2),
            "reward/runs_rate": 0.5,
            "groups/zero_variance_frac": 0.5,
            "samples/truncated_frac": 0.125,
            "time/sample_s": 1.0,
            "tokens_per_s": 100.0,
            "mem/rss_mb": 900.0 + step,
        }
        if step != 2:
            r.update(
                {
                    "loss/rl/loss": -0.01 * step,
                    "loss/rl/mismatch_kl": 1e-4,
                    "loss/ref_kl/loss": 1e-3,
                    "loss/total": 0.002,
                    "kl/reference": 2e-3 * step,
                }
            )
        else:
            r["skipped"] = "every group had zero advantage"
        if step == 3:
            r["kl/reference"] = None
        rows.append(r)
    return rows


class Page(HTMLParser):
    """What a browser would show: every table as rows of cell text, script bodies, and pre texts."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.scripts: list[str] = []
        self.pres: list[str] = []
        self._stack: list[str] = []
        self._table = None
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        self._stack.append(tag)
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("id") or f"table{len(self.tables)}", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag in ("script", "pre"):
            getattr(self, f"{tag}s").append("")

    def handle_endtag(self, tag):
        while self._stack and self._stack.pop() != tag:
            pass
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self._table[-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if "script" in self._stack:
            self.scripts[-1] += data
        if "pre" in self._stack:
            self.pres[-1] += data
