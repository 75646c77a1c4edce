"""Run result + body → a score with its breakdown, under `dense_v2` or `tiered`.

dense_v2 (the source document's): w.compiles·compiles + w.runs·runs + w.output·output
+ w.idiom·idiom + w.body_sim·body_sim, where output = 1 on an exact stdout match and
near_miss·difflib ratio otherwise, output and idiom count only when the program runs, and
body_sim is computed for every completion so an all-failing group still has variance.

tiered (monotone): exact pass → exact; runs with wrong output → runs_base + runs_lines·
line_frac + runs_sim·body_sim; parses only → compiles_base + compiles_sim·body_sim; else
fail_sim·body_sim. Each tier's ceiling is below the next tier's floor (validated in config).
With `floor_share` set, the two floors are scaled by min(1, share / floor_share), share = the
body's code tokens over the gold body's: GRPO at a high learning rate found that a two-line stub
(`return other;`) parses or runs far more often than an attempt at the whole unit, and a whole
floor for it outbid every honest failure (docs/results/smollm2-cpu-smart/README.md).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, replace

from jacrl.reward.audit import audit_flags
from jacrl.reward.config import DenseV2Weights, RewardConfig, TieredWeights
from jacrl.reward.extract import normalize_body
from jacrl.reward.lexer import mask
from jacrl.reward.runner import RunResult

# Object-spatial tokens, weighted by how distinctly Jac they are (issue 3 / the source README).
IDIOM_TOKENS: tuple[tuple[re.Pattern, int], ...] = tuple(
    (re.compile(p), w)
    for p, w in [
        (r"\bvisit\b", 3),
        (r"-->", 3),
        (r"<--", 3),
        (r"\+\+>", 3),
        (r"<\+\+", 3),
        (r"\bspawn\b", 3),
        (r"\bdisengage\b", 3),
        (r"\breport\b", 2),
        (r"\bhere\b", 2),
        (r"\broot\b", 2),
        (r"\bwalker\b", 2),
        (r"\bnode\b", 2),
        (r"\bedge\b", 2),
        (r"\bwith\s+entry\b", 1),
        (r"\bwith\s+exit\b", 1),
        (r"\bcan\b", 1),
        (r"\bobj\b", 1),
        (r"\bhas\b", 1),
    ]
)


@dataclass(frozen=True)
class Score:
    """One completion's score and everything it was computed from (written to audit files)."""

    score: float
    scheme: str
    compiles: bool = False
    runs: bool = False
    exact: bool = False
    norm_exact: bool = False  # stdout equals expected once every whitespace run is one space
    output_ratio: float = 0.0  # difflib ratio(stdout, expected), both stripped
    line_frac: float = 0.0  # share of expected lines matched in place
    idiom: float = 0.0  # min(weighted OSP token count / norm, 1), of the body (0 unless it runs)
    body_sim: float = 0.0  # difflib ratio(body, gold body), normalized
    share: float = 0.0  # the body's code tokens over the gold body's (comments and string contents not counted)
    timed_out: bool = False
    killed: str = ""
    exit_code: int | None = None
    stderr_tail: str = ""
    extract: str = ""  # how the body was found (see extract.py)
    rejected: str = ""  # why the body was not run ("" when it was)
    task_id: str = ""
    cached: bool = False
    isolation: str = ""  # the sandbox level the scorer ran with: "strict" or "weak" (config `reward.isolation`)
    flags: tuple[str, ...] = ()  # risky capabilities the body uses (vocabulary: audit.FLAGS)
    infra: str = ""  # the machine failed the run, not the completion: why (reward/infra.py); never cached or trained on
    gold_cleared: bool = False  # the failure looked like the machine's but the task's gold passed beside it: its own

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Score:
        return cls(**{k: tuple(d[k]) if k == "flags" else d[k] for k in cls.__dataclass_fields__ if k in d})


def idiom_score(body: str, norm: float = 8.0) -> float:
    """Weighted object-spatial token count of the body's code (comments and strings excluded)."""
    code = mask(body).text
    total = sum(w * len(p.findall(code)) for p, w in IDIOM_TOKENS)
    return min(total / norm, 1.0)


CODE_TOKEN = re.compile(r"\w+|[^\w\s]")


def code_share(body: str, gold: str) -> float:
    """The body's code tokens (words and punctuation; comments and string contents masked, so
    padding with either adds nothing) over the gold body's."""
    gold_tokens = len(CODE_TOKEN.findall(mask(gold).text))
    return len(CODE_TOKEN.findall(mask(body).text)) / gold_tokens if gold_tokens else 1.0


def body_similarity(body: str, gold: str) -> float:
    a, b = normalize_body(body), normalize_body(gold)
    if not a or not b:
        return 0.0
    return difflib.SequenceMatcher(None, a, b).ratio()


def output_ratio(stdout: str, expected: str) -> float:
    out, exp = stdout.strip(), expected.strip()
    if out == exp:
        return 1.0
    sm = difflib.SequenceMatcher(None, out, exp)
    if len(out) > 4 * len(exp) + 256:  # difflib is quadratic; the length bound is already tiny
        return sm.real_quick_ratio()
    return sm.ratio()


def line_fraction(stdout: str, expected: str) -> float:
    out, exp = stdout.strip().split("\n"), expected.strip().split("\n")
    return sum(1 for i, line in enumerate(exp) if i < len(out) and out[i] == line) / len(exp)


def dense_v2(
    w: DenseV2Weights, *, compiles: bool, runs: bool, exact: bool, ratio: float, idiom: float, sim: float
) -> float:
    output = (1.0 if exact else w.near_miss * ratio) if runs else 0.0
    return (
        w.compiles * compiles
        + w.runs * runs
        + w.output * output
        + w.idiom * (idiom if runs else 0.0)
        + w.body_sim * sim
    )


def tiered(
    w: TieredWeights, *, compiles: bool, runs: bool, exact: bool, line_frac: float, sim: float, share: float = 1.0
) -> float:
    if runs and exact:
        return w.exact
    floor = min(1.0, share / w.floor_share) if w.floor_share else 1.0
    if runs:
        return floor * w.runs_base + w.runs_lines * line_frac + w.runs_sim * sim
    if compiles:
        return floor * w.compiles_base + w.compiles_sim * sim
    return w.fail_sim * sim


def score_run(
    cfg: RewardConfig, *, body: str, gold: str, expected: str, run: RunResult, extract: str = "", task_id: str = ""
) -> Score:
    """The score of a body whose spliced program produced `run`."""
    runs = run.runs
    tail = run.stderr[-cfg.stderr_tail_chars :] if cfg.stderr_tail_chars else ""
    of_run = Score(
        score=0.0,
        scheme=cfg.scheme,
        compiles=runs or run.compiles,
        runs=runs,
        exact=runs and run.stdout.strip() == expected.strip(),
        norm_exact=runs and run.stdout.split() == expected.split(),
        output_ratio=output_ratio(run.stdout, expected) if runs else 0.0,
        line_frac=line_fraction(run.stdout, expected) if runs else 0.0,
        timed_out=run.timed_out,
        killed=run.killed,
        exit_code=run.exit_code,
        stderr_tail=tail,
        extract=extract,
        task_id=task_id,
    )
    return with_body(cfg, of_run, body=body, gold=gold)


def with_body(cfg: RewardConfig, s: Score, *, body: str, gold: str) -> Score:
    """`s` with its per-completion text terms (body_sim, share, idiom, flags) taken from `body`, and its
    value from those and its run terms: what lets completions whose programs mean the same share
    one run (batch.py) and still score exactly as if each had run its own."""
    sim, share = body_similarity(body, gold), code_share(body, gold)
    idiom = idiom_score(body, cfg.dense_v2.idiom_norm) if s.runs else 0.0
    if cfg.scheme == "dense_v2":
        value = dense_v2(
            cfg.dense_v2, compiles=s.compiles, runs=s.runs, exact=s.exact, ratio=s.output_ratio, idiom=idiom, sim=sim
        )
    else:
        value = tiered(
            cfg.tiered, compiles=s.compiles, runs=s.runs, exact=s.exact, line_frac=s.line_frac, sim=sim, share=share
        )
    return replace(s, score=value, body_sim=sim, share=share, idiom=idiom, flags=audit_flags(body))


def zero_score(cfg: RewardConfig, *, extract: str, rejected: str = "", task_id: str = "") -> Score:
    """An empty or rejected body: score 0, nothing run."""
    return Score(score=0.0, scheme=cfg.scheme, extract=extract, rejected=rejected, task_id=task_id)
