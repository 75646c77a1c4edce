"""Driver parsing: markers, units, partial holes, and every malformed-input case."""

from pathlib import Path

import pytest

from jacrl.tasks.drivers import DriverError, mask_code, parse_driver

FIXTURES = Path(__file__).parent / "fixtures" / "drivers"

HEADER = '"""Doc.\n\nsource: src_x\n"""\n'


def write(tmp_path: Path, body: str, name: str = "d.jac", family: str = "fam") -> Path:
    p = tmp_path / family / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(HEADER + body)
    return p


def test_multi_hole_driver_units_and_partial():
    d = parse_driver(FIXTURES / "fam_a" / "counter.jac")
    assert d.family == "fam_a" and d.source == "tiny_counter"
    holes = {h.id: h for h in d.holes}
    assert list(holes) == ["fa_start", "fa_count", "fa_double"]
    assert (holes["fa_start"].unit.kind, holes["fa_start"].unit.name) == ("can", "start")
    assert holes["fa_start"].archetype.kind == "walker"
    assert not holes["fa_start"].partial
    assert holes["fa_count"].partial  # the body has a statement before the hole
    assert (holes["fa_double"].unit.kind, holes["fa_double"].unit.name) == ("def", "double")
    assert holes["fa_double"].archetype is None and not holes["fa_double"].osp
    assert holes["fa_start"].osp and holes["fa_count"].osp
    assert holes["fa_count"].indent == " " * 8
    assert holes["fa_count"].body == ("        self.total += here.value;",)


def test_render_keeps_other_gold_bodies_and_drops_their_markers():
    d = parse_driver(FIXTURES / "fam_a" / "counter.jac")
    start = d.holes[0]
    text = d.render(start, "__HOLE__")
    assert text.count("__HOLE__") == 1 and "        __HOLE__\n" in text
    assert "self.total += here.value;" in text and "return x * 2;" in text
    assert ">>>HOLE" not in text and "<<<HOLE" not in text
    # splicing the gold body back gives the gold program exactly
    gold = "".join(line + "\n" for line in start.body)
    assert text.replace("        __HOLE__\n", gold) == d.gold_program()


def test_braces_inside_strings_and_comments_are_ignored():
    masked = mask_code('x = "{"; # }\ny = f"{a}{b}"; #* { *# z = 1;\n')
    assert "{" not in masked and "}" not in masked
    assert masked.count("\n") == 2
    d = parse_driver(FIXTURES / "fam_b" / "words.jac")
    assert [h.unit.name for h in d.holes] == ["shout", "count_vowels"]


BAD_CASES = {
    "missing close": (
        'def f() -> int {\n    # >>>HOLE id="a" instruction="Return one."\n    return 1;\n}\n',
        "missing '# <<<HOLE'",
        6,
    ),
    "nested": (
        'def f() -> int {\n    # >>>HOLE id="a" instruction="x"\n    # >>>HOLE id="b" instruction="y"\n'
        "    return 1;\n    # <<<HOLE\n    # <<<HOLE\n}\n",
        "nested hole",
        7,
    ),
    "close without open": ("def f() -> int {\n    return 1;\n    # <<<HOLE\n}\n", "without an open hole", 7),
    "bad id": (
        'def f() -> int {\n    # >>>HOLE id="1bad" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n',
        "not a valid identifier",
        6,
    ),
    "keyword id": (
        'def f() -> int {\n    # >>>HOLE id="class" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n',
        "not a valid identifier",
        6,
    ),
    "duplicate id": (
        'def f() -> int {\n    # >>>HOLE id="a" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n'
        'def g() -> int {\n    # >>>HOLE id="a" instruction="y"\n    return 2;\n    # <<<HOLE\n}\n',
        "duplicate hole id",
        11,
    ),
    "malformed marker": (
        "def f() -> int {\n    # >>>HOLE id=a\n    return 1;\n    # <<<HOLE\n}\n",
        "malformed hole marker",
        6,
    ),
    "empty body": (
        'def f() -> int {\n    # >>>HOLE id="a" instruction="x"\n\n    # <<<HOLE\n    return 1;\n}\n',
        "empty gold body",
        6,
    ),
    "crosses block": (
        'def f() -> int {\n    # >>>HOLE id="a" instruction="x"\n    if True {\n    # <<<HOLE\n        return 1;\n    }\n}\n',
        "crosses a block boundary",
        6,
    ),
    "module level": (
        'with entry {\n    # >>>HOLE id="a" instruction="x"\n    print(1);\n    # <<<HOLE\n}\n',
        "not inside a unit",
        6,
    ),
    "jid": (
        'def f() -> str {\n    # >>>HOLE id="a" instruction="x"\n    return jid(root);\n    # <<<HOLE\n}\n',
        "jid()",
        7,
    ),
    "time import": (
        'import time;\ndef f() -> int {\n    # >>>HOLE id="a" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n',
        "clock",
        5,
    ),
    "unseeded random": (
        'import random;\ndef f() -> int {\n    # >>>HOLE id="a" instruction="x"\n    return random.randint(1, 2);\n    # <<<HOLE\n}\n',
        "random without seeding",
        5,
    ),
    "input": (
        'def f() -> str {\n    # >>>HOLE id="a" instruction="x"\n    return input();\n    # <<<HOLE\n}\n',
        "input()",
        7,
    ),
    "no holes": ("def f() -> int {\n    return 1;\n}\n", "no hole markers", 1),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_driver_is_reported_with_file_and_line(tmp_path, case):
    body, message, line = BAD_CASES[case]
    path = write(tmp_path, body)
    with pytest.raises(DriverError) as err:
        parse_driver(path)
    assert message in str(err.value)
    assert str(err.value).startswith(f"{path}:{line}:")


def test_missing_source_tag(tmp_path):
    p = tmp_path / "fam" / "d.jac"
    p.parent.mkdir()
    p.write_text(
        '"""No tag here."""\ndef f() -> int {\n    # >>>HOLE id="a" instruction="x"\n    return 1;\n    # <<<HOLE\n}\n'
    )
    with pytest.raises(DriverError, match=r"d\.jac:1: .*source"):
        parse_driver(p)


def test_seeded_random_is_allowed(tmp_path):
    path = write(
        tmp_path,
        'import random;\ndef f() -> int {\n    random.seed(3);\n    # >>>HOLE id="a" instruction="x"\n    return random.randint(1, 9);\n    # <<<HOLE\n}\n',
    )
    assert parse_driver(path).holes[0].partial


def test_impl_body_of_a_walker_ability_is_object_spatial(tmp_path):
    body = (
        "walker Tally { has n: int = 0; can count with Item entry; }\n"
        "obj Box { has n: int = 0; def add(k: int) -> int; }\n"
        "impl Tally.count {\n"
        '    # >>>HOLE id="fx_count" instruction="Add one to the tally for every item the walker reaches here."\n'
        "    self.n += 1;\n"
        "    # <<<HOLE\n"
        "}\n"
        "impl Box.add(k: int) -> int {\n"
        '    # >>>HOLE id="fx_add" instruction="Add k to the box total and return the new total of the box."\n'
        "    self.n += k;\n"
        "    return self.n;\n"
        "    # <<<HOLE\n"
        "}\n"
    )
    holes = {h.id: h for h in parse_driver(write(tmp_path, body)).holes}
    assert holes["fx_count"].unit.kind == "impl" and holes["fx_count"].osp
    assert not holes["fx_add"].osp  # an obj method's impl is ordinary code
