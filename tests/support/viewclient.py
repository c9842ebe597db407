"""Requests to a daemon's web view and JSON API, as the tests and benchmarks make them.

Every request to the view's routes is built here (``headers``), so that what a request must carry
(a token, a cookie) is added in one place. Raw sockets are for clients that misbehave on purpose:
ones that never read, or read slowly.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.net import LOOPBACK

_STATE_DIRS: dict[int, Path] = {}


def serving(port: int, state_dir: Path) -> None:
    """Say that the daemon on ``port`` keeps its token in ``state_dir`` (its requests then carry it)."""
    _STATE_DIRS[port] = Path(state_dir)


def headers(port: int, extra: dict | None = None) -> dict[str, str]:
    """The headers of every request to the view on ``port``: its token, as a script sends it (Authorization:
    Bearer, read from the daemon's 0600 file as `copilot-otel open` reads it), and what ``extra`` adds."""
    sent = {}
    state_dir = _STATE_DIRS.get(port)
    if state_dir is not None:
        token = json.loads((state_dir / f"web-{port}.json").read_text())["token"]
        sent["Authorization"] = f"Bearer {token}"
    sent.update(extra or {})
    return sent


def url(port: int, path: str) -> str:
    return f"http://{LOOPBACK}:{port}{path}"


def get(port: int, path: str, *, extra: dict | None = None, timeout: float = 30.0,
        method: str = "GET") -> tuple[int, dict, bytes]:
    """(status, headers, body) of one request; a stream's body is not read."""
    request = urllib.request.Request(url(port, path), method=method, headers=headers(port, extra))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            streaming = "event-stream" in response.headers.get("Content-Type", "")
            return response.status, dict(response.headers), b"" if streaming else response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def get_json(port: int, path: str, **kwargs) -> dict:
    status, _headers, body = get(port, path, **kwargs)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


def request_head(port: int, path: str, extra: dict | None = None) -> bytes:
    """The bytes of a GET request for a raw socket."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {LOOPBACK}:{port}"]
    lines += [f"{name}: {value}" for name, value in headers(port, extra).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def send_get(port: int, path: str, *, extra: dict | None = None, rcvbuf: int | None = None,
             timeout: float = 10.0) -> socket.socket:
    """A connection that has sent a GET of ``path`` and read nothing (``rcvbuf``: its receive buffer)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(timeout)
    sock.connect((LOOPBACK, port))
    sock.sendall(request_head(port, path, extra))
    return sock


class EventStream:
    """A Server-Sent Events stream read from a raw socket: its status, then one message at a time."""

    def __init__(self, port: int, path: str, *, extra: dict | None = None, timeout: float = 30.0) -> None:
        self.sock = send_get(port, path, extra=extra, timeout=timeout)
        self._buffer = b""
        self.received = 0  # bytes, head included
        head = self._until(b"\r\n\r\n", time.monotonic() + timeout)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        self.headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self._body = b""

    def _fill(self, deadline: float) -> bytes:
        self.sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the stream ended")
        self.received += len(data)
        return data

    def _until(self, mark: bytes, deadline: float) -> bytes:
        while mark not in self._buffer:
            self._buffer += self._fill(deadline)
        head, _, self._buffer = self._buffer.partition(mark)
        return head

    def _body_until(self, mark: bytes, deadline: float) -> bytes:
        """The body (de-chunked) up to ``mark``."""
        while mark not in self._body:
            if not self.chunked:
                self._body += self._buffer or self._fill(deadline)
                self._buffer = b""
                continue
            size = int(self._until(b"\r\n", deadline).split(b";")[0], 16)
            while len(self._buffer) < size + 2:
                self._buffer += self._fill(deadline)
            self._body += self._buffer[:size]
            self._buffer = self._buffer[size + 2:]
        message, _, self._body = self._body.partition(mark)
        return message

    def message(self, timeout: float = 30.0) -> tuple[str | None, dict]:
        """The next data message: (its id, its JSON); comments and retry lines are skipped."""
        deadline = time.monotonic() + timeout
        while True:
            block = self._body_until(b"\n\n", deadline).decode()
            event_id, data = None, []
            for line in block.split("\n"):
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    data.append(line[6:])
            if data:
                return event_id, json.loads("\n".join(data))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
