"""`python -m jacrl.ladder`: bad input ends with one line naming it and exit status 1."""

import pytest

from jacrl.ladder.__main__ import main


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "No such file"),
        ("", "no rows"),
        ('{"a": 1}\n', "not ladder rows"),
        ('{"rung": "1"}\nnot json\n', ":2: not valid JSON"),
    ],
)
def test_show_bad_input(tmp_path, capsys, content, needle):
    path = tmp_path / "rows.jsonl"
    if content is not None:
        path.write_text(content)
    assert main(["show", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and str(path) in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("jacrl ")
