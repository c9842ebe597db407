"""The package's rooms (its subpackages and top-level modules) import one another in one direction only."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "copilot_otel"


def _room(parts: tuple[str, ...]) -> str:
    """A module's room: its subpackage (``export``), or the top-level module itself (``config``)."""
    return parts[0].removesuffix(".py")


def room_imports() -> dict[str, dict[str, set[str]]]:
    """room -> the rooms it imports (anywhere in its code, lazily too) -> the files that do."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).parts
        room = _room(relative)
        package = list(relative[:-1])
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                    target = [*base, *(node.module.split(".") if node.module else [])]
                    if not node.module:  # from . import x: x is the module
                        target = [*target, node.names[0].name]
                elif (node.module or "").startswith("copilot_otel."):
                    target = node.module.split(".")[1:]
                else:
                    continue
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1:] for a in node.names if a.name.startswith("copilot_otel.")]
                if not names:
                    continue
                target = names[0]
            else:
                continue
            if target and _room(tuple(target)) != room:
                graph.setdefault(room, {}).setdefault(_room(tuple(target)), set()).add(str(path.relative_to(PACKAGE)))
    return graph


def _cycle(graph: dict[str, dict[str, set[str]]]) -> list[str] | None:
    """One cycle of the graph, as the rooms along it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_two_rooms_import_each_other():
    """No cycle of imports between rooms (config -> export, never back; the web view never imports the daemon)."""
    graph = room_imports()
    cycle = _cycle(graph)
    where = [f"{a} -> {b}: {sorted(graph[a][b])}" for a, b in zip(cycle, cycle[1:])] if cycle else []
    assert cycle is None, "import cycle between rooms:\n" + "\n".join(where)


def test_the_session_model_takes_the_readers_pause_from_its_caller():
    """model/ is pure: it never reaches for the process-wide PAUSE (the daemon hands it in)."""
    graph = room_imports()
    assert "base" in graph.get("model", {}), "model/ imports nothing of base/: this test no longer sees its imports"
    offenders = [str(p.relative_to(PACKAGE)) for p in (PACKAGE / "model").rglob("*.py")
                 for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("pause")]
    assert not offenders, offenders
