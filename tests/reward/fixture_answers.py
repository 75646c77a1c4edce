"""The fixture tasks answered by hand in each shape a model writes an answer: the body alone, the
hole's whole unit, the unit as an `impl` block, and the task itself moved out of line (its unit
declared in place and defined in an `impl` block). The extraction tests check what comes out
against these strings, not against forms built with the extractor's own unit finder."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from jacrl.tasks.record import Task


@dataclass(frozen=True)
class Answers:
    """One task and its gold body in each shape extraction must take back to `body`."""

    task: Task
    body: str
    """What extraction must give: the gold body, dedented."""
    unit: str
    """The hole's whole unit with the body in it."""
    impl: str
    """That unit as an `impl` block of its owner."""
    inline: str
    """That unit written inline in its archetype."""


@dataclass(frozen=True)
class Written:
    """A fixture task's answers as written by hand, and the edits that move its unit out of line."""

    body: str
    unit: str
    impl: str
    impl_name: str
    inline_impl: str
    """The out-of-line task's unit written inline in its archetype."""
    out_of_line: tuple[tuple[str, str], ...]
    """Edits of the template (old text, new text) that leave a declaration where the unit was and
    put an `impl` block holding the hole after its archetype."""


WRITTEN: dict[str, Written] = {
    "fx_visit_city": Written(
        body="self.seen.append(here.name);\nself.total += here.population;\nvisit [-->];",
        unit="""can visit_city with City entry {
    self.seen.append(here.name);
    self.total += here.population;
    visit [-->];
}""",
        impl="""impl Tour.visit_city with City entry {
    self.seen.append(here.name);
    self.total += here.population;
    visit [-->];
}""",
        impl_name="Tour.visit_city",
        inline_impl="""obj Tour {
    def visit_city with City entry {
        self.seen.append(here.name);
        self.total += here.population;
        visit [-->];
    }
}""",
        out_of_line=(
            (
                "    can visit_city with City entry {\n        __HOLE__\n    }\n}\n",
                "    can visit_city with City entry;\n}\nimpl Tour.visit_city with City entry {\n    __HOLE__\n}\n\n",
            ),
        ),
    ),
    "fx_total_population": Written(
        body="s = 0;\nfor c in cities {\n    s += c.population;\n}\nreturn s;",
        unit="""def total_population(cities: list[City]) -> int {
    s = 0;
    for c in cities {
        s += c.population;
    }
    return s;
}""",
        impl="""impl total_population(cities: list[City]) -> int {
    s = 0;
    for c in cities {
        s += c.population;
    }
    return s;
}""",
        impl_name="total_population",
        inline_impl="""def total_population(cities: list[City]) -> int {
    s = 0;
    for c in cities {
        s += c.population;
    }
    return s;
}""",
        out_of_line=(
            (
                "def total_population(cities: list[City]) -> int {\n    __HOLE__\n}\n",
                "def total_population(cities: list[City]) -> int;\n"
                "impl total_population(cities: list[City]) -> int {\n    __HOLE__\n}\n\n",
            ),
        ),
    ),
    "fx_describe_size": Written(
        body='if c.population > 500 {\n    label = "big";\n} elif c.population > 100 {\n    label = "medium";\n}',
        unit="""def describe(c: City) -> str {
    label = "small";
    if c.population > 500 {
        label = "big";
    } elif c.population > 100 {
        label = "medium";
    }
    return f"{c.name}: {label}";
}""",
        impl="""impl describe(c: City) -> str {
    label = "small";
    if c.population > 500 {
        label = "big";
    } elif c.population > 100 {
        label = "medium";
    }
    return f"{c.name}: {label}";
}""",
        impl_name="describe",
        inline_impl="""def describe(c: City) -> str {
    label = "small";
    if c.population > 500 {
        label = "big";
    } elif c.population > 100 {
        label = "medium";
    }
    return f"{c.name}: {label}";
}""",
        out_of_line=(
            (
                'def describe(c: City) -> str {\n    label = "small";\n    __HOLE__\n    return f"{c.name}: {label}";\n}\n',
                'def describe(c: City) -> str;\nimpl describe(c: City) -> str {\n    label = "small";\n    __HOLE__\n'
                '    return f"{c.name}: {label}";\n}\n\n',
            ),
        ),
    ),
    "fx_stack_push": Written(
        body="if len(self.items) >= self.limit {\n    return False;\n}\nself.items.append(x);\nreturn True;",
        unit="""def push(x: int) -> bool {
    if len(self.items) >= self.limit {
        return False;
    }
    self.items.append(x);
    return True;
}""",
        impl="""impl Stack.push(x: int) -> bool {
    if len(self.items) >= self.limit {
        return False;
    }
    self.items.append(x);
    return True;
}""",
        impl_name="Stack.push",
        inline_impl="""obj Stack {
    def push(x: int) -> bool {
        if len(self.items) >= self.limit {
            return False;
        }
        self.items.append(x);
        return True;
    }
}""",
        out_of_line=(
            ("    def push(x: int) -> bool {\n        __HOLE__\n    }\n", "    def push(x: int) -> bool;\n"),
            (
                "        return self.items[-1] if self.items else -1;\n    }\n}\n",
                "        return self.items[-1] if self.items else -1;\n    }\n}\n"
                "impl Stack.push(x: int) -> bool {\n    __HOLE__\n}\n\n",
            ),
        ),
    ),
    "fx_door_greet": Written(
        body='visitor.log.append(f"{self.label} opened for {visitor.who}");\ndisengage;',
        unit="""can greet with Knock entry {
    visitor.log.append(f"{self.label} opened for {visitor.who}");
    disengage;
}""",
        impl="""impl Door.greet with Knock entry {
    visitor.log.append(f"{self.label} opened for {visitor.who}");
    disengage;
}""",
        impl_name="Door.greet",
        inline_impl="""obj Door {
    def greet with Knock entry {
        visitor.log.append(f"{self.label} opened for {visitor.who}");
        disengage;
    }
}""",
        out_of_line=(
            (
                "    can greet with Knock entry {\n        __HOLE__\n    }\n}\n",
                "    can greet with Knock entry;\n}\nimpl Door.greet with Knock entry {\n    __HOLE__\n}\n\n",
            ),
        ),
    ),
}


def answered(tasks: dict[str, Task]) -> list[Answers]:
    """Every fixture task, answered."""
    return [Answers(tasks[i], w.body, w.unit, w.impl, w.unit) for i, w in WRITTEN.items()]


def answered_out_of_line(tasks: dict[str, Task]) -> list[Answers]:
    """Every fixture task moved out of line (`<id>_impl`, its hole in an `impl` block), answered:
    its unit is now the `impl` block."""
    return [Answers(out_of_line(tasks[i], w), w.body, w.impl, w.impl, w.inline_impl) for i, w in WRITTEN.items()]


def out_of_line(t: Task, w: Written) -> Task:
    template = t.template
    for old, new in w.out_of_line:
        if template.count(old) != 1:
            raise ValueError(f"{t.id}: the edit {old!r} does not match its template once")
        template = template.replace(old, new)
    gold = textwrap.indent(w.body, "    ") + "\n"
    return Task.model_validate(
        {
            **t.model_dump(),
            "id": t.id + "_impl",
            "unit": {"kind": "impl", "name": w.impl_name},
            "indent": "    ",
            "template": template,
            "gold_body": gold,
        }
    )
