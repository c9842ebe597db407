"""The package declares what it imports, imports what it declares, and ships its typing marker and licence."""

import ast
import re
import sys
import tomllib
from functools import lru_cache
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "copilot_otel"


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]).lower()


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _imports() -> dict[str, set[str]]:
    """Every absolute import of the package outside the standard library: dotted module -> files importing it."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "copilot_otel" or top.startswith("_"):
                    continue
                found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


@lru_cache(maxsize=None)
def _files_of(dist: str) -> tuple[str, ...]:
    return tuple(str(f) for f in metadata.distribution(dist).files or ())


@lru_cache(maxsize=None)
def _distributions_of() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def _providers(module: str) -> set[str]:
    """The installed distributions that hold this module (by their RECORD), e.g. google.rpc -> googleapis-common-protos."""
    parts = module.split(".")
    candidates = _distributions_of().get(parts[0], [])
    for depth in range(len(parts), 0, -1):
        prefix = "/".join(parts[:depth])
        holders = {_name(d) for d in candidates
                   if any(f.startswith(prefix + "/") or f == prefix + ".py" for f in _files_of(d))}
        if holders:
            return holders
    return {_name(d) for d in candidates}


def test_every_import_of_the_package_is_a_declared_dependency():
    """No module of copilot_otel imports a package that only arrives as someone else's dependency."""
    declared = {_name(r) for r in _project()["dependencies"]}
    optional = {_name(r) for r in _project()["optional-dependencies"]["sdk"]}
    undeclared = {}
    for module, files in _imports().items():
        providers = _providers(module)
        assert providers, f"{module} (imported by {sorted(files)}) is not installed"
        if not providers & (declared | optional):
            undeclared[module] = (sorted(providers), sorted(files))
    assert not undeclared, f"imported but not declared in [project].dependencies: {undeclared}"


def test_every_declared_dependency_is_imported_by_the_package():
    """A runtime dependency the package never imports only pulls in packages nobody uses: it belongs in an extra."""
    used = set().union(*(_providers(module) for module in _imports()))
    unused = {_name(r) for r in _project()["dependencies"]} - used
    assert not unused, f"declared but never imported by copilot_otel: {sorted(unused)}"


def test_the_library_dependencies_are_ranges_not_pins():
    """An application that imports copilot_otel can resolve its own versions: no `==` in the library's requirements."""
    pinned = [r for r in _project()["dependencies"] if "==" in r]
    assert not pinned, pinned
    assert all(re.search(r">=", r) and "<" in r for r in _project()["dependencies"]), _project()["dependencies"]


def test_the_typing_marker_and_the_licence_ship():
    """py.typed is package data (PEP 561), and the licence the metadata names is in the tree."""
    assert (PACKAGE / "py.typed").is_file()
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["copilot_otel"]
    assert "py.typed" in data
    licence = (REPO / "LICENSE").read_text()
    assert _project()["license"] == "MIT" and licence.startswith("MIT License")
