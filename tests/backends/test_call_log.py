"""A decode's finished calls logged to disk (`decode.calls.CallLog`): a job killed part-way and run again
returns what one run without the interruption returns, reads the calls it finished instead of decoding
them, and never takes calls that another model, adapter or machine logged."""

import json
import logging

import pytest

from jacrl.backends import SamplingParams, load_backend
from jacrl.backends.base import Draw
from jacrl.backends.decode.calls import KEY_FILE, CallLog

PROMPTS = ["walker Visit", "node Room { has name: str; }", "def add(a: int, b: int) -> int", "obj", "edge Road", "can"]
DRAWS = [
    Draw(1, SamplingParams(temperature=0.0, max_tokens=10, seed=5)),
    Draw(3, SamplingParams(temperature=0.9, max_tokens=10, seed=5)),
]
KEY = {"model": "tiny", "machine": {"cpu": "this one"}}


@pytest.fixture(scope="module")
def backend(tiny_model):
    b = load_backend(tiny_model, "torch", threads=2)
    b.sampler.max_batch_rows = 8  # 4 rows a prompt: two prompts a call, three calls
    return b


def _flat(drawn):
    return [[(c.text, c.token_ids, c.logprobs, c.truncated) for c in per_prompt] for d in drawn for per_prompt in d]


def _calls(folder):
    return sorted(p for p in folder.glob("*.json") if p.name != KEY_FILE)


def test_a_resumed_decode_returns_what_one_run_returns(backend, tmp_path, caplog):
    alone = _flat(backend.generate_draws(PROMPTS, DRAWS, progress=False))
    first = CallLog(tmp_path / "calls", KEY)
    assert _flat(backend.generate_draws(PROMPTS, DRAWS, progress=False, calls=first)) == alone
    assert (first.read, first.written) == (0, 3)
    done = _calls(tmp_path / "calls")
    assert len(done) == 3
    done[0].unlink()  # a call the killed job never finished
    done[1].write_text('{"ids": [[1, 2')  # a call torn by a full disk
    again = CallLog(tmp_path / "calls", KEY)
    with caplog.at_level(logging.WARNING):
        resumed = _flat(backend.generate_draws(PROMPTS, DRAWS, progress=False, calls=again))
    assert resumed == alone  # text, token ids, log-probs (exactly: read back from JSON) and truncation
    assert (again.read, again.written) == (1, 2)
    assert f"decode call {done[1]} is unreadable" in caplog.text


def test_a_logged_call_is_read_not_decoded(backend, tmp_path):
    """What a logged call holds is what the resumed decode returns: the log, not a second decode, serves it."""
    log = CallLog(tmp_path / "calls", KEY)
    backend.generate_draws(PROMPTS[:2], DRAWS, progress=False, calls=log)
    [call] = _calls(tmp_path / "calls")
    data = json.loads(call.read_text())
    node = backend.encode("node")
    lps = [-0.5] * len(node) + [-0.25]
    data["ids"][0][0], data["logprobs"][0][0] = node + [backend.eos_token_id], lps  # prompt 0's greedy row
    call.write_text(json.dumps(data))
    [greedy, _] = backend.generate_draws(PROMPTS[:2], DRAWS, progress=False, calls=CallLog(tmp_path / "calls", KEY))
    assert (greedy[0][0].text, greedy[0][0].logprobs) == ("node", lps)


def test_a_log_under_another_key_is_discarded_with_one_warning(backend, tmp_path, caplog):
    folder = tmp_path / "calls"
    backend.generate_draws(PROMPTS[:2], DRAWS, progress=False, calls=CallLog(folder, KEY))
    other = {**KEY, "machine": {"cpu": "another one"}}
    with caplog.at_level(logging.WARNING):
        log = CallLog(folder, other)
    assert "decode calls logged under another machine; decoding afresh" in caplog.text
    assert _calls(folder) == [] and json.loads((folder / KEY_FILE).read_text())["machine"] == other["machine"]
    backend.generate_draws(PROMPTS[:2], DRAWS, progress=False, calls=log)
    assert (log.read, log.written) == (0, 1)


def test_a_log_is_keyed_by_the_decode_code(tmp_path):
    """The backends' source is part of every log's key: calls another decode made are not reused."""
    log = CallLog(tmp_path / "calls", KEY)
    kept = json.loads((tmp_path / "calls" / KEY_FILE).read_text())
    assert kept["decode_code"] == log.key["decode_code"] and len(kept["decode_code"]) == 64
    kept["decode_code"] = "0" * 64
    (tmp_path / "calls" / KEY_FILE).write_text(json.dumps(kept))
    (tmp_path / "calls" / "abc.json").write_text("{}")
    CallLog(tmp_path / "calls", KEY)
    assert _calls(tmp_path / "calls") == []


def test_calls_under_a_torn_key_or_none_are_dropped(tmp_path, caplog):
    folder = tmp_path / "calls"
    folder.mkdir()
    (folder / "abc.json").write_text('{"ids": [], "logprobs": []}')  # a call no key vouches for
    CallLog(folder, KEY)
    assert _calls(folder) == []
    (folder / KEY_FILE).write_text('["torn')
    (folder / "abc.json").write_text('{"ids": [], "logprobs": []}')
    with caplog.at_level(logging.WARNING):
        CallLog(folder, KEY)
    assert f"{folder / KEY_FILE} is unreadable" in caplog.text and _calls(folder) == []


def test_a_resumed_stream_reads_the_prompts_it_finished(backend, tmp_path):
    """Under `decode: stream` (an eval job's) each prompt is logged as its last row ends; run again, the
    logged prompts are read and only the others stream, each with its own seed. Those share their steps
    with fewer rows than in one run: the same tokens, their log-probs within float rounding."""
    from dataclasses import replace

    streamed = replace(backend.options, decode="stream")
    backend.options, options = streamed, backend.options
    try:
        alone = _flat(backend.generate_draws(PROMPTS, DRAWS, progress=False))
        first = CallLog(tmp_path / "calls", KEY)
        assert _flat(backend.generate_draws(PROMPTS, DRAWS, progress=False, calls=first)) == alone
        assert (first.read, first.written) == (0, len(PROMPTS))
        for call in _calls(tmp_path / "calls")[:2]:
            call.unlink()
        again = CallLog(tmp_path / "calls", KEY)
        resumed = _flat(backend.generate_draws(PROMPTS, DRAWS, progress=False, calls=again))
        assert (again.read, again.written) == (len(PROMPTS) - 2, 2)
        for rows, rows_alone in zip(resumed, alone, strict=True):
            for (text, ids, lps, cut), (text_a, ids_a, lps_a, cut_a) in zip(rows, rows_alone, strict=True):
                assert (text, ids, cut) == (text_a, ids_a, cut_a)
                assert lps == pytest.approx(lps_a, abs=1e-5)
    finally:
        backend.options = options
