"""Completions as raw decoders print them: a correct answer wrapped in chat special tokens, a
byte-order mark or NULs passes on every entry point (the library, the TRL callable, the
mlx-lm-lora function, `jacrl-score`), with real runs; what never answered still fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from reward_helpers import FIXTURES, REPO
from transformers import AutoTokenizer

from jacrl.interop import reward as interop
from jacrl.reward.__main__ import score_main
from jacrl.reward.batch import RewardScorer
from jacrl.reward.normalize import CHAT_TOKENS, chat_markup, tokenizer_special_tokens
from jacrl.tasks.record import Task

DECOY = '```jac\nprint("decoy");\n```'
MARKUP = {  # form: completion of a gold body `g`, as decoders of each chat format print it
    "chatml_on_the_closing_fence_line": lambda g: f"```jac\n{g}```<|im_end|>",
    "chatml_after_an_unclosed_fence": lambda g: f"```jac\n{g}<|im_end|>",
    "chatml_header_and_next_turn": lambda g: (
        f"<|im_start|>assistant\n```jac\n{g}```<|im_end|>\n<|im_start|>user\n"
        f"Thanks! Now this one.<|im_end|>\n<|im_start|>assistant\n{DECOY}"
    ),
    "llama3": lambda g: f"<|start_header_id|>assistant<|end_header_id|>\n\n```jac\n{g}```<|eot_id|>",
    "llama3_end_of_text_unclosed": lambda g: f"```jac\n{g}<|end_of_text|>",
    "gemma": lambda g: f"<start_of_turn>model\n```jac\n{g}```<end_of_turn>\n<eos>",
    "mistral": lambda g: f"```jac\n{g}```</s>[INST] And now? [/INST]{DECOY}",
    "gpt_end_of_text_unclosed": lambda g: f"~~~jac\n{g}<|endoftext|>",
    "harmony_final_then_return": lambda g: (
        f"<|channel|>analysis<|message|>{DECOY}<|end|><|start|>assistant"
        f"<|channel|>final<|message|>```jac\n{g}```<|return|>"
    ),
    "phi_end": lambda g: f"```jac\n{g}```<|end|>",
    "bare_body_then_end": lambda g: f"{g}<|im_end|>",
    "think_then_end": lambda g: f"<think>\n{DECOY}\n</think>\n```jac\n{g}```<|im_end|>",
    "stray_marks_before": lambda g: f"<|im_end|>\n<s>```jac\n{g}```",
    "bom": lambda g: f"\ufeff```jac\n{g}```",
    "bom_bare_body": lambda g: f"\ufeff{g}",
    "nul": lambda g: "\x00```jac\n" + g.replace(";", ";\x00") + "```\x00\x00",
    "crlf_then_end": lambda g: f"```jac\r\n{g}```".replace("\n", "\r\n").replace("\r\r\n", "\r\n") + "<|eot_id|>",
}
NEVER_ANSWERED = {  # form: a completion of `g` that writes no usable body
    "end_token_only": lambda g: "<|im_end|>",
    "header_only": lambda g: "<|im_start|>assistant\n<|im_end|>",
    "bom_only": lambda g: "\ufeff\x00",
    "truncated_then_end": lambda g: f"```jac\n{g[: len(g) // 2]}<|im_end|>",
    "reasoning_never_closed_then_end": lambda g: f"<think>\nA draft:\n{g}<|im_end|>",
    "harmony_analysis_only": lambda g: f"<|channel|>analysis<|message|>```jac\n{g}```<|end|>",
}


def completions(forms: dict, t: Task) -> tuple[list[str], list[str]]:
    return list(forms), [f(t.gold_body) for f in forms.values()]


def test_library_scores_every_marked_answer_exact_and_never_a_missing_one(tasks, tiered_scorer):
    rows = [
        (t.id, name, f(t.gold_body), ok)
        for t in tasks.values()
        for forms, ok in ((MARKUP, True), (NEVER_ANSWERED, False))
        for name, f in forms.items()
    ]
    scores = tiered_scorer.score_batch([r[0] for r in rows], [r[2] for r in rows])
    wrong = [(task_id, name, s.extract, s.rejected) for (task_id, name, _, ok), s in zip(rows, scores) if s.exact != ok]
    assert wrong == []


def test_the_tokenizers_own_special_tokens(tasks, tiny_model):
    """A model's tokenizer with a token of its own: the scorer given its special tokens cuts the
    answer there; without them the token is read as code."""
    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.add_tokens(["<|turn_over|>"], special_tokens=True)  # an added token flagged special
    special = tokenizer_special_tokens(tok)
    assert "<|turn_over|>" in special and "<|im_end|>" in special
    t = tasks["fx_total_population"]
    completion = f"```jac\n{t.gold_body}<|turn_over|>\nuser\nThat was it"
    with (
        RewardScorer({"cache": False, "workers": 1}, tasks=tasks, special_tokens=special) as own,
        RewardScorer({"cache": False, "workers": 1}, tasks=tasks) as plain,
    ):
        assert own.score(t.id, completion).exact
        assert not plain.score(t.id, completion).exact


def test_only_bracketed_tokens_are_cut():
    markup = chat_markup(("END", "<|turn_over|>", "[SEP]", ""))
    assert {"<|turn_over|>", "[SEP]"} <= set(markup.tokens) and "END" not in markup.tokens and "" not in markup.tokens
    assert set(CHAT_TOKENS) <= set(markup.tokens)
    assert markup.answer_turn("x = 1; END <|turn_over|> y") == "x = 1; END "


def test_trl_callable(tasks):
    t = tasks["fx_visit_city"]
    names, comps = completions(MARKUP | NEVER_ANSWERED, t)
    conversational = [[{"role": "assistant", "content": c}] for c in comps]
    reward = interop.JacReward(tasks=FIXTURES / "tasks.jsonl", config={"cache": False, "workers": 1})
    try:
        scores = reward(prompts=["p"] * len(comps), completions=conversational, task_id=[t.id] * len(comps))
    finally:
        reward.close()
    assert {n for n, s in zip(names, scores) if s == 1.0} == set(MARKUP)


def test_mlx_lm_lora_function(tasks, monkeypatch):
    monkeypatch.setattr(
        interop, "_shared", interop.JacReward(tasks=FIXTURES / "tasks.jsonl", config={"cache": False, "workers": 1})
    )
    t = tasks["fx_stack_push"]
    names, comps = completions(MARKUP | NEVER_ANSWERED, t)
    try:
        scores = interop.jac_behavioral(prompts=["p"] * len(comps), completions=comps, answer=[t.id], types=None)
    finally:
        interop._shared.close()
    assert {n for n, s in zip(names, scores) if s == 1.0} == set(MARKUP)


CLI_FILES = {  # file name: (its completion, whether it passes); a byte-order mark: the test below
    "end_on_fence_line.txt": (MARKUP["chatml_on_the_closing_fence_line"], True),
    "end_after_unclosed_fence.txt": (MARKUP["chatml_after_an_unclosed_fence"], True),
}


def test_jacrl_score_command(tasks, tmp_path, capsys):
    t = tasks["fx_door_greet"]
    args = ["--task", t.id, "--tasks", str(FIXTURES / "tasks.jsonl"), "--no-cache", "--runner", "subprocess", "--json"]
    for name, (form, passes) in CLI_FILES.items():
        (tmp_path / name).write_text(form(t.gold_body), encoding="utf-8")
        assert score_main([str(tmp_path / name), *args]) == 0
        assert json.loads(capsys.readouterr().out)["exact"] == passes, name
    (tmp_path / "latin1.txt").write_bytes(MARKUP["bom"](t.gold_body).replace("\ufeff", "\xe9").encode("latin-1"))
    assert score_main([str(tmp_path / "latin1.txt"), *args]) == 0
    assert json.loads(capsys.readouterr().out)["rejected"].startswith("bad_text:")


def test_installed_jacrl_score_on_a_file_an_editor_saved(tasks, tmp_path):
    """The console script, as a user runs it, on a completion saved with a byte-order mark."""
    t = tasks["fx_stack_push"]
    (tmp_path / "answer.txt").write_text(f"```jac\n{t.gold_body}```\n<|im_end|>\n", encoding="utf-8-sig")
    script = Path(sys.executable).with_name("jacrl-score")
    if not script.exists():
        pytest.skip("jacrl-score is not installed beside this interpreter (pip install -e .)")
    out = subprocess.run(
        [
            str(script),
            "--task",
            t.id,
            str(tmp_path / "answer.txt"),
            "--tasks",
            str(FIXTURES / "tasks.jsonl"),
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr
    assert "score        1.0000  [tiered]" in out.stdout and "exact        True" in out.stdout


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_corpus_every_marked_answer_scores_exact(corpus, tiered_scorer):
    """Every corpus task's gold body in every chat-markup form is an exact pass; the forms that
    never answer never pass (real runs)."""
    tiered_scorer.tasks.update(corpus)
    rows = [
        (t.id, name, f(t.gold_body), ok)
        for t in corpus.values()
        for forms, ok in ((MARKUP, True), (NEVER_ANSWERED, False))
        for name, f in forms.items()
    ]
    scores = tiered_scorer.score_batch([r[0] for r in rows], [r[2] for r in rows])
    table: dict[str, list[int]] = {}
    for (_, name, _, ok), s in zip(rows, scores):
        counts = table.setdefault(name, [0, 0])
        counts[0] += 1
        counts[1] += s.exact == ok
    print("\n".join(f"{name:40} {n:5} {good:5}" for name, (n, good) in table.items()))
    assert all(n == good for n, good in table.values()), table


def test_rft_scores_with_the_models_special_tokens(tasks):
    """RFT's scorer cuts the special tokens it is given, as eval's and GRPO's do."""
    from jacrl.training.rft import reward_score_fn

    t = tasks["fx_total_population"]
    completion = f"```jac\n{t.gold_body}<|turn_over|>\nuser\nThat was it"
    cfg = {"cache": False, "workers": 1}
    own, plain = reward_score_fn(cfg, 1, ("<|turn_over|>",)), reward_score_fn(cfg, 1)
    assert own([t], [completion]) == own([t], [f"```jac\n{t.gold_body}```"])
    assert own([t], [completion])[0].score > plain([t], [completion])[0].score  # Score records (rft.ScoreFn)
