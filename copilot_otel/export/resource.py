"""Our OpenTelemetry resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), without importing the SDK.

`replay --traces-file` and the file sink need only the resource's attributes; the SDK's
``Resource.create`` costs a 50 ms import. With the default detectors this computes the same
attributes in the same order (a unit test compares the two); with
OTEL_EXPERIMENTAL_RESOURCE_DETECTORS set it asks the SDK itself. The SDK's random
``service.instance.id`` is left out unless the user sets one: ours must be the same on every replay.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ..version import __version__

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

log = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "copilot-otel"
SERVICE_NAME = "service.name"
SERVICE_VERSION = "service.version"
SERVICE_INSTANCE_ID = "service.instance.id"
ENV_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_DETECTORS = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"


def resource_attributes(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The attributes of the resource every exported span carries."""
    env = os.environ if environ is None else environ
    if env.get(ENV_DETECTORS, "").strip():
        return _from_sdk()
    from opentelemetry.sdk.version import __version__ as sdk_version  # a tiny module

    attributes: dict[str, Any] = {"telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
                                  "telemetry.sdk.version": sdk_version, SERVICE_INSTANCE_ID: None}
    for item in env.get(ENV_RESOURCE_ATTRIBUTES, "").split(",") if env.get(ENV_RESOURCE_ATTRIBUTES) else ():
        key, sep, value = item.partition("=")
        if not sep:
            log.warning("Invalid key value resource attribute pair %s: not key=value", item)
            continue
        if key.strip():  # the SDK drops an attribute with an empty key
            attributes[key.strip()] = unquote(value.strip())
    if env.get(ENV_SERVICE_NAME):
        attributes[SERVICE_NAME] = env[ENV_SERVICE_NAME]
    attributes[SERVICE_VERSION] = __version__
    if not attributes.get(SERVICE_NAME):
        attributes[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    if attributes[SERVICE_INSTANCE_ID] is None:  # where the SDK puts its random one: only the user's is kept
        del attributes[SERVICE_INSTANCE_ID]
    return attributes


def _from_sdk() -> dict[str, Any]:
    from opentelemetry.sdk.resources import Resource

    attributes = dict(Resource.create({SERVICE_VERSION: __version__}).attributes)
    if SERVICE_INSTANCE_ID not in os.environ.get(ENV_RESOURCE_ATTRIBUTES, ""):
        attributes.pop(SERVICE_INSTANCE_ID, None)
    if str(attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        attributes[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    return attributes


def build_resource() -> Resource:
    """Our resource as the SDK's Resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES honoured)."""
    from opentelemetry.sdk.resources import Resource

    return Resource(resource_attributes())
