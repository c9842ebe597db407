"""copilot_otel.otlp.resource: the SDK's resource, the machine as the SDK's detectors name it, and an instance id
kept in the state folder; the user's OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME win over all of it."""

from __future__ import annotations

import os
import stat
import uuid

import pytest
from opentelemetry.sdk.resources import OsResourceDetector, ProcessResourceDetector, Resource, _HostResourceDetector

from copilot_otel import __version__
from copilot_otel.otlp.resource import INSTANCE_FILE, _from_sdk, instance_id, machine_attributes, resource_attributes

CASES = [
    {},
    {"OTEL_SERVICE_NAME": "svc"},
    {"OTEL_RESOURCE_ATTRIBUTES": "team=a%20b, host.name = x ,deployment.environment=prod"},
    {"OTEL_RESOURCE_ATTRIBUTES": "team=a,service.instance.id=i,service.name=from-attrs", "OTEL_SERVICE_NAME": "svc"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=,service.version=9,telemetry.sdk.name=x"},
    {"OTEL_RESOURCE_ATTRIBUTES": "bad,k=v=w,=empty-key"},
]
ENV = ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS")


@pytest.fixture
def environ(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)

    def setenv(values: dict) -> dict:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        return values

    return setenv


def test_the_machine_is_named_as_the_sdks_detectors_name_it():
    """host.name and host.arch as the host detector gives them, os.* as the OS detector, the runtime as the
    process detector (its pid and command left out: they change at every start)."""
    host = _HostResourceDetector().detect().attributes
    process = ProcessResourceDetector().detect().attributes
    expected = {"host.name": host["host.name"], "host.arch": host["host.arch"],
                **OsResourceDetector().detect().attributes,
                "process.runtime.name": process["process.runtime.name"],
                "process.runtime.version": process["process.runtime.version"]}
    assert machine_attributes() == expected


@pytest.mark.parametrize("values", CASES)
def test_the_sdks_resource_with_the_machine_under_the_users_attributes(values, environ):
    """Every attribute Resource.create gives is there with its value (minus its random instance id), the machine's
    beneath the user's: a host.name the user sets wins."""
    environ(values)
    ours = resource_attributes(values)
    created = dict(Resource.create({"service.version": __version__}).attributes)
    user_id = "service.instance.id" in values.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not user_id:
        created.pop("service.instance.id")
    if created["service.name"].startswith("unknown_service"):
        created["service.name"] = "copilot-otel"
    users = dict(item.split("=", 1) for item in values.get("OTEL_RESOURCE_ATTRIBUTES", "").replace(" ", "").split(",")
                 if "=" in item and not item.startswith("="))
    machine = {k: v for k, v in machine_attributes().items() if k not in users}
    assert ours == {**machine, **created}
    assert _from_sdk() == ours
    assert ours["service.version"] == __version__


def test_an_instance_id_is_kept_in_the_state_folder_and_a_new_folder_gets_a_new_one(tmp_path, environ):
    """The first use of a state folder makes a UUID, kept 0600; the next use reads the same; another folder has
    another; the user's service.instance.id wins over it."""
    first = resource_attributes({}, state_dir=tmp_path / "state")["service.instance.id"]
    uuid.UUID(first)
    kept = tmp_path / "state" / INSTANCE_FILE
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and kept.read_text() == f"{first}\n"
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert resource_attributes({}, state_dir=tmp_path / "state")["service.instance.id"] == first
    assert resource_attributes({}, state_dir=tmp_path / "other")["service.instance.id"] != first
    pinned = environ({"OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=ci-runner-7"})
    assert resource_attributes(pinned, state_dir=tmp_path / "state")["service.instance.id"] == "ci-runner-7"
    assert [p.name for p in (tmp_path / "state").iterdir()] == [INSTANCE_FILE]  # no temp file left behind


def test_a_link_planted_as_the_instance_file_is_not_followed(tmp_path, caplog):
    """A symbolic link where the id is kept is refused with a warning: the resource goes without an id, and
    the file it points at is neither read into the resource nor written."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    target.write_text("not-an-id-of-ours\n")
    os.symlink(target, state / INSTANCE_FILE)
    assert instance_id(state) is None
    assert "symbolic link" in caplog.text and target.read_text() == "not-an-id-of-ours\n"
    assert "service.instance.id" not in resource_attributes({}, state_dir=state)
