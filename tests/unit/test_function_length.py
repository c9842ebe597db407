"""No function or method in the package is longer than MAX_LINES lines (its def to its last line), so each reads
in one screen; the allow-list would name any exception, with its reason."""

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "copilot_otel"
MAX_LINES = 50

# (file under copilot_otel/, qualified name): functions allowed over MAX_LINES, each with its reason. None today.
ALLOWED: set[tuple[str, str]] = set()


def _functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of every function defined under ``node``, methods and nested ones too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child.end_lineno - child.lineno + 1
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def long_functions(root: Path = PACKAGE, limit: int = MAX_LINES) -> list[tuple[str, str, int]]:
    """(file, qualified name, lines) of every function under ``root`` longer than ``limit`` lines."""
    return [(path.relative_to(root).as_posix(), name, lines) for path in sorted(root.rglob("*.py"))
            for name, lines in _functions(ast.parse(path.read_text(), str(path))) if lines > limit]


def test_no_function_is_longer_than_the_limit():
    """Every function over MAX_LINES lines is named, with its length, unless the allow-list holds it."""
    over = [f"copilot_otel/{file}: {name} is {lines} lines (at most {MAX_LINES})"
            for file, name, lines in long_functions() if (file, name) not in ALLOWED]
    assert not over, "split these functions:\n" + "\n".join(over)


def test_the_measure_finds_a_long_function(tmp_path):
    """The measure counts from the def to the last line, and finds methods and nested functions by their names."""
    def body(indent: str) -> list[str]:
        return [f"{indent}x{n} = {n}" for n in range(MAX_LINES)]

    lines = ["class A:", "    def long(self):", *body(" " * 8), "", "    def short(self):", "        pass", "", "",
             "def outer():", "    def inner():", *body(" " * 8)]
    (tmp_path / "module.py").write_text("\n".join(lines) + "\n")
    assert long_functions(tmp_path) == [("module.py", "A.long", MAX_LINES + 1), ("module.py", "outer", MAX_LINES + 2),
                                        ("module.py", "outer.inner", MAX_LINES + 1)]
