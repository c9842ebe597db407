#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine, then runs them layer by layer.
#   Python packages (pinned in pyproject.toml) into .venv, the Copilot CLI 1.0.102 from npm
#   into tests/cli, Prometheus, systemd-analyze and Chromium (the web view's browser tests drive it
#   with Playwright) from Debian's packages; then pytest: tests/unit, tests/component, tests/e2e,
#   each layer's time printed, and the total against the targets (unit + component < 30 s, all < 6 min).
#
#   scripts/test.sh                  every layer (extra pytest options go to each: scripts/test.sh -q -x)
#   scripts/test.sh unit component   only these layers
#   scripts/test.sh tests/e2e/test_view.py -k token   anything else: one pytest run with these arguments
# TEST_WORKERS=N: processes for the e2e layer (default 4, pytest-xdist; 0 runs every layer in this process). The
# layer mostly waits on processes: 268 s of CPU in 516 s with 2 workers, 308 s in 278 s with 4, on 2 cores.
# unit and component run on two (their waits on sockets and deadlines: 16 -> 10 s and 12 -> 8.5 s on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

# Setup is quiet: its output goes to a log, shown only when a step fails.
setup_log=$(mktemp "${TMPDIR:-/tmp}/copilot-otel-setup.XXXXXX")
trap 'rm -f "$setup_log"' EXIT
step() {
    if ! "$@" >>"$setup_log" 2>&1; then
        echo "setup failed: $*" >&2
        tail -n 40 "$setup_log" >&2
        exit 1
    fi
}

[ -x .venv/bin/python ] || step python3 -m venv .venv
step .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
step .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.lock -e '.[test]'
step npm install --prefix tests/cli --no-audit --no-fund --no-package-lock --no-update-notifier --loglevel=error

# Debian packages: prometheus (prometheus, promtool), prometheus-alertmanager (the fleet test's pages),
# systemd (systemd-analyze for the unit files),
# chromium (Playwright cannot download a browser of its own here; the tests use /usr/bin/chromium).
missing=""
command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v systemd-analyze >/dev/null 2>&1 || missing="$missing systemd"
command -v prometheus-alertmanager >/dev/null 2>&1 || missing="$missing prometheus-alertmanager"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    step $SUDO apt-get update -qq
    step env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

# Which layers: named ones, or all; any other argument that is not an option means one plain pytest run.
layers=()
options=()
for arg in "$@"; do
    case "$arg" in
        unit|component|e2e) layers+=("$arg") ;;
        -*) options+=("$arg") ;;
        *) exec .venv/bin/python -m pytest "$@" ;;
    esac
done
[ ${#layers[@]} -gt 0 ] || layers=(unit component e2e)

workers=${TEST_WORKERS:-4}
ms() { local t=${1/./}; echo $((10#$t)); }  # "12.345" (seconds) -> 12345
seconds() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }
declare -A wall cpu code
failed=0
exec 3>&2 4>&1
TIMEFORMAT='%3R %3U %3S'
for layer in "${layers[@]}"; do
    parallel=()
    # e2e mostly waits on processes: four workers (pytest-xdist), each running whole test files.
    if [ "$layer" = e2e ] && [ "$workers" -gt 0 ]; then
        parallel=(-n "$workers" --dist loadfile)
    elif [ "$workers" -gt 0 ]; then
        parallel=(-n 2)
    fi
    echo "== $layer (tests/$layer)"
    code[$layer]=0
    timing=$( { time .venv/bin/python -m pytest "tests/$layer" "${parallel[@]}" "${options[@]}" >&4 2>&3; } 2>&1 ) \
        || code[$layer]=$?
    read -r real user sys <<<"${timing##*$'\n'}"
    wall[$layer]=$(ms "$real")
    cpu[$layer]=$(( $(ms "$user") + $(ms "$sys") ))
    [ "${code[$layer]}" -eq 0 ] || failed=1
done

echo
printf '%-10s %8s %8s  %s\n' layer wall cpu result
total=0
for layer in "${layers[@]}"; do
    result=passed; [ "${code[$layer]}" -eq 0 ] || result="FAILED (pytest exit ${code[$layer]})"
    printf '%-10s %6s s %6s s  %s\n' "$layer" "$(seconds "${wall[$layer]}")" "$(seconds "${cpu[$layer]}")" "$result"
    total=$((total + wall[$layer]))
done
printf '%-10s %6s s\n' total "$(seconds "$total")"
target() {  # what, milliseconds, limit in seconds
    local verdict=met; [ "$2" -lt $(($3 * 1000)) ] || verdict="MISSED (a busy machine? the cpu column shows the work)"
    printf 'target: %s in %s s, under %d s: %s\n' "$1" "$(seconds "$2")" "$3" "$verdict"
}
if [ -n "${wall[unit]:-}" ] && [ -n "${wall[component]:-}" ]; then
    target "unit + component" $((wall[unit] + wall[component])) 30
fi
[ ${#layers[@]} -lt 3 ] || target "the whole suite" "$total" 360
exit $failed
