#!/usr/bin/env python3
"""What changed in the Copilot CLI's session-event schema between two versions: event types added and removed,
and for each type in both, the fields added, removed or changed (type, required). Run it when the CLI moves:

    .venv/bin/python scripts/schema_diff.py --fetch 1.0.110     # install it, keep its schema in tests/fixtures/schemas
    .venv/bin/python scripts/schema_diff.py 1.0.102 1.0.110      # versions kept there, or paths to schema files

Then read each added type's line and either read it in the model (model/sessions.py) or list it, with the
reason, in copilot_otel/model/ignored.py; tests/component/test_schema.py fails until every type is one of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.schema_events import SCHEMAS, Schema  # noqa: E402

MAX_DEPTH = 6  # fields are followed this deep (data.usage.copilotUsage.tokenDetails[].tokenType is 5)


def load(name: str) -> dict:
    path = Path(name)
    if not path.is_file():
        path = SCHEMAS / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"{name}: no such schema file, and no tests/fixtures/schemas/{name}.json")
    return json.loads(path.read_text())


def fields(schema: Schema, node: object, prefix: str = "", depth: int = 0) -> dict[str, str]:
    """path -> 'type' (with '!' when required) of every field under ``node``."""
    out: dict[str, str] = {}
    node = schema.resolve(node) if isinstance(node, dict) else node
    if not isinstance(node, dict) or depth > MAX_DEPTH:
        return out
    options = node.get("anyOf") or node.get("oneOf")
    if options:
        for option in options:
            out.update(fields(schema, option, prefix, depth))
        return out
    if node.get("type") == "array":
        return fields(schema, node.get("items"), prefix + "[]", depth + 1)
    required = set(node.get("required", ()))
    for key, sub in (node.get("properties") or {}).items():
        path = f"{prefix}.{key}" if prefix else key
        resolved = schema.resolve(sub) if isinstance(sub, dict) else {}
        out[path] = describe(schema, resolved) + ("!" if key in required else "")
        out.update(fields(schema, resolved, path, depth + 1))
    return out


def describe(schema: Schema, node: dict) -> str:
    if "const" in node:
        return f"const {json.dumps(node['const'])}"
    if "enum" in node:
        return "enum " + "|".join(map(str, node["enum"]))
    options = node.get("anyOf") or node.get("oneOf")
    if options:
        return " or ".join(sorted({describe(schema, schema.resolve(o)) for o in options}))
    kind = node.get("type", "any")
    return "|".join(kind) if isinstance(kind, list) else str(kind)


def diff(old_doc: dict, new_doc: dict) -> list[str]:
    """The changes, one line each."""
    old, new = Schema(old_doc), Schema(new_doc)
    before, after = old.events, new.events
    lines = [f"+ {kind}: {(after[kind].get('description') or '').split('. ', 1)[-1][:100]}"
             for kind in sorted(set(after) - set(before))]
    lines += [f"- {kind}" for kind in sorted(set(before) - set(after))]
    for kind in sorted(set(before) & set(after)):
        was, now = fields(old, before[kind]), fields(new, after[kind])
        changes = [f"    + {p}: {now[p]}" for p in sorted(set(now) - set(was))]
        changes += [f"    - {p}" for p in sorted(set(was) - set(now))]
        changes += [f"    ~ {p}: {was[p]} -> {now[p]}" for p in sorted(set(was) & set(now)) if was[p] != now[p]]
        if changes:
            lines += [f"~ {kind}", *changes]
    return lines


def fetch(version: str) -> Path:
    """Install the version with npm (tests/fixtures/record_versions.py's way) and keep the schema it unpacks."""
    from tests.fixtures.record_versions import find_pkg, install, minimal_env

    binary = install(version, Path(tempfile.gettempdir()) / "copilot-versions")
    with tempfile.TemporaryDirectory(prefix="copilot-schema-") as home:
        subprocess.run([str(binary), "--version"], env=minimal_env(Path(home)), capture_output=True, timeout=120,
                       stdin=subprocess.DEVNULL, check=False)
        pkg = find_pkg(Path(home), version)
        source = pkg / "schemas" / "session-events.schema.json" if pkg else None
        if source is None or not source.is_file():
            raise SystemExit(f"{version}: its package holds no schemas/session-events.schema.json")
        target = SCHEMAS / f"{version}.json"
        target.write_text(json.dumps(json.loads(source.read_text()), separators=(",", ":"), ensure_ascii=False))
        return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", help="OLD NEW: versions kept in tests/fixtures/schemas, or files")
    parser.add_argument("--fetch", metavar="VERSION", help="install VERSION and keep its schema first")
    args = parser.parse_args()
    if args.fetch:
        print(f"kept {fetch(args.fetch).relative_to(ROOT)}")
    if len(args.versions) != 2:
        if args.fetch:
            return 0
        parser.error("name two versions (or schema files): OLD NEW")
    changes = diff(load(args.versions[0]), load(args.versions[1]))
    print("\n".join(changes) if changes else "no change in event types or fields")
    return 0


if __name__ == "__main__":
    sys.exit(main())
