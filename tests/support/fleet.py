"""A fleet on one host, for tests and bench/: machines (real ``copilot-otel run`` daemons), each with its own
home, state folder, loopback address (127.0.0.x) and host name (a UTS namespace of its own), serving /metrics
over TLS with basic auth; a rotel gateway run with deploy/rotel/gateway.env; Debian's Alertmanager and a
webhook receiver that keeps what it is sent. Every process is stopped by its pid."""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path

import bcrypt

from tests.support.backends import KeepingHttp
from tests.support.daemon import DaemonProcess
from tests.support.deploy import DEPLOY, require_tool
from tests.support.net import LOOPBACK
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import Samples, parse
from tests.support.servers import ServerProcess
from tests.support.tls import make_ca, make_cert

GATEWAY_ENV = DEPLOY / "rotel" / "gateway.env"
SCRAPER = "prometheus"  # the basic-auth user Prometheus scrapes as
PASSWORD = "fleet scrape password"


def gateway_settings(path: Path = GATEWAY_ENV) -> dict[str, str]:
    """The ROTEL_* settings of deploy/rotel/gateway.env (KEY=VALUE lines; # starts a comment line)."""
    settings = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key] = value
    return settings


class RotelGateway(OtlpReceiver):
    """rotel-agent as the fleet's gateway: deploy/rotel/gateway.env's settings (``overrides`` on top), OTLP in on
    loopback ports, out over gRPC to ``downstream`` (the counting receiver's endpoint). ``down(graceful=False)``
    is a SIGKILL; ``up()`` brings it back on the same ports."""

    def __init__(self, downstream: str, overrides: dict[str, str] | None = None) -> None:
        super().__init__()
        self.downstream = downstream
        self.settings = {**gateway_settings(), **(overrides or {})}

    def _environment(self) -> dict[str, str]:
        return {**super()._environment(), **self.settings}

    def _command(self) -> list[str]:
        assert self._tmp is not None
        folder = Path(self._tmp.name)
        # Flags take precedence over the file's variables: only where it listens and sends to differ.
        return [str(self.agent_path), "start",
                "--otlp-grpc-endpoint", f"{LOOPBACK}:{self.grpc_port}",
                "--otlp-http-endpoint", f"{LOOPBACK}:{self.http_port}",
                "--otlp-exporter-endpoint", self.downstream,
                "--pid-file", str(folder / "gateway.pid"), "--log-file", str(folder / "gateway-daemon.log")]


class Pki:
    """A CA, one server certificate for every machine's address, and the web config each daemon reads: TLS and
    basic auth (user ``prometheus``, bcrypt), the Prometheus exporters' format."""

    def __init__(self, folder: Path, addresses: list[str]) -> None:
        self.ca, ca_key = make_ca(folder)
        self.cert, self.key = make_cert(folder, "machines", (self.ca, ca_key),
                                        ",".join(f"IP:{a}" for a in addresses), "serverAuth")
        # bcrypt's lowest cost: five daemons check a login on every scrape, on a shared test machine.
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
        self.web_config = folder / "web-config.yml"
        self.web_config.write_text(f"tls_server_config:\n  cert_file: {self.cert}\n  key_file: {self.key}\n"
                                   f"basic_auth_users:\n  {SCRAPER}: {hashed}\n")

    def scrape_config(self) -> dict:
        """The settings of a Prometheus job that scrapes the machines: https, the CA, basic auth."""
        return {"scheme": "https", "tls_config": {"ca_file": str(self.ca)},
                "basic_auth": {"username": SCRAPER, "password": PASSWORD},
                "scrape_interval": "2s", "scrape_timeout": "2s"}  # a TLS handshake each time, on a busy machine


class Machine(DaemonProcess):
    """One machine of the fleet: a daemon named ``name`` by its own UTS namespace (``unshare --uts``, then
    ``hostname``: root only), listening on ``address`` over TLS with basic auth, with no identity settings."""

    def __init__(self, name: str, root: Path, address: str, pki: Pki, *, env: dict[str, str],
                 args: tuple[str, ...] = ()) -> None:
        folder = root / name
        (folder / "home" / "session-state").mkdir(parents=True, exist_ok=True)
        uts = ("unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name)
        super().__init__(folder / "home", folder / "state", env=env,
                         args=(*args, "--web-config-file", str(pki.web_config)), prefix=uts, address=address,
                         log_path=folder / "daemon.log", log_level="info")
        self.name = name
        self.pki = pki
        self._context = ssl.create_default_context(cafile=str(pki.ca))

    @property
    def target(self) -> str:
        return f"{self.address}:{self.port}"

    def _ready(self) -> bool:
        self._exited()
        return (self.state_dir / f"web-{self.port}.json").exists()  # written once it serves

    def scrape_text(self, timeout: float = 5.0) -> str:
        auth = base64.b64encode(f"{SCRAPER}:{PASSWORD}".encode()).decode()
        request = urllib.request.Request(f"https://{self.target}/metrics", headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(request, timeout=timeout, context=self._context) as response:
            return response.read().decode()

    def scrape(self, timeout: float = 5.0) -> Samples:
        return parse(self.scrape_text(timeout))


def can_name_machines() -> str | None:
    """Why this run cannot give each daemon a host name of its own (a UTS namespace), or None when it can."""
    if shutil.which("unshare") is None or shutil.which("hostname") is None:
        return "unshare or hostname is missing (util-linux, hostname)"
    probe = subprocess.run(["unshare", "--uts", "sh", "-c", "hostname fleet-probe && hostname"], capture_output=True,
                           text=True, timeout=10)
    if probe.returncode != 0 or probe.stdout.strip() != "fleet-probe":
        return f"cannot make a UTS namespace here (needs root): {probe.stderr.strip()}"
    return None


class Webhook(KeepingHttp):
    """An HTTP server on loopback that keeps every JSON body POSTed to it (Alertmanager's webhook receiver)."""

    def __init__(self) -> None:
        super().__init__(lambda _body: (200, b""))
        self.url = f"{self.base}/alerts"

    def alerts(self) -> list[dict]:
        """Every alert of every notification so far."""
        return [alert for body in list(self.requests) for alert in json.loads(body)["alerts"]]


class Alertmanager(ServerProcess):
    """Debian's ``prometheus-alertmanager`` on a free loopback port, no cluster, routing every alert to one
    webhook at once (group_wait 1 s), stopped by its pid."""

    name = "alertmanager"

    def __init__(self, workdir: Path, webhook_url: str) -> None:
        super().__init__(workdir)
        self.webhook_url = webhook_url

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> Alertmanager:
        binary = require_tool("prometheus-alertmanager", "prometheus-alertmanager")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "alertmanager.yml"
        config.write_text(json.dumps({
            "route": {"receiver": "webhook", "group_by": ["alertname", "host_name", "session_id"],
                      "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
            "receivers": [{"name": "webhook", "webhook_configs": [{"url": self.webhook_url}]}],
        }))
        self._launch(lambda: [binary, f"--config.file={config}", f"--storage.path={self.workdir / 'data'}",
                              f"--web.listen-address={self.address}", "--cluster.listen-address="])
        return self
