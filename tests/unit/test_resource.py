"""copilot_otel.export.resource gives the attributes the OTel SDK's Resource.create would, without importing it."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource

from copilot_otel import __version__
from copilot_otel.export.resource import _from_sdk, resource_attributes

CASES = [
    {},
    {"OTEL_SERVICE_NAME": "svc"},
    {"OTEL_RESOURCE_ATTRIBUTES": "team=a%20b, host.name = x ,deployment.environment=prod"},
    {"OTEL_RESOURCE_ATTRIBUTES": "team=a,service.instance.id=i,service.name=from-attrs", "OTEL_SERVICE_NAME": "svc"},
    {"OTEL_RESOURCE_ATTRIBUTES": "service.name=,service.version=9,telemetry.sdk.name=x"},
    {"OTEL_RESOURCE_ATTRIBUTES": "bad,k=v=w,=empty-key"},
]


@pytest.mark.parametrize("environ", CASES)
def test_same_attributes_in_the_same_order_as_the_sdk(environ, monkeypatch):
    """The file sink's resource is the SDK's (keys, values and their order), minus a random instance id."""
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    sdk = _from_sdk()
    assert list(resource_attributes(environ).items()) == list(sdk.items())
    assert sdk["service.version"] == __version__
    created = Resource.create({"service.version": __version__}).attributes
    assert {k: v for k, v in sdk.items() if k != "service.name"} == \
        {k: v for k, v in created.items() if k not in ("service.name", "service.instance.id")
         or (k == "service.instance.id" and "service.instance.id" in environ.get("OTEL_RESOURCE_ATTRIBUTES", ""))}
