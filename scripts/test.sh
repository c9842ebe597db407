#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine, then runs them.
#   Python packages (pinned in pyproject.toml) into .venv, the Copilot CLI 1.0.102 from npm
#   into tests/cli, Prometheus, systemd-analyze and Chromium (the web view's browser tests drive it
#   with Playwright) from Debian's packages; then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

npm install --prefix tests/cli --no-audit --no-fund --no-package-lock --loglevel=error

# Debian packages: prometheus (prometheus, promtool), systemd (systemd-analyze for the unit file),
# chromium (Playwright cannot download a browser of its own here; the tests use /usr/bin/chromium).
missing=""
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v systemd-analyze >/dev/null 2>&1 || missing="$missing systemd"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

exec .venv/bin/python -m pytest "$@"
