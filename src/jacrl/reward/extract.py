"""Completion → the body to splice into the hole.

Models answer in many shapes: reasoning first (`<think>…</think>` and its kin, possibly with
fenced drafts inside), then a fence of any CommonMark form (backticks or tildes, three or more,
an info string, indented) or none, the body alone, the whole unit (inline or as an `impl`
block), the whole file echoed back, prose before or after, all of it inside chat markup. The
text is made plain and cut to its answer turn first (normalize.py: a byte-order mark, NULs,
chat special tokens); reasoning is dropped next, so a draft inside it is never graded. The source project undercounted passes
until it stopped unwrapping the first braces it saw (docs/design.md#decisions); here the hole's unit is found by
kind + name (+ owning archetype) and its brace-matched body taken, with comments and strings
masked so braces inside them never count. For a partial hole the template's own statements
around the hole are cut back off when the answer repeats them.

A body that was never written is a failure: prose only, an empty fence, reasoning that never
ends. So is a body that closes more braces than it opens (it would escape its unit and could
print the expected output from module level), one that opens braces it never closes or whose
unit is never closed (a truncated answer), and one that ends inside a string or comment (it
would swallow the template's code).

Every step is linear in the completion's length, whatever it holds (a model repeating one line
until `max_tokens` writes thousands of unit headers, fence lines or reasoning openers): lexing
and brace matching are one pass each (`jacrl.reward.lexer`: `mask`, `Structure`), a unit's header is resolved by
lookup instead of a scan to its brace, and reasoning blocks are paired in one pass over their tags.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache

from jacrl.reward.lexer import ARCHETYPE_RE, UnitSpan, brace_balance, find_units, innermost, mask
from jacrl.reward.normalize import ChatMarkup, chat_markup, plain_text
from jacrl.tasks.record import HOLE, Task

# CommonMark allows 0-3 spaces before a fence; deeper ones are what list items produce.
FENCE_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
JAC_LANGS = frozenset({"jac", "jaclang"})
NON_CODE_LANGS = frozenset(
    {"text", "txt", "plaintext", "output", "console", "stdout", "shell", "sh", "bash", "markdown", "md"}
)
REASONING_TAGS = ("think", "thinking", "reasoning", "reflection", "scratchpad", "analysis")
_TAGS = "|".join(REASONING_TAGS)
# An opener's attributes stop at the next `<`: a scan for its `>` never passes another tag.
REASONING_OPEN_RE = re.compile(rf"<(?:{_TAGS})(?:\s[^<>]*)?>", re.IGNORECASE)
REASONING_TAG_RE = re.compile(rf"<(?P<open>{_TAGS})(?:\s[^<>]*)?>|</(?P<close>{_TAGS})\s*>(?:[ \t]*\n)?", re.IGNORECASE)
REASONING_CLOSE_RE = re.compile(rf"</(?:{_TAGS})\s*>(?:[ \t]*\n)?", re.IGNORECASE)
ANSWER_RE = re.compile(r"<answer>(?P<answer>.*?)(?:</answer>|\Z)", re.IGNORECASE | re.DOTALL)
FINAL_CHANNEL = "<|channel|>final<|message|>"  # harmony-format chat: what follows is the answer
TODO_RE = re.compile(r"^[ \t]*#\s*TODO\b.*$", re.IGNORECASE)
WORD_RE = re.compile(r"[A-Za-z][A-Za-z']*")
# A label: up to eight words (letters, digits, `'`, `-`, `/`, one parenthesised aside), in emphasis or not.
LABEL_RE = re.compile(r"(?P<em>\*{1,2}|_{1,2})?[A-Za-z][\w'/-]*(?: [\w'/-]+){0,7}(?: \([\w' /-]+\))?:?(?P=em)?:?")


# ---------------------------------------------------------------- fences and prose


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int = 0  # index of the opening fence's line in the text


def _info_lang(info: str) -> str:
    """The language of a fence's info string: `jac`, `python {.x}`, `{.jac .numberLines}`, `jac:main.jac`."""
    m = re.match(r"[\s{.]*(?P<lang>[\w+#-]*)", info)
    return m["lang"].lower()


def _unindent(line: str, n: int) -> str:
    """Up to `n` columns of leading whitespace removed (a fence's own indentation)."""
    k = 0
    while k < len(line) and k < n and line[k] in " \t":
        k += 1
    return line[k:]


def fenced_blocks(text: str) -> list[Block]:
    """Fenced code blocks in order, CommonMark rules: ``` or ~~~ (three or more), an info string
    (backtick fences' may hold no backtick), closed only by a line of the same character at least
    as long; an unclosed fence runs to the end of the text. A closing fence glued to the last
    code line (`x;```) closes it too: models write that."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        char, size, indent = m["fence"][0], len(m["fence"]), len(m["indent"])
        j, code = i + 1, []
        while j < len(lines):
            line = _unindent(lines[j], indent)
            tail = line.rstrip()
            run = len(tail) - len(tail.rstrip(char))
            if run >= size and not tail[:-run].strip():
                break
            if run >= size:
                code.append(tail[:-run])
                break
            code.append(line)
            j += 1
        text_of = "\n".join(code)
        # A fence left open runs to the end, and so takes in any prose after the code.
        blocks.append(Block(_info_lang(m["info"]), text_of if j < len(lines) else trim_prose(text_of, lead=False), i))
        i = j + 1
    return blocks


def drop_reasoning_blocks(text: str) -> str:
    """Every closed reasoning block removed: from the leftmost opener on, each opener with the
    first closer of its tag after it (as `re.sub` of `<tag …>.*?</tag>` would), paired in one
    pass over the tags instead of a scan to the text's end per opener."""
    tags = list(REASONING_TAG_RE.finditer(text))
    closer: list[int | None] = [None] * len(tags)
    nearest: dict[str, int] = {}
    for i in range(len(tags) - 1, -1, -1):
        if tags[i]["close"]:
            nearest[tags[i]["close"].lower()] = i
        else:
            closer[i] = nearest.get(tags[i]["open"].lower())
    out, at = [], 0
    for tag, close in zip(tags, closer):
        if close is not None and tag.start() >= at:
            out.append(text[at : tag.start()])
            at = tags[close].end()
    return "".join(out) + text[at:]


def answer_text(completion: str, markup: ChatMarkup | None = None) -> tuple[str, bool]:
    """(the completion without its reasoning, whether reasoning was dropped).

    The text is made plain and cut to the answer turn first (normalize.py; `markup`: the chat
    tokens, CHAT_TOKENS by default). Closed reasoning blocks go wherever they are; a closer
    without an opener (the chat template opened the block) drops everything before it. After an
    opener never closed only the last fence counts, as the answer the reasoning ran into; with
    no fence there, nothing was answered.
    """
    text = plain_text(completion)
    final = text.rsplit(FINAL_CHANNEL, 1)[-1]
    turn = (markup or chat_markup()).answer_turn(final)
    out = drop_reasoning_blocks(turn)
    closers = list(REASONING_CLOSE_RE.finditer(out))
    if closers:
        out = out[closers[-1].end() :]
    opener = REASONING_OPEN_RE.search(out)
    if opener:
        rest = out[opener.end() :]
        blocks = fenced_blocks(rest)
        out = out[: opener.start()] + ("\n".join(rest.split("\n")[blocks[-1].line :]) if blocks else "")
    reasoned = final != text or out != turn
    answer = ANSWER_RE.search(out)
    return (answer["answer"] if answer else out), reasoned


def _is_label(s: str) -> bool:
    """A one-line label or heading before an answer: a few words ending in a colon (`Answer:`, `The
    body (Jac):`), or wrapped in emphasis (`**Solution**`, `__Code:__`)."""
    m = LABEL_RE.fullmatch(s)
    return bool(m) and (s.rstrip("*_").endswith(":") or bool(m["em"])) and not s.startswith(("case ", "default"))


def _is_prose(line: str) -> bool:
    s = line.strip()
    if not s or s.startswith(("#", '"""', "'''")) or s.startswith(("case ", "default")):
        return False
    if _is_label(s):
        return True
    if s[-1] in ";{}()[],=+-*/<>|&":
        return False
    return len(WORD_RE.findall(s)) >= 3 and (s[-1] in ".:!?" or s[0].isupper())


def trim_prose(text: str, lead: bool = True) -> str:
    """Drop runs of prose lines before the first (when `lead`) and after the last line of code."""
    lines = text.split("\n")
    lo, hi = 0, len(lines)
    while lead and lo < hi and (not lines[lo].strip() or _is_prose(lines[lo])):
        lo += 1
    while hi > lo and (not lines[hi - 1].strip() or _is_prose(lines[hi - 1])):
        hi -= 1
    return "\n".join(lines[lo:hi])


# ---------------------------------------------------------------- the extractor


@dataclass(frozen=True)
class Extraction:
    body: str  # dedented, no leading/trailing blank lines; "" when nothing usable
    method: str  # how it was found: fence/raw + unit/partial, or empty/rejected
    rejected: str = ""  # why the body may not be spliced ("" when it may)

    @property
    def ok(self) -> bool:
        return bool(self.body) and not self.rejected


def clean_lines(text: str) -> str:
    """Remove TODO placeholder and __HOLE__ lines, blank edge lines, then dedent."""
    kept = [ln.rstrip() for ln in text.split("\n") if not TODO_RE.match(ln) and ln.strip() != HOLE]
    lo, hi = 0, len(kept)
    while lo < hi and not kept[lo]:
        lo += 1
    while hi > lo and not kept[hi - 1]:
        hi -= 1
    return textwrap.dedent("\n".join(kept[lo:hi]))


def _has_code(text: str) -> bool:
    return bool(mask(text).text.strip())


def _pick_unit(code: str, kind: str, name: str, archetype: str = "") -> UnitSpan | None:
    """The unit to take the body from: same own name; at the hole's owner first (inside its
    archetype or an `impl` of it: methods of the same name in other archetypes are common),
    then the hole's kind, then order. `name` may be an impl's dotted name."""
    masked = mask(code).text
    method = name.rsplit(".", 1)[-1]
    owner = name.rsplit(".", 2)[-2] if "." in name else archetype
    spans = [s for s in find_units(code, masked) if s.method == method]
    if not spans:
        return None
    homes = innermost(find_units(code, masked, ARCHETYPE_RE), [s.start for s in spans])
    at_home = [(s.owner if s.kind == "impl" else home) == owner for s, home in zip(spans, homes)]
    ranked = sorted(zip(spans, at_home), key=lambda sh: (not sh[1], sh[0].kind != kind))
    # A body without code holds no other unit's header, so the bodies tried before the first
    # with code never overlap: the loop reads each character once.
    return next((s for s, _ in ranked if _has_code(clean_lines(s.body(code)))), None)


@lru_cache(maxsize=2048)
def _template_info(template: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(enclosing archetype name, unit statements before the hole, after it) of a template."""
    at = next(m.start() for m in re.finditer(r"^[ \t]*__HOLE__[ \t]*$", template, re.M))
    masked = mask(template).text
    archs = [a for a in find_units(template, masked, ARCHETYPE_RE) if a.open < at < a.close]
    archetype = max(archs, key=lambda a: a.open).name if archs else ""
    inner = [s for s in find_units(template, masked) if s.open < at < s.close]
    if not inner:
        return archetype, (), ()
    span = max(inner, key=lambda s: s.open)
    before = template[span.open + 1 : at].split("\n")[1:]
    after = template[at : span.close].split("\n")[1:]
    return archetype, tuple(before), tuple(after)


def hole_context(task: Task) -> tuple[list[str], list[str]]:
    """The template's statements of the hole's unit before and after the __HOLE__ line."""
    _, before, after = _template_info(task.template)
    return list(before), list(after)


def _norm(line: str) -> str:
    return " ".join(line.split())


def cut_context(body: str, before: list[str], after: list[str]) -> str:
    """Cut the template's own statements back off a partial-hole answer that repeats them.

    A side is cut only when the answer starts (ends) with all of it, and only if what
    remains is brace-balanced; both sides first, then one, then none.
    """
    lines = body.split("\n")
    code_at = [i for i, ln in enumerate(lines) if ln.strip()]
    got = [_norm(lines[i]) for i in code_at]
    pre = [_norm(ln) for ln in before if ln.strip()]
    post = [_norm(ln) for ln in after if ln.strip()]
    can_pre = bool(pre) and got[: len(pre)] == pre
    can_post = bool(post) and len(got) >= len(pre) * can_pre + len(post) and got[len(got) - len(post) :] == post
    for cut_pre, cut_post in ((can_pre, can_post), (can_pre, False), (False, can_post)):
        if not (cut_pre or cut_post):
            continue
        lo = code_at[len(pre) - 1] + 1 if cut_pre else 0
        hi = code_at[len(got) - len(post)] if cut_post else len(lines)
        rest = "\n".join(lines[lo:hi])
        if lo <= hi and brace_balance(rest) == (0, 0) and _has_code(rest):
            return rest
    return body


def _block_code(blocks: list[Block], kind: str, name: str, archetype: str) -> str:
    """The code of the fence to read: jac fences first, program output last; among those, the
    first holding the hole's unit, else the first with code."""
    rank = lambda b: 0 if b.lang in JAC_LANGS else 2 if b.lang in NON_CODE_LANGS else 1  # noqa: E731
    coded = [b for b in blocks if _has_code(b.code)]
    if not coded:
        return ""
    top = min(map(rank, coded))
    best = [b for b in coded if rank(b) == top]
    return next((b.code for b in best if _pick_unit(b.code, kind, name, archetype)), best[0].code)


def _locate(text: str, task: Task) -> tuple[str, UnitSpan | None, str]:
    """(the code the body comes from, the hole's unit in it if echoed, where it came from)."""
    kind, name = task.unit.kind, task.unit.name
    archetype = _template_info(task.template)[0]
    blocks = fenced_blocks(text)
    if blocks:
        code, source = _block_code(blocks, kind, name, archetype), "fence"
    else:
        # An unfenced echo is read whole first: trimming "prose" would cut a docstring's first
        # line and leave its closing quotes to swallow the file.
        code, source = text, "raw"
        if not _pick_unit(code, kind, name, archetype):
            code = trim_prose(text)
    return code, _pick_unit(code, kind, name, archetype), source


def extract_body(completion: str, task: Task, markup: ChatMarkup | None = None) -> Extraction:
    """The body to splice for `task` from a raw model completion (`markup`: its chat tokens)."""
    text, reasoned = answer_text(completion or "", markup)
    if not text.strip():
        return Extraction("", "empty")
    code, unit, source = _locate(text, task)
    body = clean_lines(unit.body(code) if unit else code)
    method = ("think+" if reasoned else "") + source + ("+unit" if unit else "")
    if task.partial and body:
        before, after = hole_context(task)
        cut = cut_context(body, before, after)
        if cut != body:
            body, method = clean_lines(cut), method + "+cut"
    if not _has_code(body):
        return Extraction("", "empty")
    low, depth = brace_balance(body)
    if low < 0:
        return Extraction(body, method, "closes a brace it did not open (would escape its unit)")
    if mask(body).open_at_end:
        return Extraction(body, method, "ends inside a string or block comment")
    if depth > 0 or (unit and unit.close >= len(code)):
        return Extraction(body, method, "opens a brace it never closes (a truncated answer)")
    return Extraction(body, method)


def normalize_body(body: str) -> str:
    """The form bodies are compared in: dedented, trailing spaces and edge blank lines removed."""
    return clean_lines(body)
