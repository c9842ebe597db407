"""A real Prometheus on loopback, scraping targets every second: Debian's package (2.x), or Prometheus 3 built
from its Go module (``binary=backend("prometheus")``, tests/support/stack.py)."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.support.deploy import require_tool
from tests.support.servers import ServerProcess


class Prometheus(ServerProcess):
    """`prometheus` with its own port and fresh TSDB, stopped by its pid."""

    name = "prometheus"

    def __init__(self, workdir: Path, targets: list[str], *, rule_files: Sequence[Path] = (), job: str = "copilot-otel",
                 scrape: dict | None = None, extra_jobs: Sequence[dict] = (), flags: tuple[str, ...] = (),
                 external_labels: dict | None = None, alertmanagers: Sequence[str] = (), binary: Path | None = None,
                 settings: dict | None = None):
        """``scrape``: more settings of the job (scheme, tls_config, basic_auth...); ``extra_jobs``: whole jobs;
        ``flags``: more command-line flags (e.g. ``--enable-feature=exemplar-storage``); ``external_labels``: the
        global ones; ``alertmanagers``: HOST:PORT of the Alertmanagers it sends alerts to; ``binary``: another
        Prometheus than Debian's; ``settings``: a whole configuration instead of the one made of the above."""
        super().__init__(workdir)
        self.targets = targets
        self.rule_files = [Path(p) for p in rule_files]
        self.job = job
        self.scrape = dict(scrape or {})
        self.extra_jobs = list(extra_jobs)
        self.flags = tuple(flags)
        self.external_labels = dict(external_labels or {})
        self.alertmanagers = list(alertmanagers)
        self.binary = binary
        self.settings = settings

    def start(self) -> Prometheus:
        binary = str(self.binary) if self.binary else require_tool("prometheus", "prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        settings = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "external_labels": self.external_labels},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self.targets}], **self.scrape},
                               *self.extra_jobs],
        }
        if self.settings is not None:
            settings = self.settings
        if self.alertmanagers:
            settings["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": self.alertmanagers}]}]}
        config.write_text(json.dumps(settings))  # JSON is YAML
        self._launch(lambda: [binary, f"--config.file={config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                              f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1h",
                              *self.flags])
        return self

    def query(self, expr: str) -> list[dict]:
        """An instant query; returns the result vector (raises on a PromQL error)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def exemplars(self, expr: str, since: float = 3600.0) -> list[dict]:
        """/api/v1/query_exemplars over the last ``since`` seconds: [{seriesLabels, exemplars: [{labels, value,
        timestamp}]}] (needs ``--enable-feature=exemplar-storage``)."""
        now = time.time()
        url = f"{self.url}/api/v1/query_exemplars?" + urllib.parse.urlencode(
            {"query": expr, "start": now - since, "end": now + 60})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def values(self, expr: str, label: str | None = None) -> dict:
        """{label value (or ''): float} of an instant query."""
        return {(r["metric"].get(label, "") if label else ""): float(r["value"][1]) for r in self.query(expr)}
