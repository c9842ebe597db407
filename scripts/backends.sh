#!/usr/bin/env bash
# Builds the real backends the tests run, from their Go modules at the versions in backends/versions.env:
#   otelcol-copilot  the OpenTelemetry Collector distribution deploy/otelcol/gateway.yaml runs on
#                    (backends/otelcol: the builder's output for backends/otelcol/manifest.yaml)
#   jaeger           Jaeger v2 (backends/jaeger: github.com/jaegertracing/jaeger/cmd/jaeger as a Go tool)
#   prometheus       Prometheus 3 and its promtool (backends/prometheus)
# Each is built once per machine and kept under $COPILOT_OTEL_BACKENDS (default ~/.cache/copilot-otel/backends),
# in a folder named by the hash of its module files: a changed version or source builds anew, nothing else does.
#
#   scripts/backends.sh            build what is missing; print the folder that holds every binary (bin/)
#   scripts/backends.sh --check    only say whether every binary is built (exit 1 if not)
#
# A build that fails names the module and version and exits non-zero: the test run stops there, with that message.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=../backends/versions.env
. backends/versions.env

cache=${COPILOT_OTEL_BACKENDS:-${XDG_CACHE_HOME:-$HOME/.cache}/copilot-otel/backends}
bin=$cache/bin
[ -d "$bin" ] || mkdir -p "$bin"
export GOFLAGS="-buildvcs=false -trimpath -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0
check_only=0
[ "${1:-}" != --check ] || check_only=1

key() {  # the hash of one backend's module files
    (cd "backends/$1" && cat go.mod go.sum ./*.go ../versions.env 2>/dev/null; go env GOVERSION) | sha256sum | cut -c1-16
}

# build NAME DESCRIPTION OUTPUT PACKAGE [LDFLAGS]: one binary of one module, into bin/ under its hashed folder.
build() {
    local name=$1 what=$2 output=$3 package=$4 ldflags=${5:-}
    local folder
    folder=$cache/$name-$(key "$name")
    if [ ! -x "$folder/$output" ]; then
        if [ "$check_only" = 1 ]; then
            echo "not built: $output ($what)" >&2
            return 1
        fi
        local started=$SECONDS log
        log=$(mktemp "${TMPDIR:-/tmp}/copilot-otel-backend.XXXXXX")
        echo "building $output from $what (first run on this machine only)..." >&2
        mkdir -p "$folder.tmp"
        if ! (cd "backends/$name" && go build -ldflags "$ldflags" -o "$folder.tmp/$output" "$package") >"$log" 2>&1; then
            echo "backend build failed: $output from $what (backends/$name, go $(go env GOVERSION))" >&2
            tail -n 30 "$log" >&2
            rm -f "$log"
            return 1
        fi
        rm -f "$log"
        mkdir -p "$folder"
        mv "$folder.tmp/$output" "$folder/$output"
        rmdir "$folder.tmp" 2>/dev/null || true
        echo "built $output in $((SECONDS - started)) s" >&2
    fi
    # --check touches nothing: the link is made (or moved) only when it does not point there yet
    [ "$(readlink "$bin/$output" 2>/dev/null)" = "$folder/$output" ] || ln -sfn "$folder/$output" "$bin/$output"
}

command -v go >/dev/null 2>&1 || { echo "backend build failed: no go command (Go 1.26 is needed)" >&2; exit 1; }
build otelcol "go.opentelemetry.io/collector v$OTELCOL_CORE, contrib v$OTELCOL_CONTRIB" otelcol-copilot .
# The version each says of itself (`jaeger version`, `prometheus --version`), as their own release builds set it.
build jaeger "github.com/jaegertracing/jaeger v$JAEGER_MODULE (Jaeger $JAEGER)" jaeger \
    github.com/jaegertracing/jaeger/cmd/jaeger "-X github.com/jaegertracing/jaeger/internal/version.latestVersion=v$JAEGER"
prometheus_version="-X github.com/prometheus/common/version.Version=$PROMETHEUS"
build prometheus "github.com/prometheus/prometheus v$PROMETHEUS_MODULE (Prometheus $PROMETHEUS)" prometheus \
    github.com/prometheus/prometheus/cmd/prometheus "$prometheus_version"
build prometheus "github.com/prometheus/prometheus v$PROMETHEUS_MODULE (Prometheus $PROMETHEUS)" promtool \
    github.com/prometheus/prometheus/cmd/promtool "$prometheus_version"
echo "$bin"
