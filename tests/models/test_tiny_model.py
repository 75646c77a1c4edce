"""The embedded tiny model: corpus (never a holdout driver), tokenizer, template, saved format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jacrl.models.config import CHAT_TEMPLATE, EOS_TOKEN, TinyModelConfig
from jacrl.models.tiny import (
    CorpusError,
    driver_paths_from_tasks,
    jaclang_jac_files,
    pretraining_corpus,
    read_manifest,
    train_tokenizer,
)

SMALL = TinyModelConfig(corpus_chars=20_000, vocab_size=300)


def test_holdout_drivers_never_reach_the_pretraining_corpus(tiny_model, tiny_fixtures):
    """The built model's manifest lists every pre-training file: exactly the train-pool drivers,
    plus jaclang's own sources. No holdout driver is among them, nor is its text inside any."""
    holdout = {p.resolve() for p in driver_paths_from_tasks(tiny_fixtures / "holdout.jsonl", tiny_fixtures)}
    train = {p.resolve() for p in driver_paths_from_tasks(tiny_fixtures / "trainpool.jsonl", tiny_fixtures)}
    assert holdout and train and not holdout & train

    corpus = read_manifest(tiny_model)["corpus"]
    used = {Path(c["path"]).resolve() for c in corpus}
    assert not used & holdout
    assert {Path(c["path"]).resolve() for c in corpus if c["kind"] == "driver"} == train
    assert all("jaclang" in Path(c["path"]).parts for c in corpus if c["kind"] == "jaclang")

    docs = pretraining_corpus(sorted(train), SMALL)
    for h in holdout:
        text = h.read_text().strip()
        assert not any(text in d.text for d in docs)


def test_a_holdout_driver_given_as_training_text_is_refused(tiny_fixtures):
    train = driver_paths_from_tasks(tiny_fixtures / "trainpool.jsonl", tiny_fixtures)
    holdout = driver_paths_from_tasks(tiny_fixtures / "holdout.jsonl", tiny_fixtures)
    with pytest.raises(CorpusError, match="holdout"):
        pretraining_corpus(train + holdout[:1], SMALL, holdout_driver_paths=holdout)


def test_corpus_reads_only_the_drivers_it_is_given(tiny_fixtures, tmp_path):
    train = driver_paths_from_tasks(tiny_fixtures / "trainpool.jsonl", tiny_fixtures)[:1]
    docs = pretraining_corpus(train, SMALL)
    assert [d.path for d in docs if d.kind == "driver"] == [train[0].as_posix()]
    with pytest.raises(CorpusError, match="does not exist"):
        pretraining_corpus([tmp_path / "nope.jac"], SMALL)


def test_jaclang_sources_are_found():
    files = jaclang_jac_files()
    assert len(files) > 50 and all(f.suffix == ".jac" for f in files)


def test_tokenizer_is_lossless_on_jac_and_knows_the_chat_tokens():
    text = 'walker Visit {\n    can go with `root entry {\n        visit [-->]; report "é ✓";\n    }\n}\n'
    tok = train_tokenizer([text * 20], 300)
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert len(tok.encode("<|im_start|><|im_end|>", add_special_tokens=False)) == 2
    assert tok.eos_token == EOS_TOKEN and tok.chat_template == CHAT_TEMPLATE


def test_saved_folder_is_a_qwen2_model_both_backends_read(tiny_model):
    conf = json.loads((tiny_model / "config.json").read_text())
    assert conf["model_type"] == "qwen2" and conf["tie_word_embeddings"] is True
    assert conf["rope_theta"] == conf["rope_parameters"]["rope_theta"]  # mlx-lm reads the top-level key
    for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "metrics.jsonl", "jacrl_tiny.json"):
        assert (tiny_model / f).is_file(), f
    rows = [json.loads(line) for line in (tiny_model / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert {"step", "loss", "lr", "tokens_per_s"} <= set(rows[0])


def test_config_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="multiple of heads"):
        TinyModelConfig(width=100, heads=3)
    with pytest.raises(ValueError, match="kv_heads"):
        TinyModelConfig(heads=4, kv_heads=3)
    with pytest.raises(ValueError):
        TinyModelConfig(unknown_knob=1)
