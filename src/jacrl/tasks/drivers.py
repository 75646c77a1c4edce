"""Parse Jac driver programs: hole markers, the enclosing unit of each hole, the source tag.

A driver is a complete Jac program in which one or more unit bodies (or runs of statements
inside a body) are wrapped in

    # >>>HOLE id="<id>" instruction="<text>"
    ...gold lines...
    # <<<HOLE

Everything here is static: nothing is executed. Errors carry `file:line` and say what is wrong.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

from jacrl.reward.lexer import mask

OPEN_RE = re.compile(r'^(?P<indent>[ \t]*)# >>>HOLE\s+id="(?P<id>[^"]*)"\s+instruction="(?P<instr>[^"]*)"\s*$')
CLOSE_RE = re.compile(r"^[ \t]*# <<<HOLE\s*$")
SOURCE_RE = re.compile(r"^\s*source:\s*(?P<source>[a-z][a-z0-9_]*)\s*$", re.MULTILINE)
UNIT_RE = re.compile(r"\b(?P<kind>def|can|impl|walker|node|edge|obj|class|enum)\s+(?P<name>[A-Za-z_][\w.]*)")
ARCHETYPE_KINDS = {"walker", "node", "edge", "obj", "class", "enum"}
OSP_KINDS = {"walker", "node", "edge"}
OSP_TOKEN_RE = re.compile(
    r"\bvisit\b|\bvisitor\b|\bspawn\b|\bdisengage\b|\bhere\b|\breport\b|-->|<--|\+\+>|<\+\+|->:|:->|<-:|:<-|\+>:|:\+>"
)

# Static determinism screen; the build also runs every driver twice and compares stdout.
FORBIDDEN = [
    (re.compile(r"\bjid\s*\("), "calls jid(), whose value differs on every run"),
    (re.compile(r"\binput\s*\("), "reads input()"),
    (re.compile(r"\b_now\s*\("), "reads the clock (_now())"),
    (re.compile(r"\bimport\b[^;\n]*\b(time|datetime|uuid|secrets)\b"), "imports a clock or id module"),
    (re.compile(r"\bos\.environ\b|\bgetenv\s*\("), "reads the environment"),
]
RANDOM_IMPORT_RE = re.compile(r"\bimport\b[^;\n]*\brandom\b")
RANDOM_SEED_RE = re.compile(r"\bseed\s*\(")


class DriverError(ValueError):
    """A problem in a driver file, reported as `path:line: message`."""

    def __init__(self, path: str | Path, line: int, message: str):
        self.path, self.line, self.message = str(path), line, message
        super().__init__(f"{path}:{line}: {message}")


@dataclass(frozen=True)
class Unit:
    kind: str
    name: str


@dataclass(frozen=True)
class Hole:
    id: str
    instruction: str
    open_line: int  # 1-based line of `# >>>HOLE`
    close_line: int  # 1-based line of `# <<<HOLE`
    indent: str
    body: tuple[str, ...]  # the gold lines between the markers, verbatim
    unit: Unit
    archetype: Unit | None
    partial: bool
    osp: bool


@dataclass(frozen=True)
class Driver:
    path: Path
    family: str
    source: str
    lines: tuple[str, ...]
    holes: tuple[Hole, ...] = field(default_factory=tuple)

    @property
    def marker_lines(self) -> set[int]:
        return {n for h in self.holes for n in (h.open_line, h.close_line)}

    def gold_program(self) -> str:
        """The driver with every marker line removed: what the build runs for expected stdout."""
        skip = self.marker_lines
        return "".join(line + "\n" for n, line in enumerate(self.lines, 1) if n not in skip)

    def render(self, hole: Hole, placeholder: str) -> str:
        """The program with `hole` replaced by one `indent + placeholder` line.

        The other holes keep their gold bodies; their marker lines are dropped.
        """
        out: list[str] = []
        skip = self.marker_lines
        for n, line in enumerate(self.lines, 1):
            if n == hole.open_line:
                out.append(hole.indent + placeholder)
            elif hole.open_line < n <= hole.close_line or n in skip:
                continue
            else:
                out.append(line)
        return "".join(line + "\n" for line in out)


def mask_code(text: str) -> str:
    """Comments and string contents blanked (newlines and quotes kept), so braces, semicolons and
    keywords can be found by plain scanning — the reward's Jac lexer, shared."""
    return mask(text).text


@dataclass
class _Block:
    header: str
    open_line: int
    open_pos: int
    close_line: int = 0


def _blocks(masked: str) -> list[_Block]:
    """Every `{ ... }` block of the masked text with its header (the text since the previous
    statement boundary) and the lines it opens and closes on."""
    blocks: list[_Block] = []
    stack: list[_Block] = []
    line, start = 1, 0
    for pos, c in enumerate(masked):
        if c == "\n":
            line += 1
        elif c == "{":
            blk = _Block(header=" ".join(masked[start:pos].split()), open_line=line, open_pos=pos)
            blocks.append(blk)
            stack.append(blk)
            start = pos + 1
        elif c == "}":
            if stack:
                stack.pop().close_line = line
            start = pos + 1
        elif c == ";":
            start = pos + 1
    for blk in stack:  # unbalanced: leave open to end of file
        blk.close_line = line + 1
    return blocks


def _unit_of(header: str) -> Unit | None:
    m = UNIT_RE.search(header)
    return Unit(m["kind"], m["name"]) if m else None


def _has_code(masked_lines: list[str], first: int, last: int) -> bool:
    """Whether 1-based lines first..last (inclusive) of the masked text hold any code."""
    return any(masked_lines[k - 1].strip() for k in range(max(first, 1), last + 1))


def read_source_tag(path: Path, text: str) -> str:
    m = re.match(r'\s*(?:"""|\'\'\')(?P<doc>.*?)(?:"""|\'\'\')', text, re.DOTALL)
    if not m:
        raise DriverError(path, 1, "driver must open with a module docstring declaring 'source: <slug>'")
    tag = SOURCE_RE.search(m["doc"])
    if not tag:
        raise DriverError(path, 1, "module docstring does not declare 'source: <slug>' (lowercase slug)")
    return tag["source"]


def parse_driver(path: str | Path, family: str | None = None) -> Driver:
    """Parse one driver file; raises DriverError at the first problem found."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    source = read_source_tag(path, text)
    masked = mask_code(text)
    _screen_determinism(path, masked)
    spans = _pair_markers(path, lines)
    blocks = _blocks(masked)
    holes: list[Hole] = []
    seen: dict[str, int] = {}
    for open_line, close_line, m in spans:
        hid, instruction, body = _hole_markup(path, lines, blocks, open_line, close_line, m, seen)
        unit, archetype, partial, osp = _hole_unit(path, masked, blocks, hid, open_line, close_line)
        holes.append(Hole(hid, instruction, open_line, close_line, m["indent"], body, unit, archetype, partial, osp))
    return Driver(path=path, family=family or path.parent.name, source=source, lines=tuple(lines), holes=tuple(holes))


def _screen_determinism(path: Path, masked: str) -> None:
    """The static determinism screen (FORBIDDEN, unseeded random) over the masked text."""
    masked_lines = masked.splitlines()
    for lineno, mline in enumerate(masked_lines, 1):
        for pattern, why in FORBIDDEN:
            if pattern.search(mline):
                raise DriverError(path, lineno, f"not deterministic: {why}")
    if RANDOM_IMPORT_RE.search(masked) and not RANDOM_SEED_RE.search(masked):
        lineno = next(k for k, ml in enumerate(masked_lines, 1) if RANDOM_IMPORT_RE.search(ml))
        raise DriverError(path, lineno, "not deterministic: imports random without seeding it")


def _pair_markers(path: Path, lines: list[str]) -> list[tuple[int, int, re.Match[str]]]:
    """(open line, close line, open-marker match) of every hole, in file order."""
    spans: list[tuple[int, int, re.Match[str]]] = []
    open_at: tuple[int, re.Match[str]] | None = None
    for lineno, line in enumerate(lines, 1):
        if ">>>HOLE" in line:
            m = OPEN_RE.match(line)
            if not m:
                raise DriverError(
                    path, lineno, 'malformed hole marker; expected # >>>HOLE id="<id>" instruction="<text>"'
                )
            if open_at is not None:
                raise DriverError(path, lineno, f"nested hole: the hole opened at line {open_at[0]} is not closed yet")
            open_at = (lineno, m)
        elif "<<<HOLE" in line:
            if not CLOSE_RE.match(line):
                raise DriverError(path, lineno, "malformed closing marker; expected a line '# <<<HOLE'")
            if open_at is None:
                raise DriverError(path, lineno, "'# <<<HOLE' without an open hole")
            spans.append((open_at[0], lineno, open_at[1]))
            open_at = None
    if open_at is not None:
        raise DriverError(path, open_at[0], "missing '# <<<HOLE' for the hole opened here")
    if not spans:
        raise DriverError(path, 1, "driver has no hole markers")
    return spans


def _hole_markup(
    path: Path,
    lines: list[str],
    blocks: list[_Block],
    open_line: int,
    close_line: int,
    m: re.Match[str],
    seen: dict[str, int],
) -> tuple[str, str, tuple[str, ...]]:
    """A hole's id, instruction and gold body, checked; `seen` collects the ids (first line of each)."""
    hid, instruction = m["id"], m["instr"].strip()
    if not hid.isidentifier() or keyword.iskeyword(hid):
        raise DriverError(path, open_line, f"hole id {hid!r} is not a valid identifier")
    if hid in seen:
        raise DriverError(path, open_line, f"duplicate hole id {hid!r} (first at line {seen[hid]})")
    seen[hid] = open_line
    if not instruction:
        raise DriverError(path, open_line, f"hole {hid!r} has an empty instruction")
    body = tuple(lines[open_line : close_line - 1])
    if not any(b.strip() for b in body):
        raise DriverError(path, open_line, f"hole {hid!r} has an empty gold body")
    for blk in blocks:
        opens_inside = open_line < blk.open_line < close_line
        closes_inside = open_line < blk.close_line < close_line
        if opens_inside != closes_inside:
            raise DriverError(path, open_line, f"hole {hid!r} crosses a block boundary (block at line {blk.open_line})")
    return hid, instruction, body


def _hole_unit(
    path: Path, masked: str, blocks: list[_Block], hid: str, open_line: int, close_line: int
) -> tuple[Unit, Unit | None, bool, bool]:
    """The innermost unit enclosing a hole, its archetype, whether the hole is partial, and
    whether it is object-spatial code."""
    masked_lines = masked.splitlines()
    enclosing = sorted(
        (b for b in blocks if b.open_line < open_line and b.close_line > close_line),
        key=lambda b: b.open_pos,
        reverse=True,
    )
    unit_blk = next((b for b in enclosing if _unit_of(b.header)), None)
    if unit_blk is None:
        raise DriverError(path, open_line, f"hole {hid!r} is not inside a unit body (def/can/walker/node/edge/obj)")
    unit = _unit_of(unit_blk.header)
    assert unit is not None
    outer = [u for b in enclosing if b.open_pos < unit_blk.open_pos and (u := _unit_of(b.header))]
    archetype = next((u for u in outer if u.kind in ARCHETYPE_KINDS), None)
    if unit.kind in ARCHETYPE_KINDS and archetype is None:
        archetype = unit
    partial = _has_code(masked_lines, unit_blk.open_line + 1, open_line - 1) or _has_code(
        masked_lines, close_line + 1, unit_blk.close_line - 1
    )
    unit_code = "\n".join(masked_lines[unit_blk.open_line - 1 : unit_blk.close_line])
    osp = bool(
        (archetype and archetype.kind in OSP_KINDS)
        or unit.kind in OSP_KINDS
        or _impl_owner_kind(unit, masked) in OSP_KINDS
        or OSP_TOKEN_RE.search(unit_code)
    )
    return unit, archetype, partial, osp


def _impl_owner_kind(unit: Unit, masked: str) -> str | None:
    """The archetype kind an `impl X.m` body belongs to (X declared elsewhere in the driver):
    an impl of a walker's or node's ability is object-spatial code like the ability itself."""
    if unit.kind != "impl" or "." not in unit.name:
        return None
    owner = re.escape(unit.name.split(".")[0])
    m = re.search(rf"\b(?P<kind>walker|node|edge|obj|class)\s+{owner}\b", masked)
    return m["kind"] if m else None


def discover_drivers(root: str | Path) -> list[Path]:
    """Driver files under `root` (a drivers folder, a family folder, or one file), sorted."""
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"drivers path {root} does not exist")
    return sorted(
        p
        for p in root.rglob("*.jac")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
