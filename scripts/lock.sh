#!/usr/bin/env bash
# Regenerates the lock files from pyproject.toml. Run it after changing a requirement, and commit both files.
#   requirements.lock       the daemon's install (README's install command)
#   requirements-test.lock  the same, plus the test extra (scripts/test.sh, so CI tests what users install)
# Needs uv (`pip install uv`); the versions resolved are the newest the ranges in pyproject.toml allow.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-uv}
common=(--quiet --python-version 3.11 --universal --custom-compile-command scripts/lock.sh)
"$uv" pip compile pyproject.toml "${common[@]}" -o requirements.lock
"$uv" pip compile pyproject.toml --extra test "${common[@]}" -o requirements-test.lock
