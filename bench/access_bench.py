"""What "only the owner gets in" costs a scrape, and what a flood of bad logins does to one (issue 21).

Runs the real daemon three ways on loopback and prints figures:

  plain          /metrics over HTTP, as today's scrapers see it
  tls+basic      /metrics over TLS with a bcrypt basic-auth login (--web-config-file), a new
                 connection each scrape as a careful scraper makes it; the first login's bcrypt cost
  under flood    the same scrapes while --flood-clients threads send wrong passwords as fast as the
                 daemon answers: a remembered login costs no bcrypt, and at most 4 checks run at once
                 (more get 503), so the scraper is not queued behind the flood

    .venv/bin/python bench/access_bench.py [--scrapes 200] [--flood-clients 8] [--flood-seconds 5]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import multiprocessing
import ssl
import tempfile
import time
from pathlib import Path

import bcrypt
from _common import DaemonProcess, median, percentile

from tests.support.tls import make_ca, make_cert

PASSWORD = "a long and correct password"


class _TlsDaemon(DaemonProcess):
    def _ready(self) -> bool:
        self._exited()
        return (self.state_dir / f"web-{self.port}.json").exists()


def scrape_ms(port: int, context: ssl.SSLContext | None, headers: dict) -> tuple[float, int]:
    """One /metrics on a new connection: (milliseconds, status)."""
    started = time.perf_counter()
    connection = (http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30) if context
                  else http.client.HTTPConnection("127.0.0.1", port, timeout=30))
    try:
        connection.request("GET", "/metrics", headers={"Host": "localhost", **headers})
        response = connection.getresponse()
        response.read()
        return (time.perf_counter() - started) * 1000, response.status
    finally:
        connection.close()


def report(label: str, times: list[float]) -> None:
    print(f"  {label:<44} p50 {median(times):6.1f} ms  p99 {percentile(times, 99):6.1f} ms  "
          f"max {max(times):6.1f} ms  ({len(times)} scrapes)")


def flood(port: int, ca: str, n: int, seconds: float, results) -> None:
    """Wrong passwords, one new connection after another, for ``seconds``; puts {status: count} on ``results``."""
    context = ssl.create_default_context(cafile=ca)
    bad, statuses = login("prometheus", f"guess-{n}"), {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            code = scrape_ms(port, context, bad)[1]
        except OSError:
            code = 0
        statuses[code] = statuses.get(code, 0) + 1
    results.put(statuses)


def login(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--flood-clients", type=int, default=8)
    parser.add_argument("--flood-seconds", type=float, default=5.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="access-bench-"))
    (work / "home" / "session-state").mkdir(parents=True)
    ca = make_ca(work / "pki")
    cert, key = make_cert(work / "pki", "server", ca, "IP:127.0.0.1", "serverAuth")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    config = work / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                      f"basic_auth_users:\n  prometheus: {hashed}\n")
    context = ssl.create_default_context(cafile=str(ca[0]))

    print("issue 21: the cost of the endpoint's access checks (real daemon, loopback)")
    plain = DaemonProcess(work / "home", work / "plain", traces_file=work / "t1.jsonl", log_level="warning").start()
    try:
        report("plain http", [scrape_ms(plain.port, None, {})[0] for _ in range(args.scrapes)])
        refused = [scrape_ms(plain.port, None, {"Host": "evil.example"}) for _ in range(50)]
        assert {status for _ms, status in refused} == {403}
        report("plain http, foreign Host (403)", [ms for ms, _status in refused])
    finally:
        plain.stop()

    secured = _TlsDaemon(work / "home", work / "tls", traces_file=work / "t2.jsonl", log_level="warning",
                         args=("--web-config-file", str(config))).start()
    try:
        good = login("prometheus", PASSWORD)
        first, status = scrape_ms(secured.port, context, good)
        assert status == 200, status
        print(f"  {'tls+basic, first login (bcrypt cost 10)':<44} {first:6.1f} ms")
        report("tls+basic, login remembered", [scrape_ms(secured.port, context, good)[0]
                                               for _ in range(args.scrapes)])
        # The flood runs in processes of its own, so that the scraper's times are not its GIL's.
        results = multiprocessing.get_context("fork").Queue()
        flooders = [multiprocessing.get_context("fork").Process(
            target=flood, args=(secured.port, str(ca[0]), n, args.flood_seconds + 1, results), daemon=True)
            for n in range(args.flood_clients)]
        for process in flooders:
            process.start()
        time.sleep(0.5)  # let the flood get going
        times, deadline = [], time.monotonic() + args.flood_seconds
        while time.monotonic() < deadline:
            ms, status = scrape_ms(secured.port, context, good)
            assert status == 200, status
            times.append(ms)
        statuses: dict[int, int] = {}
        for _ in flooders:
            for code, count in results.get(timeout=60).items():
                statuses[code] = statuses.get(code, 0) + count
        for process in flooders:
            process.join(timeout=30)
        report(f"tls+basic, under a flood of {args.flood_clients} bad logins", times)
        print(f"  {'the flood got':<44} " + ", ".join(f"{count} x {code}" for code, count in sorted(statuses.items())))
    finally:
        secured.stop()


if __name__ == "__main__":
    main()
