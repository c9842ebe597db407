"""Our OpenTelemetry resource: which machine and which install speak, without importing the SDK.

Every span, the OTLP metrics push and ``target_info`` carry the same attributes:

- what the SDK's own resource gives (``telemetry.sdk.*``, ``service.name``, ``service.version``);
- the machine, as the SDK's host and OS detectors name it (``host.name``, ``host.arch``, ``os.type``,
  ``os.version``) and the runtime as its process detector does (``process.runtime.name``/``version``);
  ``process.pid`` is left out: a restart would change the resource, and a replay's output would differ run to run;
- ``service.instance.id``: a UUID kept in the state folder (INSTANCE_FILE), so the same install is the same
  instance across restarts and a new state folder is a new one;
- then the user's ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``, which win over all of the above.

``replay --traces-file`` and the file sink need only the attributes; the SDK's ``Resource.create`` costs a
50 ms import. With OTEL_EXPERIMENTAL_RESOURCE_DETECTORS set, the SDK's detectors run instead (ours fill in
what they leave out). Unit tests compare each part with what the SDK's detectors give.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
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
HOST_NAME = "host.name"
ENV_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
ENV_SERVICE_NAME = "OTEL_SERVICE_NAME"
ENV_DETECTORS = "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"
INSTANCE_FILE = "instance-id"  # in the state folder: this install's service.instance.id


@lru_cache(maxsize=1)
def machine_attributes() -> dict[str, Any]:
    """host.*, os.* and process.runtime.* as the SDK's host, OS and process detectors give them."""
    import socket

    uname = os.uname()
    version = sys.version_info
    runtime = ".".join(map(str, version[:3] if version.releaselevel == "final" and not version.serial else version))
    return {HOST_NAME: socket.gethostname(), "host.arch": uname.machine, "os.type": uname.sysname.lower(),
            "os.version": uname.release, "process.runtime.name": sys.implementation.name,
            "process.runtime.version": runtime}


def instance_id(state_dir: Path, *, strict: bool = True) -> str | None:
    """This state folder's service.instance.id: read from INSTANCE_FILE, or made (a new UUID) and kept there 0600.
    None, with a warning, when the folder cannot hold it (the resource then goes without)."""
    from ..base.private_files import read_private, state_folder, write_new_private

    path = Path(state_dir) / INSTANCE_FILE
    try:
        state_folder(path.parent, strict=strict)
    except OSError as exc:  # the command that writes there says so, in its own words (or goes on without it)
        log.debug("no state folder %s for the service.instance.id: %s", path.parent, exc)
        return None
    try:
        known = read_private(path)
        if known is None:
            write_new_private(path, f"{uuid.uuid4()}\n".encode())  # a racing start's id wins if it was first
            known = read_private(path)
        text = (known or b"").decode("ascii", "replace").strip()
        if text:
            return text
        log.warning("%s is empty: the resource has no service.instance.id (remove it to get a new one)", path)
    except OSError as exc:
        log.warning("cannot keep this install's service.instance.id in %s (%s); the resource goes without it",
                    path, exc.strerror or exc)
    return None


def resource_attributes(environ: Mapping[str, str] | None = None, *, state_dir: Path | None = None,
                        strict: bool = True) -> dict[str, Any]:
    """The attributes of the resource every exported span and metric carries (``state_dir``: the folder that
    keeps service.instance.id; without it, only the user's)."""
    env = os.environ if environ is None else environ
    ours = instance_id(state_dir, strict=strict) if state_dir is not None else None
    if env.get(ENV_DETECTORS, "").strip():
        return _from_sdk(ours)
    from opentelemetry.sdk.version import __version__ as sdk_version  # a tiny module

    attributes: dict[str, Any] = {"telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
                                  "telemetry.sdk.version": sdk_version, SERVICE_INSTANCE_ID: ours,
                                  **machine_attributes()}
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
    if attributes[SERVICE_INSTANCE_ID] is None:  # where the SDK puts its random one: ours or the user's only
        del attributes[SERVICE_INSTANCE_ID]
    return attributes


def _from_sdk(ours: str | None = None) -> dict[str, Any]:
    """The SDK's Resource.create (OTEL_EXPERIMENTAL_RESOURCE_DETECTORS), our machine attributes where it has none,
    and our instance id in place of its random one."""
    from opentelemetry.sdk.resources import Resource

    attributes = {**machine_attributes(), **Resource.create({SERVICE_VERSION: __version__}).attributes}
    if SERVICE_INSTANCE_ID not in os.environ.get(ENV_RESOURCE_ATTRIBUTES, ""):
        attributes.pop(SERVICE_INSTANCE_ID, None)
        if ours is not None:
            attributes[SERVICE_INSTANCE_ID] = ours
    if str(attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        attributes[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    return attributes


def build_resource(attributes: Mapping[str, Any] | None = None) -> Resource:
    """``attributes`` (by default resource_attributes() without a state folder) as the SDK's Resource."""
    from opentelemetry.sdk.resources import Resource

    return Resource(dict(attributes) if attributes is not None else resource_attributes())


def resource_of(config: Any) -> dict[str, Any]:
    """The resource of a command run with ``config`` (a Config): its state folder keeps the instance id."""
    return resource_attributes(state_dir=config.state_dir, strict=not config.no_strict_modes)
