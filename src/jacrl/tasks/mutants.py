"""A hole's mutants: small wrong versions of its gold body, cut with jaclang's own parser.

The gold program is parsed once per driver (`JacProgram.parse_str`, the parser `jac run` uses);
each mutant is one edit of one tree node's source span inside a hole's body: the node's text is
the parser's own span of the source, so the rest of the program keeps its bytes. Operators
(`KINDS`, in the order a capped selection takes them):

- raise: a `raise` statement removed;
- self: `self`, or a parameter, replaced by another value of the same declared type in scope
  (a parameter of the unit, a global, a variable of the entry block);
- edge: an edge reference or connect turned around (`-->` ↔ `<--`, `->:E:->` ↔ `<-:E:<-`);
- branch: an `else`/`elif` branch dropped, an `if`/`while` condition negated;
- swap: an arithmetic, comparison, boolean or augmented-assignment operator swapped;
- const: an integer constant off by one, a boolean flipped;
- bound: a loop bound changed (`range(n)` → `range(n - 1)`/`range(n + 1)`, a loop over `xs` → `xs[1:]`);
- drop: a statement dropped;
- unary: a `not` removed.

Whether a mutant compiles is not decided here: the reward's run (and `jac check -p` when the run
fails) decides it, like any completion's.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from jacrl.tasks.drivers import Driver, DriverError, Hole

KINDS = ("raise", "self", "edge", "branch", "swap", "const", "bound", "drop", "unary")

SWAPS = {
    "+": "-",
    "-": "+",
    "*": "/",
    "/": "*",
    "//": "/",
    "%": "//",
    "==": "!=",
    "!=": "==",
    "<": "<=",
    "<=": "<",
    ">": ">=",
    ">=": ">",
    "in": "not in",
    "not in": "in",
    "is": "is not",
    "is not": "is",
    "and": "or",
    "or": "and",
    "+=": "-=",
    "-=": "+=",
    "*=": "/=",
    "//=": "/=",
}
EDGE_FLIP = {"-->": "<--", "<--": "-->", "->:": "<-:", ":->": ":<-", "<-:": "->:", ":<-": ":->"}
CONNECT_FLIP = {"++>": "<++", "<++": "++>", "+>:": "<+:", ":+>": ":<+", "<+:": "+>:", ":<+": ":+>"}


@dataclass(frozen=True)
class Mutant:
    """One wrong version of a hole's body: what changed, where, and the body to run."""

    kind: str
    line: int  # 1-based line of the edit in the driver file
    what: str
    body: str

    @property
    def key(self) -> str:
        """Names the mutant by its body, so a note about it survives edits elsewhere in the driver."""
        return hashlib.sha256(self.body.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class _Edit:
    kind: str
    start: int
    end: int
    text: str
    what: str


@lru_cache(maxsize=1)
def _uni():
    import jaclang.jac0core.unitree as uni
    from jaclang.jac0core.program import JacProgram

    return uni, JacProgram


def parse_program(text: str, where: str):
    """The jaclang module of a program; a DriverError naming the first parse error."""
    uni, JacProgram = _uni()
    prog = JacProgram()
    mod = prog.parse_str(text, "/mutation/main.jac")
    if prog.errors_had:
        err = prog.errors_had[0]
        raise DriverError(where, getattr(err.loc, "first_line", 1), f"jaclang cannot parse it: {err.msg}")
    return mod


def _walk(node) -> Iterator:
    yield node
    for k in node.kid:
        if k is not None:
            yield from _walk(k)


def _text(src: str, node) -> str:
    return src[node.loc.pos_start : node.loc.pos_end]


def _norm(t: str) -> str:
    return re.sub(r"\s+", "", t)


def _type_of(src: str, node) -> str:
    """The declared type's text of a parameter or assignment (`: T`), "" when none."""
    tag = getattr(node, "type_tag", None)
    return _norm(_text(src, tag).lstrip(":")) if tag is not None else ""


class DriverMutator:
    """Mutants of every hole of one driver, from one parse of its gold program."""

    def __init__(self, driver: Driver):
        self.driver = driver
        self.src = driver.gold_program()
        self.mod = parse_program(self.src, str(driver.path))
        self.uni = _uni()[0]
        # gold-program line n (1-based) is driver line line_map[n - 1]
        skip = driver.marker_lines
        self.line_map = [n for n in range(1, len(driver.lines) + 1) if n not in skip]
        starts = [0]
        for line in self.src.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        self.line_start = starts
        self.globals = self._typed_globals()

    def _span(self, hole: Hole) -> tuple[int, int]:
        """Character offsets of the hole's body in the gold program."""
        first = self.line_map.index(hole.open_line + 1)
        return self.line_start[first], self.line_start[first + len(hole.body)]

    def _typed_globals(self) -> dict[str, str]:
        """Module-level names with a type read from the source: `glob x: T`, and variables of the
        entry blocks annotated `x: T = …` or set from `T(…)` or a `def f(…) -> T` call."""
        uni, src = self.uni, self.src
        returns = {
            a.name_ref.value: _norm(_text(src, a.signature.return_type))
            for a in self.mod.kid
            if isinstance(a, uni.Ability) and getattr(a.signature, "return_type", None) is not None
        }
        archetypes = {a.name.value for a in self.mod.kid if isinstance(a, uni.Archetype)}
        found: dict[str, str] = {}
        for top in self.mod.kid:
            if not isinstance(top, (uni.GlobalVars, uni.ModuleCode)):
                continue
            for a in _walk(top):
                if not isinstance(a, uni.Assignment) or len(a.target) != 1 or not isinstance(a.target[0], uni.Name):
                    continue
                kind = _type_of(src, a)
                call = (
                    a.value.target.value
                    if isinstance(a.value, uni.FuncCall) and isinstance(a.value.target, uni.Name)
                    else ""
                )
                kind = kind or (call if call in archetypes else returns.get(call, ""))
                if kind:
                    found.setdefault(a.target[0].value, kind)
        return found

    def mutants(self, hole: Hole) -> list[Mutant]:
        """Every distinct mutant of the hole's body (none equal to the gold body or blank)."""
        start, end = self._span(hole)
        gold = self.src[start:end]
        seen: set[str] = {gold}
        out: list[Mutant] = []
        for e in self._edits(hole, start, end):
            body = gold[: e.start - start] + e.text + gold[e.end - start :]
            if body in seen or not body.strip():
                continue
            seen.add(body)
            line = self.line_map[self.src.count("\n", 0, e.start)]
            out.append(Mutant(e.kind, line, e.what, body))
        return out

    def _edits(self, hole: Hole, start: int, end: int) -> Iterator[_Edit]:
        inside = [
            n
            for n in _walk(self.mod)
            if n.loc.pos_start >= start and n.loc.pos_end <= end and n.loc.pos_end > n.loc.pos_start
        ]
        unit = self._unit(inside, start)
        names = self._same_type_names(hole, unit)
        for node in inside:
            yield from self._node_edits(node, names)

    def _unit(self, inside: list, start: int):
        """The ability (or impl) whose body holds the hole."""
        uni = self.uni
        node = inside[0] if inside else None
        while node is not None and not isinstance(node, (uni.Ability, uni.ImplDef)):
            node = node.parent
        return node

    def _same_type_names(self, hole: Hole, unit) -> dict[str, list[str]]:
        """For `self` and each typed parameter: the other in-scope names of its type."""
        uni = self.uni
        params: dict[str, str] = {}
        sig = getattr(unit, "signature", None) if unit is not None else None
        for p in getattr(sig, "params", None) or []:
            if isinstance(p, uni.ParamVar) and _type_of(self.src, p):
                params[p.name.value] = _type_of(self.src, p)
        typed = dict(self.globals)
        typed.update(params)  # a parameter shadows a global of its name
        if hole.archetype is not None:
            typed.setdefault("self", hole.archetype.name.split(".")[0])
        out: dict[str, list[str]] = {}
        for name in ["self", *params]:
            if name in typed:
                out[name] = sorted(n for n, t in typed.items() if n != name and t == typed[name])
        return {k: v for k, v in out.items() if v}

    def _node_edits(self, node, names: dict[str, list[str]]) -> Iterator[_Edit]:
        uni, src = self.uni, self.src
        a, b = node.loc.pos_start, node.loc.pos_end
        if isinstance(node, uni.RaiseStmt):
            yield _Edit("raise", a, b, "", "`raise` removed")
        elif isinstance(node, uni.CodeBlockStmt) and self._droppable(node):
            yield _Edit("drop", a, b, "", f"`{_text(src, node).splitlines()[0][:50]}` dropped")
        if isinstance(node, (uni.ElseStmt, uni.ElseIf)):
            yield _Edit("branch", self._else_start(a), b, "", "`else` branch dropped")
        if isinstance(node, (uni.IfStmt, uni.WhileStmt)) and node.condition is not None:
            c = node.condition
            yield _Edit("branch", c.loc.pos_start, c.loc.pos_end, f"not ({_text(src, c)})", "condition negated")
        yield from self._operator_edits(node)
        yield from self._name_edits(node, names)
        yield from self._bound_edits(node)

    def _droppable(self, node) -> bool:
        """A statement of a block (not a `;` token, not a unit or archetype defined inside)."""
        uni = self.uni
        if isinstance(node, (uni.Token, uni.Ability, uni.ArchSpec, uni.ImplDef, uni.ElseIf)):
            return False
        return node.parent is not None and node in (getattr(node.parent, "body", None) or [])

    def _else_start(self, pos: int) -> int:
        """Where the `}` before an else branch ends: the branch goes with the space before it."""
        j = pos
        while j > 0 and self.src[j - 1] in " \t\n":
            j -= 1
        return j

    def _operator_edits(self, node) -> Iterator[_Edit]:
        uni, src = self.uni, self.src
        ops: list = []
        if isinstance(node, (uni.BinaryExpr, uni.BoolExpr)):
            ops = [node.op]
        elif isinstance(node, uni.CompareExpr):
            ops = list(node.ops)
        elif isinstance(node, uni.Assignment) and node.aug_op is not None:
            ops = [node.aug_op]
        for op in ops:
            if not isinstance(op, uni.Token):
                continue
            text = _text(src, op)
            new = SWAPS.get(" ".join(text.split()))
            if new:
                yield _Edit("swap", op.loc.pos_start, op.loc.pos_end, new, f"`{text}` → `{new}`")
        if isinstance(node, uni.Int) and not isinstance(node.parent, uni.UnaryExpr):
            v = _text(src, node)
            if v.isdigit():
                for n in sorted({int(v) + 1, max(int(v) - 1, 0)} - {int(v)}):
                    yield _Edit("const", node.loc.pos_start, node.loc.pos_end, str(n), f"`{v}` → `{n}`")
        if isinstance(node, uni.Bool):
            v = _text(src, node)
            new = "False" if v == "True" else "True"
            yield _Edit("const", node.loc.pos_start, node.loc.pos_end, new, f"`{v}` → `{new}`")
        if isinstance(node, uni.UnaryExpr) and _text(src, node.op) == "not":
            yield _Edit("unary", node.loc.pos_start, node.operand.loc.pos_start, "", "`not` removed")
        if isinstance(node, uni.Token) and _text(src, node) in EDGE_FLIP | CONNECT_FLIP:
            yield from self._flip(node)

    def _flip(self, token) -> Iterator[_Edit]:
        """An edge reference or connect turned around: both of its arrow tokens at once."""
        src, parent = self.src, token.parent
        arrows = [k for k in parent.kid if isinstance(k, self.uni.Token) and _text(src, k) in EDGE_FLIP | CONNECT_FLIP]
        if not arrows or arrows[0] is not token:
            return
        a, b = parent.loc.pos_start, parent.loc.pos_end
        text = src[a:b]
        for k in reversed(arrows):
            t = _text(src, k)
            i, j = k.loc.pos_start - a, k.loc.pos_end - a
            text = text[:i] + (EDGE_FLIP | CONNECT_FLIP)[t] + text[j:]
        yield _Edit("edge", a, b, text, f"`{src[a:b]}` → `{text}`")

    def _name_edits(self, node, names: dict[str, list[str]]) -> Iterator[_Edit]:
        uni, src = self.uni, self.src
        if isinstance(node, uni.SpecialVarRef):
            name = _text(src, node)
        elif isinstance(node, uni.Name) and not isinstance(node.parent, (uni.KWPair, uni.ParamVar)):
            name = node.value
            if src[node.loc.pos_start - 1 : node.loc.pos_start] == "." or name == "self":
                return
        else:
            return
        for other in names.get(name, []):
            yield _Edit("self", node.loc.pos_start, node.loc.pos_end, other, f"`{name}` → `{other}`")

    def _bound_edits(self, node) -> Iterator[_Edit]:
        uni, src = self.uni, self.src
        if isinstance(node, uni.FuncCall) and isinstance(node.target, uni.Name) and node.target.value == "range":
            args = [p for p in node.params or [] if not isinstance(p, uni.KWPair)]
            if args:
                x = args[-1]
                for d in ("- 1", "+ 1"):
                    new = f"({_text(src, x)}) {d}"
                    yield _Edit("bound", x.loc.pos_start, x.loc.pos_end, new, f"range bound `{_text(src, x)}` {d}")
        if isinstance(node, uni.InForStmt):
            c = node.collection
            if not (isinstance(c, uni.FuncCall) and isinstance(c.target, uni.Name) and c.target.value == "range"):
                new = f"({_text(src, c)})[1:]"
                yield _Edit("bound", c.loc.pos_start, c.loc.pos_end, new, "loop skips its first item")


def choose(task_id: str, mutants: list[Mutant], cap: int) -> list[Mutant]:
    """At most `cap` mutants, the same ones every time: kinds taken in turn (KINDS order), each
    kind's mutants in an order fixed by a hash of the task id and the body."""
    by_kind = {k: sorted((m for m in mutants if m.kind == k), key=lambda m: _rank(task_id, m)) for k in KINDS}
    out: list[Mutant] = []
    while len(out) < cap and any(by_kind.values()):
        for k in KINDS:
            if by_kind[k] and len(out) < cap:
                out.append(by_kind[k].pop(0))
    return sorted(out, key=lambda m: (m.line, KINDS.index(m.kind), m.what))


def _rank(task_id: str, m: Mutant) -> str:
    return hashlib.sha256(f"{task_id}\x00{m.body}".encode()).hexdigest()
