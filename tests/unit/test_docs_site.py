"""The docs build as a site with no warning (no broken link or anchor, no page outside the nav), and
docs/architecture.md names every module of copilot_otel/ and nothing that is not one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "copilot_otel"
ARCHITECTURE = REPO / "docs" / "architecture.md"
# A module as the page's tables write it, in their first column: `config.py`, `source/tail.py`, `source/`.
MODULE_CELL = re.compile(r"^\| `((?:[a-z_]+/)*(?:[a-z_]+\.py|[a-z_]+/))` \|", re.M)


def modules_in_tree() -> set[str]:
    """Every module under copilot_otel/, by its path from there: each .py file, and a package by its folder."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        if path.name == "__init__.py" and path.parent != PACKAGE:
            name = name.removesuffix("__init__.py")
        found.add(name)
    return found


def modules_on_page() -> set[str]:
    """The modules the tables of docs/architecture.md's "Modules" section list."""
    text = ARCHITECTURE.read_text()
    return set(MODULE_CELL.findall(text[text.index("\n## Modules"):]))


def test_the_docs_build_strict_with_no_warning(tmp_path):
    """`mkdocs build --strict` succeeds and warns of nothing: every link and anchor resolves and every page is in
    the nav (mkdocs.yml raises those checks to warnings; strict makes a warning fail the build)."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0 and warnings == [], result.stdout + result.stderr
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


def test_the_architecture_page_names_every_module_and_only_modules():
    """Each .py file (a package by its folder) is in a table of docs/architecture.md, and each one listed exists."""
    tree, page = modules_in_tree(), modules_on_page()
    assert sorted(tree - page) == [], "in copilot_otel/, but not on docs/architecture.md"
    assert sorted(page - tree) == [], "on docs/architecture.md, but not in copilot_otel/"
