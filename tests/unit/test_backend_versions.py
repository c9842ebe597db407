"""The backends the tests build and run (backends/, scripts/backends.sh) are the releases deploy/ ships: one
version of each, in backends/versions.env, and every go.mod, the Collector's manifest and every image say it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BACKENDS = REPO / "backends"
DEPLOY = REPO / "deploy"
CORE = "go.opentelemetry.io/collector"
CONTRIB = "github.com/open-telemetry/opentelemetry-collector-contrib"


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (BACKENDS / "versions.env").read_text().splitlines()
             if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def requires(module_folder: str) -> dict[str, str]:
    """module path -> version of every require line of backends/<folder>/go.mod."""
    text = (BACKENDS / module_folder / "go.mod").read_text()
    return dict(re.findall(r"^\s*(?:require\s+)?([\w./-]+\.[\w./-]+) (v[^\s]+)", text, re.MULTILINE))


def images() -> list[str]:
    """Every container image deploy/ runs (compose and Kubernetes)."""
    found = []
    for path in [DEPLOY / "docker-compose.yml", *sorted((DEPLOY / "kubernetes").rglob("*.yaml"))]:
        for doc in yaml.safe_load_all(path.read_text()):
            found += re.findall(r"'image': '([^']+)'", repr(doc))
    return found


def test_collector_modules_are_one_release():
    """Every Collector module the distribution requires is at the core release (or its stable v1 twin) or, for
    contrib, at the contrib release of versions.env; so is every module its builder manifest names."""
    pinned = versions()
    allowed = {CORE: {f"v{pinned['OTELCOL_CORE']}", f"v{pinned['OTELCOL_STABLE']}"},
               CONTRIB: {f"v{pinned['OTELCOL_CONTRIB']}"}}
    seen = {CORE: 0, CONTRIB: 0}
    for module, version in requires("otelcol").items():
        for family in (CORE, CONTRIB):
            if module.startswith(family + "/"):
                seen[family] += 1
                assert version in allowed[family], (module, version)
    assert seen[CORE] > 10 and seen[CONTRIB] >= 3
    manifest = yaml.safe_load((BACKENDS / "otelcol" / "manifest.yaml").read_text())
    assert manifest["dist"]["version"] == pinned["OTELCOL_CORE"]
    for section in ("receivers", "processors", "exporters", "extensions", "providers"):
        for entry in manifest[section]:
            module, version = entry["gomod"].split()
            family = CONTRIB if module.startswith(CONTRIB) else CORE
            assert version in allowed[family], entry


def test_jaeger_and_prometheus_modules_are_the_pinned_releases():
    """Jaeger's Go module is tagged v1.N beside release v2.M; Prometheus's v0.3MM.P for release 3.MM.P."""
    pinned = versions()
    assert requires("jaeger")["github.com/jaegertracing/jaeger"] == f"v{pinned['JAEGER_MODULE']}"
    assert requires("prometheus")["github.com/prometheus/prometheus"] == f"v{pinned['PROMETHEUS_MODULE']}"
    major, minor, patch = pinned["PROMETHEUS"].split(".")
    assert major == "3" and pinned["PROMETHEUS_MODULE"] == f"0.{300 + int(minor)}.{patch}"


def test_deploy_images_are_the_releases_the_tests_run():
    """The compose stack and the Kubernetes gateway run the Collector, Jaeger and Prometheus releases that
    scripts/backends.sh builds for the tests, and no other release of them."""
    pinned = versions()
    expected = {"otel/opentelemetry-collector-contrib": pinned["OTELCOL_CONTRIB"],
                "jaegertracing/jaeger": pinned["JAEGER"], "prom/prometheus": f"v{pinned['PROMETHEUS']}"}
    shipped = [image.rsplit(":", 1) for image in images()]
    for name, tag in shipped:
        if name in expected:
            assert tag == expected[name], (name, tag)
    assert {name for name, _ in shipped} >= set(expected)
