"""The shape of src/jacrl: lines per package and the longest functions (ast spans, decorators
excluded). Run before and after a refactor to compare: `python bench/code_shape.py [--top N]`."""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "jacrl"


def functions(path: Path) -> list[tuple[int, str]]:
    """(length in lines, qualified name) of every function and method in one module."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                out.append((child.end_lineno - child.lineno + 1, name))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), f"{path.relative_to(SRC)}:")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    lines: Counter[str] = Counter()
    funcs: list[tuple[int, str]] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        package = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        lines[package] += len(path.read_text().splitlines())
        funcs += functions(path)
    print("| package | lines |\n|---|---:|")
    for package, n in sorted(lines.items()):
        print(f"| {package} | {n} |")
    print(f"| **total** | **{sum(lines.values())}** |\n")
    over = sum(1 for n, _ in funcs if n > 60)
    print(f"{len(funcs)} functions, {over} longer than 60 lines; the longest:\n")
    print("| lines | function |\n|---:|---|")
    for n, name in sorted(funcs, reverse=True)[: args.top]:
        print(f"| {n} | `{name}` |")


if __name__ == "__main__":
    main()
