"""Jac source read as code, in one pass each and linear in its length whatever it holds: comments and
string contents masked (`mask`), brackets matched (`Structure`), units found by their header
(`find_units`), and the program as it runs with comments and layout removed (`program_meaning`)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

# `impl Owner.name` blocks are units too: their name keeps the owner (`Circle.area`).
UNIT_RE = re.compile(r"\b(?P<kind>def|can|impl)\b(?:[ \t]*:[ \t]*\w+)?\s+(?P<name>[A-Za-z_][\w.]*)")
ARCHETYPE_RE = re.compile(r"\b(?P<kind>obj|node|walker|edge|class)\b(?:[ \t]*:[ \t]*\w+)?\s+(?P<name>[A-Za-z_]\w*)")


@dataclass(frozen=True)
class Masked:
    text: str  # comments and string contents blanked (newlines and quotes kept)
    open_at_end: bool  # the text ends inside a string or block comment
    strings: tuple[tuple[int, int, int], ...] = ()  # each literal: (opening quote, content start, content end)


# A comment or a string literal, found in one scan. A backslash escapes the next character (a
# newline too); a one-line string also ends at its line's end, a block comment or a triple-quoted
# string at the text's end (where it is still open).
LITERAL_RE = re.compile(
    r"(?P<comment>#\*(?s:.*?)(?:(?P<comment_end>\*#)|\Z)|#[^\n]*)"
    r"""|(?P<triple>\"\"\"|''')(?:(?!(?P=triple))[^\\]|\\(?s:.)|\\\Z)*(?P<triple_end>(?P=triple))?"""
    r"""|(?P<single>["'])(?:(?!(?P=single))[^\\\n]|\\(?s:.)|\\\Z)*(?P<single_end>(?P=single))?"""
)
STRUCTURE_RE = re.compile(r"[()\[\]{};]")
BRACE_RE = re.compile(r"[{}]")


def _blank(text: str) -> str:
    return "\n".join(" " * len(line) for line in text.split("\n"))


@lru_cache(maxsize=16)
def mask(code: str) -> Masked:
    """Blank comments (`# ...`, `#* ... *#`) and string contents, keeping offsets and newlines."""
    out: list[str] = []
    strings: list[tuple[int, int, int]] = []
    at, open_at_end = 0, False
    for m in LITERAL_RE.finditer(code):
        a, b = m.span()
        out.append(code[at:a])
        quote = m["triple"] or m["single"]
        if quote:
            end = b - len(quote) if m["triple_end"] or m["single_end"] else b
            strings.append((a, a + len(quote), end))
            out += (quote, _blank(code[a + len(quote) : end]), code[end:b])
            open_at_end = bool(m["triple"]) and not m["triple_end"]
        else:
            out.append(_blank(code[a:b]))
            open_at_end = m["comment"].startswith("#*") and not m["comment_end"]
        at = b
    out.append(code[at:])
    return Masked("".join(out), open_at_end, tuple(strings))


@dataclass(frozen=True)
class Structure:
    """The brackets of a masked text, from one pass over its `( ) [ ] { } ;`."""

    text: str
    close: dict[int, int]  # each `{` → its `}` (the text's length when never closed)
    at: list[int]  # offsets of the structural characters, in order
    depth: list[int]  # the ( [ depth before each
    stops: dict[int, list[int]]  # depth → offsets of the `{ } ; ) ]` at it, in order

    def body_brace(self, end: int) -> int:
        """The `{` opening the body of a declaration whose header ends at `end`, or -1. The
        header runs to its first `{`, `;` or `}` outside brackets it opened, or to a `)`/`]`
        closing one it did not open (it was an expression: `[edge here -->]`): the first of the
        `stops` at the depth where it ends. Only a `{` there opens a body."""
        i = bisect_left(self.at, end)
        level = self.stops.get(self.depth[i], []) if i < len(self.at) else []
        j = bisect_left(level, end)
        return level[j] if j < len(level) and self.text[level[j]] == "{" else -1


@lru_cache(maxsize=16)
def structure(masked: str) -> Structure:
    close: dict[int, int] = {}
    opened: list[int] = []
    at: list[int] = []
    depths: list[int] = []
    stops: defaultdict[int, list[int]] = defaultdict(list)
    depth = 0
    for m in STRUCTURE_RE.finditer(masked):
        k, ch = m.start(), m[0]
        at.append(k)
        depths.append(depth)
        if ch in "([":
            depth += 1
            continue
        stops[depth].append(k)
        if ch in ")]":
            depth -= 1
        elif ch == "{":
            opened.append(k)
        elif ch == "}" and opened:
            close[opened.pop()] = k
    close.update((k, len(masked)) for k in opened)
    return Structure(masked, close, at, depths, dict(stops))


@dataclass(frozen=True)
class UnitSpan:
    kind: str
    name: str
    start: int  # offset of the keyword
    open: int  # offset of the body's `{`
    close: int  # offset of the matching `}` (len(code) when never closed)

    def body(self, code: str) -> str:
        return code[self.open + 1 : self.close]

    @property
    def method(self) -> str:
        """The unit's own name (`area` of `impl Circle.area`)."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def owner(self) -> str:
        """The archetype an `impl` names (`Circle` of `impl Shapes.Circle.area`); "" otherwise."""
        return self.name.rsplit(".", 2)[-2] if "." in self.name else ""


def find_units(code: str, masked: str | None = None, pattern: re.Pattern = UNIT_RE) -> list[UnitSpan]:
    """Every `def`/`can`/`impl` with a brace body, in order of appearance (nested ones included)."""
    shape = structure(mask(code).text if masked is None else masked)
    spans = []
    for m in pattern.finditer(shape.text):
        at = shape.body_brace(m.end())
        if at >= 0:
            spans.append(UnitSpan(m["kind"], m["name"], m.start(), at, shape.close[at]))
    return spans


def innermost(spans: list[UnitSpan], points: list[int]) -> list[str]:
    """For each of the increasing `points`, the name of the innermost span whose body holds it
    ("" when none; of spans sharing a brace, the first). Brace-matched bodies nest or are
    disjoint, so one sweep with a stack finds them all."""
    order = sorted(spans, key=lambda s: s.open)
    stack: list[UnitSpan] = []
    names, i = [], 0
    for p in points:
        while i < len(order) and order[i].open < p:
            s, i = order[i], i + 1
            while stack and stack[-1].close <= s.open:
                stack.pop()
            if not stack or stack[-1].open != s.open:
                stack.append(s)
        while stack and stack[-1].close <= p:
            stack.pop()
        names.append(stack[-1].name if stack else "")
    return names


def brace_balance(code: str) -> tuple[int, int]:
    """(lowest running depth, final depth) of `{`/`}` outside strings and comments."""
    depths = list(accumulate(1 if ch == "{" else -1 for ch in BRACE_RE.findall(mask(code).text)))
    return min(0, min(depths, default=0)), depths[-1] if depths else 0


# What this lexer may misread, so a program holding it is kept as written: a backslash outside
# strings (trailing spaces after it make or break a line continuation) and inline Python
# (`::py::`, whose lines and `#` are Python's).
UNSURE_RE = re.compile(r"\\|::py::")


def _squeeze(run: str, first: bool, last: bool) -> str:
    """A stretch of code between string literals with its blank lines and the whitespace around
    its lines dropped: its first line goes on from a string (or starts the text), its last leads
    into one (or ends the text), so only the sides of those that touch no string may go."""
    head, *rest = run.split("\n")
    if not rest:
        return (head.strip() if first else head.rstrip()) if last else (head.lstrip() if first else head)
    tail = rest.pop()
    head = head.strip() if first else head.rstrip()
    lines = [head] if head or not first else []
    lines += [ln.strip() for ln in rest if ln.strip()]
    if not last:
        lines.append(tail.lstrip())
    elif tail.strip():
        lines.append(tail.strip())
    return "\n".join(lines)


def program_meaning(code: str) -> str:
    """The program as it runs, the form its run is keyed on: comments removed (a block comment
    leaves its newlines, or a space), then blank lines and each line's indentation and trailing
    whitespace (Jac is not indentation-sensitive), while every string literal is kept exactly as
    written (the same lexer as `mask` tells them apart). A program this lexer may misread
    (`UNSURE_RE` outside strings: a line continuation, inline Python) comes back unchanged."""
    pieces: list[tuple[bool, str]] = []  # (a string literal, its text)
    at = 0
    for m in LITERAL_RE.finditer(code):
        pieces.append((False, code[at : m.start()]))
        if m["comment"] is None:
            pieces.append((True, m[0]))
        elif m[0].startswith("#*"):
            pieces.append((False, "\n" * m[0].count("\n") or " "))
        at = m.end()
    pieces.append((False, code[at:]))
    runs: list[tuple[bool, str]] = []
    for is_string, text in pieces:  # code around a removed comment is one stretch
        if runs and not is_string and not runs[-1][0]:
            runs[-1] = (False, runs[-1][1] + text)
        else:
            runs.append((is_string, text))
    if any(not is_string and UNSURE_RE.search(text) for is_string, text in runs):
        return code
    last = len(runs) - 1
    return "".join(text if is_string else _squeeze(text, k == 0, k == last) for k, (is_string, text) in enumerate(runs))
