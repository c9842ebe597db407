"""The library's surface is what docs/contributing.md says it is: the public modules it lists, each with an
`__all__` of names that exist; `import copilot_otel` stays light; `attach` shows its real signature; the
version is written once."""

import ast
import inspect
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import copilot_otel
from copilot_otel import sdk

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "copilot_otel"
MODULE_NAME = re.compile(r"`(copilot_otel(?:\.\w+)*)`")


def _surface_section() -> tuple[set[str], set[str]]:
    """The public modules and the internal re-exporters, as listed in contributing.md's section on the surface."""
    text = (ROOT / "docs" / "contributing.md").read_text()
    section = text.split("## The library's surface\n", 1)[1].split("\n## ", 1)[0]
    public_part, internal_part = section.split("only to name what they re-export", 1)
    bullets = [line for line in public_part.splitlines() if line.startswith("- ")]
    public = {MODULE_NAME.match(line[2:]).group(1) for line in bullets}
    internal = {name for line in internal_part.splitlines() if line.startswith("- ")
                for name in MODULE_NAME.findall(line)}
    return public, internal


def _modules_with_all() -> set[str]:
    """Every module of the package whose source assigns `__all__` at its top level (read, not imported)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        targets = [target for node in tree.body if isinstance(node, ast.Assign) for target in node.targets]
        targets += [node.target for node in tree.body if isinstance(node, ast.AnnAssign)]
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_the_modules_with_all_are_the_public_ones_the_docs_list_and_the_known_reexporters():
    public, internal = _surface_section()
    assert public == {"copilot_otel", "copilot_otel.sdk", "copilot_otel.version"}
    assert not public & internal
    assert _modules_with_all() == public | internal


def test_every_public_name_exists_and_the_package_docstring_names_the_public_modules():
    public, _ = _surface_section()
    for name in public:
        module = __import__(name, fromlist=["__all__"])
        assert module.__all__ == sorted(module.__all__), name
        for exported in module.__all__:
            assert getattr(module, exported) is not None, f"{name}.{exported}"
    for name in public - {"copilot_otel"}:
        assert f"``{name}``" in copilot_otel.__doc__


def test_import_copilot_otel_loads_no_daemon_web_commands_or_their_libraries():
    heavy = ("copilot_otel.daemon", "copilot_otel.web", "copilot_otel.cli", "copilot_otel.sdk",
             "grpc", "aiohttp", "watchdog", "click", "rich")
    script = ("import json, sys, copilot_otel; copilot_otel.__version__; "
              "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "copilot_otel.version" in loaded
    assert [m for m in loaded if m.split(".")[0] in heavy or ".".join(m.split(".")[:2]) in heavy] == []


def test_attach_from_the_package_is_sdk_attach_with_its_typed_signature():
    assert copilot_otel.attach is sdk.attach
    signature = inspect.signature(copilot_otel.attach)
    assert signature.return_annotation == "Attachment"
    assert signature.parameters["config"].annotation == "Config | None"
    # attach_async takes the same keyword arguments, each typed, not **options: Any
    asynchronous = inspect.signature(copilot_otel.attach_async)
    assert list(asynchronous.parameters.items()) == list(signature.parameters.items())


def test_the_shipped_image_tags_are_the_package_version():
    tags = {}
    for path in [*(ROOT / "deploy").rglob("*.yaml"), *(ROOT / "docs").glob("*.md")]:
        for tag in re.findall(r"copilot-otel:(\d+\.\d+\.\d+[\w.]*)|newTag: \"(\d[\w.]*)\"", path.read_text()):
            tags.setdefault("".join(tag), []).append(path.relative_to(ROOT).as_posix())
    assert sum(len(paths) for paths in tags.values()) >= 4  # the manifests and docs/deploy.md
    assert set(tags) == {copilot_otel.__version__}, tags


def test_the_classifiers_name_the_pythons_the_tests_run_on():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock_python = re.search(r"--python-version (3\.\d+)", (ROOT / "scripts" / "lock.sh").read_text()).group(1)
    others = re.search(r"^other_pythons=\(([^)]*)\)", (ROOT / "scripts" / "test.sh").read_text(), re.M).group(1)
    tested = [lock_python, *others.split()]
    prefix = "Programming Language :: Python :: 3."
    assert [c.removeprefix(prefix[:-2]) for c in project["classifiers"] if c.startswith(prefix)] == tested
    assert project["requires-python"] == f">={lock_python}"
