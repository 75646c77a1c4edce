"""The report's pages and figures, rendered from small fixture cells, samples and metrics."""

import json

import pytest
from conftest import HOSTILE, Page, grpo_rows

from jacrl.io import write_jsonl
from jacrl.ladder.pivot import paired_tests, pivot_tables, rows_frame
from jacrl.ladder.rows import build_rows
from jacrl.report.curves import panel_keys, plot_curves, write_curves
from jacrl.report.html import write_markdown_page
from jacrl.report.ladder import write_ladder_html
from jacrl.report.samples import HEADER, outcome, samples_html, write_samples_html


def test_ladder_page_shows_the_pivot_and_the_paired_tests(cells, tmp_path):
    rows = build_rows(cells)
    write_jsonl(tmp_path / "rl_ladder.jsonl", rows)
    assert write_ladder_html(tmp_path / "rl_ladder.jsonl", tmp_path / "ladder.html") == len(cells)
    html = (tmp_path / "ladder.html").read_text()
    page = Page(html)
    df = rows_frame(rows)
    by_split = pivot_tables(df)
    pivots = [t for tables in by_split.values() for t in tables.values()]
    shown = [t for name, t in page.tables.items() if name.startswith("table")]
    # gen: compiles, runs, reward, pass@1 and the sampled stages; mem (no policy samples): the first four
    assert len(shown) == len(pivots) == 9
    for html_rows, frame in zip(shown, pivots):
        body = [r for r in html_rows if r and r[0] in frame.index]  # past pandas' header rows
        assert body == [[idx, *frame.loc[idx]] for idx in frame.index]
    titles = list(by_split[("tiny", "gen")])
    assert titles[0].startswith("greedy compiles %") and titles[-1].startswith("sampled (T 0.3)")
    assert all(f">{t}</h3>" in html for t in titles)
    compiles, *_, gen, sampled = (t.loc["r1"] for t in by_split[("tiny", "gen")].values())
    assert compiles["sft_grpo"] == "n/r"  # these cells predate per-task stages: absent, not zero
    assert gen["sft_grpo"].startswith("greedy 75.0 [") and "pass@2 (T 0.8) 75.0" in gen["sft_grpo"]
    assert "verified@2 (T 0.8) 75.0" in gen["sft_grpo"] and sampled["sft_grpo"].endswith(
        "pass 56.2"
    )  # (4 + 3 + 2) / 16
    assert "flagged 33%" in gen["sft_grpo"] and "⚠ isolation weak" in gen["sft_grpo"]
    tests = page.tables["paired-tests"]
    assert tests[0] == list(paired_tests(df).columns) and len(tests) == 1 + len(paired_tests(df))
    assert ["tiny", "gen", "r1", "sft_grpo", "sft", "sampled (T 0.3) pass"] in [r[:6] for r in tests]
    numbers = page.tables["cells"]
    assert numbers[0][:5] == ["tag", "model", "split", "rung", "cond"] and len(numbers) == 1 + len(cells)
    assert {"greedy pass@1 %", "pass@k % (samples at T)", "T (eval samples)"} <= set(numbers[0])
    assert len(page.scripts) == 1 and "localeCompare" in page.scripts[0]


def test_an_empty_ladder_is_an_error_naming_the_file(tmp_path):
    (tmp_path / "rl_ladder.jsonl").write_text("")
    with pytest.raises(ValueError, match="rl_ladder.jsonl: no ladder rows"):
        write_ladder_html(tmp_path / "rl_ladder.jsonl", tmp_path / "ladder.html")
    assert not (tmp_path / "ladder.html").exists()


def test_samples_page_lists_every_completion_escaped(cells, samples, tmp_path):
    cell_path, samples_path = tmp_path / "gen.json", tmp_path / "gen.samples.jsonl"
    cell_path.write_text(json.dumps(cells[2]))
    write_jsonl(samples_path, samples)
    assert write_samples_html(cell_path, samples_path, tmp_path / "gen.html") == len(samples)
    text = (tmp_path / "gen.html").read_text()
    page = Page(text)
    table = page.tables["samples"]
    assert table[0] == list(HEADER) and len(table) == 1 + len(samples)
    col = {h: i for i, h in enumerate(HEADER)}
    assert [r[col["outcome"]] for r in table[1:]] == ["pass", "near", "pass", "rejected", "compile error"]
    assert [r[col["kind"]] for r in table[1:]] == ["greedy", "sample", "policy", "sample", "greedy"]
    assert table[3][col["flags"]] == "file, module:os" and table[1][col["flags"]] == "—"
    assert table[2][col["truncated"]] == "yes" and table[2][col["tokens"]] == "160"
    # the hostile completion reads back verbatim as text: no markup of it reached the page
    assert HOSTILE in page.pres and len(page.scripts) == 1 and "__pwned" not in page.scripts[0]
    assert "<b>bold</b>" not in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    assert any("stderr_tail: Error: <stderr>" in p for p in page.pres)
    assert any("flags: file, module:os" in p for p in page.pres)
    summary = page.tables["table0"]
    assert summary[0][:4] == ["tasks", "greedy pass@1 %", "pass@2 (T 0.8) %", "verified@2 (T 0.8) %"]
    assert summary[1][-1] == "weak"


def test_samples_page_offers_the_values_it_filters_on(cells, samples):
    text = samples_html(cells[0], samples)
    for value in ("greedy", "policy", "sample", "pass", "near", "rejected", "compile error", "flagged", "none"):
        assert f'<option value="{value}">' in text
    assert 'data-col="2"' in text and 'data-col="4"' in text and 'data-col="9"' in text
    assert text.count('data-v="flagged"') == 1


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"exact": True, "runs": True}, "pass"),
        ({"runs": True, "output_ratio": 0.9}, "near"),
        ({"runs": True, "output_ratio": 0.89}, "wrong output"),
        ({"rejected": "unit not closed"}, "rejected"),
        ({"compiles": True, "timed_out": True}, "timeout"),
        ({"compiles": True}, "runtime error"),
        ({}, "compile error"),
    ],
)
def test_outcome(fields, expected):
    assert outcome(fields) == expected


def test_grpo_curves_draw_every_panel_and_tolerate_gaps(tmp_path):
    rows = grpo_rows()
    panels = {title: keys for title, _, keys in panel_keys(rows)}
    assert list(panels) == ["reward", "pass rate", "σ = 0 groups", "truncation", "KL", "loss terms", "memory"]
    assert panels["KL"] == ["kl/reference", "loss/rl/mismatch_kl"]
    assert panels["loss terms"] == ["loss/ref_kl/loss", "loss/rl/loss", "loss/total"]
    (tmp_path / "a").mkdir()
    write_jsonl(tmp_path / "a" / "metrics.jsonl", rows)
    assert write_curves(tmp_path / "a", tmp_path / "a.png", "r1/tiny/sft_grpo") == list(panels)
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


def test_sft_curves_have_the_loss_only_and_empty_metrics_still_draw(tmp_path):
    sft = [{"step": i, "loss": 5.0 / i, "lr": 1e-3, "tokens_per_s": 800.0} for i in range(1, 6)]
    assert [title for title, _, _ in panel_keys(sft)] == ["loss terms"]
    assert plot_curves([], tmp_path / "empty.png", "nothing") == []
    assert (tmp_path / "empty.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(FileNotFoundError, match="no training metrics"):
        write_curves(tmp_path / "missing", tmp_path / "m.png", "missing")


def test_splits_summary_becomes_a_page_with_its_table(tmp_path):
    md = tmp_path / "splits.md"
    md.write_text("# Task splits\n\n3 tasks <i>raw</i>\n\n| family | tasks |\n|:--|--:|\n| fa | 2 |\n| fb | 1 |\n")
    write_markdown_page(md, tmp_path / "splits.html", "Task splits")
    text = (tmp_path / "splits.html").read_text()
    page = Page(text)
    assert page.tables["table0"] == [["family", "tasks"], ["fa", "2"], ["fb", "1"]]
    assert text.count("<h1>") == 1 and "&lt;i&gt;raw&lt;/i&gt;" in text


def test_the_shared_base_gen_cell_has_a_page_under_each_rung(cells, samples, tmp_path):
    cell_path, samples_path = tmp_path / "gen.json", tmp_path / "gen.samples.jsonl"
    cell_path.write_text(json.dumps({**cells[0], "rung": "shared"}))
    write_jsonl(samples_path, samples)
    assert write_samples_html(cell_path, samples_path, tmp_path / "r3.html", rung="3") == len(samples)
    write_samples_html(cell_path, samples_path, tmp_path / "own.html")
    assert "<title>Completions · r3/tiny/base/gen</title>" in (tmp_path / "r3.html").read_text()
    assert "<title>Completions · rshared/tiny/base/gen</title>" in (tmp_path / "own.html").read_text()
