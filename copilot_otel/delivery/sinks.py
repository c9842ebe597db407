"""The sinks: an OTLP JSON lines file, OTLP over gRPC or HTTP (otlp_spans.py), or memory; see otlp/contract.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..base.parsing import ConfigError
from ..base.private_files import private_dir
from ..base.strictmodes import UnsafePath, check_folder
from ..model.records import SpanRecord
from ..otlp.contract import ExportError, Receipt, RejectedError, SpanSink  # noqa: F401 (read from here too)
from ..otlp.json_encoder import OtlpJsonEncoder
from ..otlp.limits import DEFAULT_MAX_REQUEST_BYTES
from ..otlp.resource import resource_attributes
from ..otlp.settings import OtlpSettings
from .linefile import FileBusy
from .rotation import RotatingFile, Rotation

log = logging.getLogger(__name__)


class MemorySink:
    """Keeps exported spans in a list: for tests, and apps that inspect their own agents' spans."""

    description = "memory"

    def __init__(self) -> None:
        self.records: list[SpanRecord] = []
        self._lock = threading.Lock()

    def export(self, records: Sequence[SpanRecord]) -> None:
        """Append the batch."""
        with self._lock:
            self.records.extend(records)

    def sync(self) -> None:
        """Nothing to make durable."""

    def shutdown(self) -> None:
        """Nothing to release."""


class FileSink:
    """Appends OTLP JSON lines to a file, one ExportTraceServiceRequest of at most ``max_request_bytes`` (and of
    the rotation's size) per line (a single larger span gets a line of its own); a line is never left torn. The file is
    created 0600 and rotates as ``rotation`` says; a file that is not ours, or a link, or a folder another
    user may change (strictmodes.py) is refused with a ConfigError."""

    def __init__(self, path: Path, *, resource: Mapping[str, Any] | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, rotation: Rotation = Rotation(),
                 strict: bool = True) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        self.encoder = OtlpJsonEncoder(resource if resource is not None else resource_attributes())
        # A request line fits in a rotated file: rotation keeps each file within its size, line by line.
        self.max_request_bytes = min(max_request_bytes, rotation.max_bytes or max_request_bytes)
        try:
            if strict:  # a folder others may change is refused (a sticky one is fine: the file is ours)
                check_folder(self.path.parent)
            private_dir(self.path.parent)
            self._file = RotatingFile(self.path, rotation)
        except UnsafePath as exc:
            raise ConfigError(f"refusing to write traces to {self.path}: {exc}; choose another file with "
                              "--traces-file") from None
        except FileBusy:
            raise ConfigError(f"refusing to write traces to {self.path}: another process (a daemon?) writes it "
                              "and their lines would mix; choose another file with --traces-file") from None
        except OSError as exc:
            raise ConfigError(f"cannot write traces to {self.path} ({exc.strerror or exc}); "
                              "choose another file with --traces-file, or another --state-dir") from None
        self.fresh = self._file.size == 0  # nothing written there yet (a new file, or one emptied)

    def export(self, records: Sequence[SpanRecord]) -> None:
        """Write the batch as whole request lines and hand them to the OS."""
        if records:
            self.write_encoded(b"".join(self.encoder.encode_within(records, self.max_request_bytes)))

    def write_encoded(self, lines: bytes) -> None:
        """Append requests already encoded by ``self.encoder`` (whole lines): all of them, or none."""
        try:
            self._file.write(lines)
        except OSError as exc:
            raise ExportError(f"cannot write traces to {self.path}: {exc.strerror or exc}") from exc

    def sync(self) -> None:
        """Make every line written so far durable (before the checkpoint moves past it)."""
        try:
            self._file.sync()
        except OSError as exc:
            raise ExportError(f"cannot sync traces to {self.path}: {exc.strerror or exc}") from exc

    def shutdown(self) -> None:
        """Flush to disk and close."""
        self._file.close()


def make_sink(*, traces_file: Path | None, otlp: OtlpSettings, default_file: Path,
              max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, rotation: Rotation = Rotation(),
              strict: bool = True, resource: Mapping[str, Any] | None = None) -> SpanSink:
    """The destination the configuration names; a JSON-lines file when nothing is configured. ``strict``: a file
    in a folder another user could change is refused. ``resource``: the spans' resource attributes."""
    if traces_file is not None:
        return FileSink(traces_file, max_request_bytes=max_request_bytes, rotation=rotation, strict=strict,
                        resource=resource)
    if otlp.endpoint:
        from ..otlp.resource import build_resource
        from .otlp_spans import OtlpSink  # gRPC and protobuf load only when OTLP is used

        return OtlpSink(otlp, max_request_bytes=max_request_bytes,
                        resource=build_resource(resource) if resource is not None else None)
    return FileSink(default_file, max_request_bytes=max_request_bytes, rotation=rotation, strict=strict,
                    resource=resource)

