"""The docs where they list what the code defines: design.md's rules of each rules/ file and the
`cond` wildcard's conditions, benches.md's table of bench/ scripts. A rule, condition or bench added
without its line fails here."""

import re
from pathlib import Path

from jacrl.ladder.config import CONDITIONS

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
RULE = re.compile(r"^(?:rule|checkpoint) (\w+):|^use rule \w+ as (\w+) with:", re.MULTILINE)


def rules_in(path: Path) -> set[str]:
    return {a or b for a, b in RULE.findall(path.read_text(encoding="utf-8"))}


def listed_rules() -> dict[str, set[str]]:
    lines = re.findall(r"^- `(\w+\.smk)`: (.*)$", DESIGN, re.MULTILINE)
    return {name: set(re.findall(r"`(\w+)`", rest)) for name, rest in lines}


def test_every_rules_file_lists_its_rules():
    files = {p.name: rules_in(p) for p in sorted((ROOT / "rules").glob("*.smk"))}
    listed = listed_rules()
    assert {f: r for f, r in files.items() if r} == listed


def test_the_cond_wildcard_names_every_condition():
    sentence = re.search(r"`cond` ∈ (.*?);", DESIGN, re.DOTALL)[1]
    named = re.findall(r"`(\w+)`", sentence.split(" and, for each arm")[0])
    assert tuple(named) == CONDITIONS


def test_the_benches_table_names_every_bench_script():
    table = (ROOT / "docs" / "benches.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([\w.]+)` \|", table, re.MULTILINE))
    scripts = {p.name for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".sh")}
    assert scripts == listed
