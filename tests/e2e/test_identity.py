"""Every machine is known by name without a setting: the daemon's spans, its OTLP metrics push and its target_info
carry the host name and the state folder's instance id; a restart keeps the id, another state folder gets another,
and the user's OTEL_RESOURCE_ATTRIBUTES win. A gateway that refuses the metrics push is counted and said."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.files import new_session
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import fetch, value

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
PLAIN = next((FIXTURES / "plain" / "session-state").glob("*/events.jsonl"))
PUSH = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "200"}


def kept_id(state: Path) -> str:
    return (state / "instance-id").read_text().strip()


def target_info(daemon: DaemonProcess) -> dict[str, str]:
    (labels,) = [dict(labels) for name, labels in daemon.scrape() if name == "target_info"]
    return labels


def test_spans_push_and_target_info_name_the_machine_and_the_install(tmp_path):
    """With no identity setting, every span and the metrics push carry host.name (this host), host.arch, os.type
    and the service.instance.id kept in the state folder, and target_info says the same; a restart keeps the id."""
    home, state = tmp_path / "home", tmp_path / "state"
    new_session(home, "one").write_bytes(PLAIN.read_bytes())
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", **PUSH}
        with DaemonProcess(home, state, env=env, args=FAST) as daemon:
            spans = receiver.wait_for_spans(1, timeout=30)
            pushed = receiver.wait_for_metric("copilot_sessions_started", timeout=30)
            first = target_info(daemon)
        with DaemonProcess(home, state, env=env, args=FAST) as daemon:
            again = target_info(daemon)
    ours = kept_id(state)
    resources = {tuple(sorted(span.resource.items())) for span in spans}
    assert len(resources) == 1
    resource = spans[0].resource
    assert resource["host.name"] == socket.gethostname() and resource["service.instance.id"] == ours
    assert resource["os.type"] == "linux" and resource["host.arch"] and resource["service.name"] == "copilot-otel"
    assert pushed.resource == resource
    assert first["host_name"] == socket.gethostname() and first["service_instance_id"] == ours
    assert again == first


def test_replay_names_its_install_and_the_users_attributes_win(tmp_path):
    """replay into a file: the state folder's instance id (the one a daemon there uses), a new folder's new one,
    and OTEL_RESOURCE_ATTRIBUTES' host.name and service.instance.id over the detected ones."""
    ids = []
    for name, env in (("a", {}), ("a", {}), ("b", {}),
                      ("a", {"OTEL_RESOURCE_ATTRIBUTES": "host.name=dev-42,service.instance.id=ci-7,team=payments"})):
        traces = tmp_path / f"{name}-{len(ids)}.jsonl"
        result = run_replay(str(PLAIN.parent), "--traces-file", str(traces), "--state-dir", str(tmp_path / name),
                            env=env)
        assert result.returncode == 0, result.stderr.decode()
        (resource,) = {tuple(sorted(span.resource.items())) for span in read_spans(traces)}
        ids.append(dict(resource))
    same, again, other, pinned = ids
    assert same == again and same["service.instance.id"] == kept_id(tmp_path / "a")
    assert other["service.instance.id"] == kept_id(tmp_path / "b") != same["service.instance.id"]
    assert pinned["host.name"] == "dev-42" and pinned["service.instance.id"] == "ci-7" and pinned["team"] == "payments"
    assert {k: v for k, v in pinned.items() if k not in ("host.name", "service.instance.id", "team")} == \
        {k: v for k, v in same.items() if k not in ("host.name", "service.instance.id")}


def test_a_gateway_without_a_metrics_pipeline_is_counted_and_said_then_recovers(tmp_path):
    """A traces-only gateway (Rotel with its metrics receiver off) answers each push UNIMPLEMENTED over gRPC:
    counted by reason, said on /healthz, while spans still go through; once the gateway has a metrics pipeline
    (restarted with one, on the same ports), the next push goes through and /healthz says ok again."""
    home, state = tmp_path / "home", tmp_path / "state"
    new_session(home, "one").write_bytes(PLAIN.read_bytes())
    with OtlpReceiver(metrics=False) as gateway:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", **PUSH}
        with DaemonProcess(home, state, env=env, args=FAST) as daemon:
            daemon.wait_for_metric("copilot_otel_metrics_push_failures_total", 2, timeout=30, reason="unimplemented")
            said = fetch(daemon.health_url)
            failing = daemon.scrape()
            assert gateway.wait_for_spans(1, timeout=30)
            gateway.down()
            gateway.metrics_receiver = True
            gateway.up()
            wait_until(lambda: fetch(daemon.health_url) == "ok\n", timeout=30, what="/healthz ok again")
            recovered = daemon.scrape()
            assert gateway.wait_for_metric("copilot_sessions_started", timeout=30)
            text = daemon.log_text()
    assert said.startswith("ok (") and "metrics push failing" in said and "UNIMPLEMENTED" in said
    assert value(failing, "copilot_otel_metrics_push_last_success_timestamp_seconds") == 0
    assert value(recovered, "copilot_otel_metrics_push_last_success_timestamp_seconds") > 0
    assert value(recovered, "copilot_otel_metrics_push_failures_total", reason="unimplemented") >= 2
    assert "UNIMPLEMENTED" in text and "OTLP metrics push works again" in text


def test_an_http_gateway_that_answers_404_is_counted_and_said(tmp_path):
    """Over OTLP/HTTP the same traces-only gateway answers /v1/metrics with 404: counted as http_404 and said
    on /healthz with the variable to check; the spans are delivered all the same."""
    home, state = tmp_path / "home", tmp_path / "state"
    new_session(home, "one").write_bytes(PLAIN.read_bytes())
    with OtlpReceiver(metrics=False) as gateway:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.http_base, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               **PUSH}
        with DaemonProcess(home, state, env=env, args=FAST) as daemon:
            daemon.wait_for_metric("copilot_otel_metrics_push_failures_total", 2, timeout=30, reason="http_404")
            daemon.wait_for_metric("copilot_otel_spans_exported_total", 1, timeout=30)
            said = fetch(daemon.health_url)
    assert "metrics push failing" in said and "HTTP 404" in said and "is OTEL_EXPORTER_OTLP_ENDPOINT right?" in said
