#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine, then runs them layer by layer, the fast ones first.
#   Python packages (pinned in pyproject.toml) into .venv; the lint layer (ruff check and mypy: any finding fails
#   the run), tests/unit and tests/component, which need nothing else; then what the e2e layer needs: the Copilot
#   CLI 1.0.102 and ccusage 20.0.24 (the differential test's other reader of the same logs) from npm into tests/cli
#   (its package.json), the OpenTelemetry Collector, Jaeger and Prometheus 3 built from their Go modules
#   (scripts/backends.sh), Prometheus 2, Alertmanager, systemd-analyze and Chromium (the web view's browser tests
#   drive it with Playwright) from Debian's packages; and tests/e2e. Each layer's time is printed, and the total
#   against the targets (unit + component < 30 s, all < 6 min). The fast layers (lint, unit, component) run
#   first and need none of npm, Go or apt; when one fails, the later layers are skipped. unit + component's line
#   coverage of copilot_otel is printed by room (pytest-cov, on 3.12's run below; TEST_COVERAGE=off: not). The layer
#   "pythons" then runs unit + component again on Python 3.12 and 3.13 (what pyproject.toml's classifiers
#   name besides 3.11), in .venv-3.12 and .venv-3.13 with the same pinned packages, both at once; a version this
#   machine lacks is skipped with a line saying so.
#
#   scripts/test.sh                  every layer (extra pytest options go to the pytest ones: scripts/test.sh -q -x)
#   scripts/test.sh unit component   only these layers (lint: only ruff and mypy; pythons: 3.12 and 3.13)
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

# What only the e2e layer (and a plain pytest run) needs, installed once the fast layers passed (lint, unit,
# component need none of it): the Copilot CLI and ccusage from npm, the backends from their Go modules, Debian's
# packages. It runs with the real home (its caches: npm's, Go's, the built backends), not the tests' one.
real_env=(env)
real_settings=("HOME=$HOME")
for variable in XDG_CONFIG_HOME XDG_CACHE_HOME XDG_DATA_HOME XDG_STATE_HOME; do
    if [ -n "${!variable+set}" ]; then real_settings+=("$variable=${!variable}"); else real_env+=(-u "$variable"); fi
done
real_env+=("${real_settings[@]}")  # env takes its -u options before the settings
heavy_setup() {
    [ -z "${heavy_done:-}" ] || return 0
    heavy_done=1
    home_check || failed=1  # what the fast layers did to the real home; setup may then use its caches
    step "${real_env[@]}" npm install --prefix tests/cli --no-audit --no-fund --no-package-lock --no-update-notifier --loglevel=error
    # The real backends deploy/ ships (the Collector, Jaeger v2, Prometheus 3), built from their Go modules at the
    # versions of backends/versions.env: minutes on a machine's first run, then cached (scripts/backends.sh).
    if ! "${real_env[@]}" scripts/backends.sh --check >/dev/null 2>&1; then
        echo "building the backends from their Go modules (this machine's first run only: minutes)..." >&2
        step "${real_env[@]}" scripts/backends.sh
    fi
    COPILOT_OTEL_BACKENDS_BIN=$("${real_env[@]}" scripts/backends.sh --check)
    export COPILOT_OTEL_BACKENDS_BIN

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
        # Another process (unattended-upgrades, a second engineer's setup) may hold apt's lock: wait for it.
        step $SUDO apt-get update -qq -o DPkg::Lock::Timeout=600
        step env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
            --no-install-recommends $missing
    fi
    home_before=$(home_listing)
}
# The other Pythons the package supports: unit and component run on each too (the layer "pythons"), in a venv of
# its own with the same pinned packages as .venv.
other_pythons=(3.12 3.13)
find_python() {  # the interpreter of Python $1 (3.12): pyenv's newest release of it, else one on PATH
    local candidate
    for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1" 2>/dev/null | sort -V -r) \
                     $(command -v "python$1"); do
        [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$1" ] \
            || { echo "$candidate"; return 0; }
    done
    return 1
}
pythons=()
for version in "${other_pythons[@]}"; do
    if python=$(find_python "$version"); then pythons+=("$version=$python"); fi
done
# Their venvs (.venv-3.12, .venv-3.13: created once, then brought to requirements-test.lock's pins) are built in
# the background, both at once, from when the fast layers passed: pip mostly waits on the network (a fresh venv:
# minutes of wall, ~25 s of CPU), so the e2e layer runs meanwhile. pip runs with the tests' home (no cache kept).
pythons_start() {
    [ -z "${pythons_pid:-}" ] && [[ " ${layers[*]} " == *" pythons "* ]] && [ ${#pythons[@]} -gt 0 ] || return 0
    local entry
    (
        for entry in "${pythons[@]}"; do
            (
                venv=.venv-${entry%%=*}
                [ -x "$venv/bin/python" ] || "${entry#*=}" -m venv "$venv"
                "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --upgrade pip
                "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
                    -r requirements-test.lock -e '.[test]'
            ) &
        done
        code=0
        for entry in "${pythons[@]}"; do wait -n || code=1; done
        exit $code
    ) >"$run_home/pythons-setup.log" 2>&1 &
    pythons_pid=$!
}
pythons_wait() {
    wait "$pythons_pid" && return 0
    echo "setup failed: the venvs of Python ${pythons[*]%%=*}" >&2
    tail -n 40 "$run_home/pythons-setup.log" >&2
    return 1
}
# The tests leave the real home as they found it: HOME and the XDG folders point at one temporary folder for
# the whole run (tests/support/home.py; the Copilot CLI unpacks its ~235 MB package there once per run), and
# the run fails if anything changed in the real home's top level or in the folders programs write to (setup,
# above, may use the real pip and npm caches; the tests may not).
real_home=$HOME
run_home=$(mktemp -d "${TMPDIR:-/tmp}/copilot-otel-test-home.XXXXXX")
trap 'rm -f "$setup_log"; rm -rf "$run_home"' EXIT
export TEST_RUN_HOME=$run_home HOME=$run_home XDG_CONFIG_HOME=$run_home/.config XDG_CACHE_HOME=$run_home/.cache \
    XDG_DATA_HOME=$run_home/.local/share XDG_STATE_HOME=$run_home/.local/state
home_listing() {  # the home's names and files, and what lies 4 levels deep in its usual folders (size, mtime)
    (cd "$real_home" && ls -A1 && { find . -maxdepth 1 -type f -printf '%p %s %T@\n'
        find .cache .config .local .npm .copilot .pki -maxdepth 4 -printf '%p %s %T@\n' 2>/dev/null || true; }) | sort
}
home_before=$(home_listing)
home_check() {  # exit status: 1 if the real home changed during the run (TEST_HOME_CHECK=off: not checked, for a
    local after  # machine where other users of the same home run other things meanwhile)
    [ "${TEST_HOME_CHECK:-on}" != off ] || return 0
    after=$(home_listing)
    [ "$after" != "$home_before" ] || return 0
    echo "FAILED: the tests changed the real home ($real_home); before (<) and after (>):" >&2
    diff <(echo "$home_before") <(echo "$after") | head -n 40 >&2
    return 1
}

# Which layers: named ones, or all; any other argument that is not an option means one plain pytest run.
layers=()
options=()
for arg in "$@"; do
    case "$arg" in
        lint|unit|component|pythons|e2e) layers+=("$arg") ;;
        -*) options+=("$arg") ;;
        *) failed=0; heavy_setup; code=0; .venv/bin/python -m pytest "$@" || code=$?
           [ "$failed" -eq 0 ] || [ "$code" -ne 0 ] || code=1
           home_check || [ "$code" -ne 0 ] || code=1
           exit "$code" ;;
    esac
done
[ ${#layers[@]} -gt 0 ] || layers=(lint unit component e2e pythons)

# The lint layer: both linters run, so that one run shows every finding; either one's finding fails it.
lint() {
    local rc=0
    .venv/bin/ruff check . || rc=1
    .venv/bin/mypy || rc=1
    return $rc
}

# The layer "pythons": unit and component on each other Python at once, one pytest worker each (2 cores); each
# run's last line is shown, all of it when it failed.
pythons_layer() {
    local entry version pids=() rc=0 i
    for entry in "${pythons[@]}"; do
        version=${entry%%=*}
        measure=(env)
        [ "$coverage_on" != "$version" ] || measure=(env COVERAGE_FILE="$coverage_file" COVERAGE_CORE=sysmon)
        "${measure[@]}" .venv-"$version"/bin/python -m pytest tests/unit tests/component -p no:cacheprovider \
            "${parallel[@]}" "${options[@]}" $([ "$coverage_on" != "$version" ] || echo "${coverage[@]}") \
            >"$run_home/pytest-$version.log" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do
        version=${pythons[$i]%%=*}
        if wait "${pids[$i]}"; then
            echo "Python $version: $(tail -n 1 "$run_home/pytest-$version.log")"
        else
            rc=1
            cat "$run_home/pytest-$version.log"
            echo "Python $version: FAILED (above)"
        fi
    done
    return $rc
}

# Line coverage of copilot_otel by unit + component (both add to one data file), printed after the layers. It is
# measured where it costs least: on Python 3.12's run of the layer "pythons", through sys.monitoring
# (COVERAGE_CORE=sysmon: about a tenth more CPU, where 3.11's tracer added half to the fast layers); without that
# run (no 3.12, or only some layers asked for), on the unit and component layers.
coverage_file=$run_home/coverage.data
coverage=()
[ "${TEST_COVERAGE:-on}" = off ] || coverage=(--cov=copilot_otel --cov-report= --cov-append)
coverage_on=fast
if [ ${#coverage[@]} -gt 0 ] && [[ " ${layers[*]} " == *" pythons "* ]] && [[ " ${pythons[*]} " == *" 3.12="* ]]
then
    coverage_on=3.12
fi
[ ${#coverage[@]} -gt 0 ] || coverage_on=none

workers=${TEST_WORKERS:-4}
ms() { local t=${1/./}; echo $((10#$t)); }  # "12.345" (seconds) -> 12345
seconds() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }
declare -A wall cpu code
failed=0 fast_failed=0
exec 3>&2 4>&1
TIMEFORMAT='%3R %3U %3S'
for layer in "${layers[@]}"; do
    if [ "$fast_failed" -ne 0 ] && { [ "$layer" = pythons ] || [ "$layer" = e2e ]; }; then
        echo "== $layer: skipped (a fast layer failed: lint, unit or component)"
        code[$layer]=skipped
        continue
    fi
    [ "$layer" != e2e ] && [ "$layer" != pythons ] || pythons_start
    [ "$layer" != e2e ] || heavy_setup
    if [ "$layer" = lint ]; then
        echo "== lint (ruff check ., mypy)"
        run=(lint)
    elif [ "$layer" = pythons ]; then
        for version in "${other_pythons[@]}"; do
            [[ " ${pythons[*]} " == *" $version="* ]] \
                || echo "== Python $version: skipped: no python$version on this machine (pyenv or PATH)"
        done
        if [ ${#pythons[@]} -eq 0 ]; then code[$layer]=skipped; continue; fi
        waited=$SECONDS
        if ! pythons_wait; then wall[$layer]=0 cpu[$layer]=0 code[$layer]=1; failed=1; continue; fi
        waited=$((SECONDS - waited))
        [ "$waited" -eq 0 ] || echo "== pythons: waited $waited s for the venvs to be ready"
        parallel=()
        [ "$workers" -eq 0 ] || parallel=(-n 1)
        echo "== pythons (tests/unit tests/component on Python ${pythons[*]%%=*})"
        run=(pythons_layer)
    else
        parallel=()
        # e2e mostly waits on processes: four workers (pytest-xdist), each running whole test files.
        if [ "$layer" = e2e ] && [ "$workers" -gt 0 ]; then
            parallel=(-n "$workers" --dist loadfile)
        elif [ "$workers" -gt 0 ]; then
            parallel=(-n 2)
        fi
        echo "== $layer (tests/$layer)"
        run=(.venv/bin/python -m pytest "tests/$layer" "${parallel[@]}" "${options[@]}")
        [ "$layer" = e2e ] || [ "$coverage_on" != fast ] || run=(env COVERAGE_FILE="$coverage_file" "${run[@]}" "${coverage[@]}")
    fi
    code[$layer]=0
    timing=$( { time "${run[@]}" >&4 2>&3; } 2>&1 ) || code[$layer]=$?
    read -r real user sys <<<"${timing##*$'\n'}"
    wall[$layer]=$(ms "$real")
    cpu[$layer]=$(( $(ms "$user") + $(ms "$sys") ))
    [ "${code[$layer]}" -eq 0 ] || failed=1
    [ "${code[$layer]}" -eq 0 ] || [ "$layer" = e2e ] || [ "$layer" = pythons ] || fast_failed=1
done

if [ -f "$coverage_file" ]; then
    echo
    where="Python 3.11"; [ "$coverage_on" = fast ] || where="Python $coverage_on"
    echo "line coverage of copilot_otel by unit + component (those of them run, on $where):"
    .venv/bin/python scripts/coverage_rooms.py "$coverage_file" || failed=1
fi

echo
printf '%-10s %8s %8s  %s\n' layer wall cpu result
total=0
for layer in "${layers[@]}"; do
    if [ "${code[$layer]:-skipped}" = skipped ]; then
        printf '%-10s %8s %8s  %s\n' "$layer" - - skipped
        continue
    fi
    result=passed
    if [ "${code[$layer]}" -ne 0 ]; then
        result="FAILED (pytest exit ${code[$layer]})"; [ "$layer" != lint ] || result="FAILED (findings above)"
    fi
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
[ -z "${wall[unit]:-}" ] || [ -z "${wall[component]:-}" ] || [ -z "${wall[e2e]:-}" ] \
    || target "the whole suite" "$total" 360
home_check || failed=1
exit $failed
