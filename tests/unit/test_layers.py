"""The package's rooms (its subpackages and top-level modules) stand in layers: each imports only rooms below it."""

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "copilot_otel"

# The rooms from the lowest to the highest. A room may import the rooms of the layers below its own, never one
# of its own layer nor one above: the pipeline reads upward from here, and a front end is never imported by
# what it drives.
LAYERS: list[tuple[str, ...]] = [
    ("base", "version", "vocab"),  # plain helpers (files, parsing, redaction, locks); the version; shared names
    ("decode",),  # bytes of one line -> a typed event
    ("model",),  # the pure session model: events -> span records, metric updates, log records
    ("source",),  # finding and following logs: discover, tail, identity, trust
    # state/ sits above source/: a checkpoint records how far the source's files were read, named the source's
    # way (FileIdentity); the tailer never sees the checkpoint, the daemon hands it the positions.
    ("state", "otlp"),  # the checkpoint; the OTLP wire every signal shares (settings, transport, contract)
    ("delivery", "metrics"),  # spans and log records out (queue, sinks); every metric and its push
    # config.py gathers each room's own settings record (OtlpSettings, Rotation, budgets) into one Config: it
    # imports them, and no room below it ever reads a Config.
    ("config",),
    ("logreader",),  # one log through a tail and a model: what every front end reads with
    ("catalog",),  # the sessions' catalog: cache, history, usage, the published snapshot
    ("replay", "web"),  # the one-shot replay; the web view and /metrics
    ("daemon",),  # the daemon: wiring and lifecycle
    ("sdk",),  # attach() for live SDK sessions
    ("cli",),  # the commands
    ("__init__",),  # the package itself: attach() and the version, loaded on first use
]

# Imports that go against the layers on purpose: (importing file, imported room) -> why. None today.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _room(parts: tuple[str, ...] | list[str]) -> str:
    """A module's room: its subpackage (``delivery``), or the top-level module itself (``config``)."""
    return parts[0].removesuffix(".py")


def imports() -> Iterator[tuple[str, int, str, str]]:
    """Every import of the package's own modules (lazy ones too): (file, line, module imported, its room)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).parts
        package = list(relative[:-1])
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[list[str]] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                    target = [*base, *(node.module.split(".") if node.module else [])]
                    # from . import x: x is the module (at the top of the package, x is a room)
                    targets = [[*target, alias.name] for alias in node.names] if not node.module else [target]
                elif (node.module or "").startswith("copilot_otel."):
                    targets = [node.module.split(".")[1:]]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".")[1:] for a in node.names if a.name.startswith("copilot_otel.")]
            for target in targets:
                if target:
                    yield str(path.relative_to(PACKAGE)), node.lineno, ".".join(["copilot_otel", *target]), \
                        _room(target)


def room_imports() -> dict[str, dict[str, set[str]]]:
    """room -> the rooms it imports (anywhere in its code, lazily too) -> the files that do."""
    graph: dict[str, dict[str, set[str]]] = {}
    for file, _line, _module, target in imports():
        room = _room(Path(file).parts)
        if target != room:
            graph.setdefault(room, {}).setdefault(target, set()).add(file)
    return graph


def _layer_of() -> dict[str, int]:
    return {room: i for i, layer in enumerate(LAYERS) for room in layer}


def test_every_room_has_its_layer():
    """A new subpackage or top-level module must be placed in LAYERS (and a room that went must leave it)."""
    rooms = {_room(path.relative_to(PACKAGE).parts) for path in PACKAGE.rglob("*.py")}
    listed = [room for layer in LAYERS for room in layer]
    assert len(listed) == len(set(listed)), "a room listed twice in LAYERS"
    assert sorted(rooms - set(listed)) == [], "rooms of copilot_otel/ missing from LAYERS"
    assert sorted(set(listed) - rooms) == [], "rooms in LAYERS that copilot_otel/ no longer has"


def offences(found: Iterable[tuple[str, int, str, str]]) -> tuple[list[str], set[tuple[str, str]]]:
    """The imports of ``found`` against LAYERS, each named by file, line and module; and the EXCEPTIONS used."""
    layer = _layer_of()
    named, excused = [], set()
    for file, line, module, target in found:
        room = _room(Path(file).parts)
        if target == room or layer[target] < layer[room]:
            continue
        if (file, target) in EXCEPTIONS:
            excused.add((file, target))
            continue
        where = "its own layer" if layer[target] == layer[room] else "a layer above"
        named.append(f"copilot_otel/{file}:{line} imports {module}: {room}/ may not import {target}/ ({where})")
    return named, excused


def test_each_room_imports_only_the_layers_below_it():
    """No import reaches a room of its own layer or of one above; each exception is still needed."""
    named, excused = offences(imports())
    assert named == [], "imports against the layers (LAYERS in tests/unit/test_layers.py):\n" + "\n".join(named)
    assert sorted(set(EXCEPTIONS) - excused) == [], "EXCEPTIONS that no import needs any more"


def test_an_import_against_the_layers_is_named():
    """The check names the file, the line and the module of an import upward or sideways, and lets one down pass."""
    named, _ = offences([("otlp/settings.py", 7, "copilot_otel.config", "config"),
                         ("delivery/queue.py", 9, "copilot_otel.metrics.registry", "metrics"),
                         ("config.py", 16, "copilot_otel.otlp.settings", "otlp")])
    assert named == [
        "copilot_otel/otlp/settings.py:7 imports copilot_otel.config: otlp/ may not import config/ (a layer above)",
        "copilot_otel/delivery/queue.py:9 imports copilot_otel.metrics.registry: delivery/ may not import metrics/ "
        "(its own layer)"]


def test_the_session_model_takes_the_readers_pause_from_its_caller():
    """model/ is pure: it never reaches for the process-wide PAUSE (the daemon hands it in)."""
    graph = room_imports()
    assert "base" in graph.get("model", {}), "model/ imports nothing of base/: this test no longer sees its imports"
    offenders = [str(p.relative_to(PACKAGE)) for p in (PACKAGE / "model").rglob("*.py")
                 for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("pause")]
    assert not offenders, offenders
