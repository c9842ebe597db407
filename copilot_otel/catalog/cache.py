"""Every session under a COPILOT_HOME at a glance, from its files: what `sessions` lists, and what
the daemon's /api/sessions serves for the sessions it did not read whole itself.

Tallying a session means reading its whole log through the session model, which costs
(about 0.5 ms per 10 kB): so each summary is kept under its log's identity (inode, size,
modification time) and only logs that changed are read again, in worker processes when
there are many. The cache lives in memory, and in a file (0600, replaced whole) when one is
named. A log last written before ``since`` is skipped without being read.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, get_args, get_origin

import msgspec
from msgspec import Meta, Struct, defstruct
from msgspec.structs import fields, replace

from ..base.private_files import private_dir, read_private, write_private
from ..config import DEFAULT_MAX_LINE_BYTES
from ..model.options import ModelOptions
from ..model.summary import SessionSummary
from ..model.usage import INT64_MAX
from ..source.sources import UnreadableLog, list_sessions, path_from_text, path_text
from ..source.workspace import NameCache
from .history import summarize_log

log = logging.getLogger(__name__)

# A summary with other fields, or made by other rules (2: a name shown by the content capture rule; 4: no name: each
# is read from its workspace.yaml at each scan, never stored here), makes the cached ones unusable: start afresh.
CACHE_VERSION = "5:" + ",".join(SessionSummary.__struct_fields__)
PARALLEL_MIN = 128  # fewer logs to read are read in this process: starting workers costs more
SHARD = 32


class LogSummary(Struct, frozen=True):
    """A session log and its summary (None: the log could not be read; ``error`` says why)."""

    path: Path
    summary: SessionSummary | None
    error: str | None = None


def log_summary(path: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> LogSummary:
    """One whole session log tallied (malformed lines are skipped quietly), not named (Catalog names each session,
    cached or not)."""
    try:
        return LogSummary(path, summarize_log(path, ModelOptions(), max_line_bytes, name=False))
    except UnreadableLog as exc:
        return LogSummary(path, None, exc.reason)


class _Shard(Struct, frozen=True):
    """Summarize a list of logs (plain data: a worker process can be handed it)."""

    max_line_bytes: int

    def __call__(self, paths: list[Path]) -> list[LogSummary]:
        return [log_summary(path, max_line_bytes=self.max_line_bytes) for path in paths]


def _key(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


# A cache entry as written: [identity key, summary], every number a non-negative int64 (or a finite float), every
# field there and no other. msgspec checks an entry against these types in C: a listing of cached summaries costs
# little more than reading the file.
_INT = Annotated[int, Meta(ge=0, le=INT64_MAX)]
_FLOAT = Annotated[float, Meta(ge=0)]


def _checked(kind: Any) -> Any:
    """``kind`` (a summary field's type) with its numbers bounded, and its records as checked copies."""
    if kind is int:
        return _INT
    if kind is float:
        return _FLOAT
    if isinstance(kind, type) and issubclass(kind, Struct):
        return _checked_struct(kind)
    args = get_args(kind)
    if not args:
        return kind
    origin = get_origin(kind)
    if origin is UnionType:  # str | None
        return kind
    return origin[tuple(a if a is Ellipsis else _checked(a) for a in args)]


@cache
def _checked_struct(kind: type[Struct]) -> Any:
    config = kind.__struct_config__
    return defstruct(f"Checked{kind.__name__}", [(f.name, _checked(f.type)) for f in fields(kind)],
                     forbid_unknown_fields=True, array_like=config.array_like)


_CHECKED_SUMMARY = _checked_struct(SessionSummary)
_KEY = tuple[_INT, _INT, _INT]
_CHECKED: msgspec.json.Decoder = msgspec.json.Decoder(tuple[_KEY, _CHECKED_SUMMARY])  # type: ignore[valid-type]
_ENTRY = msgspec.json.Decoder(tuple[list[int], SessionSummary])
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])  # the file, then its logs: each entry decoded apart


def _entry(raw: msgspec.Raw) -> tuple[list[int], SessionSummary] | None:
    """A cache entry as written, or None for anything else."""
    try:
        _CHECKED.decode(raw)
        return _ENTRY.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


class Catalog:
    """The summaries of the sessions in one session-state folder, each read again only when its log changed."""

    def __init__(self, root: Path, *, cache_file: Path | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.root = Path(root)
        self.cache_file = cache_file
        self.max_line_bytes = max_line_bytes
        self.version = CACHE_VERSION
        self._cache: dict[str, tuple[list[int], SessionSummary]] = {}  # str(path) -> (identity key, summary)
        self._lock = threading.Lock()
        self._loaded = False
        self._dirty = False  # the cache file needs writing again even if no summary changed
        self._names: dict[Path, NameCache] = {}  # each session's name, kept in memory only

    def scan(self, *, since_ns: int = 0, workers: int | None = None,
             known: Mapping[Path, SessionSummary] | None = None) -> list[LogSummary]:
        """Every session log (those written since ``since_ns``), summarized; raises SourceError when the
        folder cannot be listed. Unreadable logs come back with their error. ``known``: summaries the
        caller already holds (the daemon's, of the logs it read whole), used as they are."""
        known = known or {}
        with self._lock:
            self._load()
            stale: list[tuple[Path, list[int]]] = []
            found: list[LogSummary] = []
            for path in list_sessions(self.root):
                if path in known:
                    if known[path].last_event_ns >= since_ns:
                        found.append(LogSummary(path, known[path]))
                    continue
                try:
                    st = os.stat(path)
                except OSError as exc:
                    found.append(LogSummary(path, None, exc.strerror or str(exc)))
                    continue
                if st.st_mtime_ns < since_ns:
                    continue
                key = _key(st)
                cached = self._cache.get(str(path))
                if cached is not None and cached[0] == key:
                    found.append(LogSummary(path, self._named(path, cached[1])))
                else:
                    stale.append((path, key))
            fresh = self._read([path for path, _key_ in stale], workers)
            changed = False
            for (path, key), item in zip(stale, fresh):
                if item.summary is not None:
                    # The name is the session's text (its first prompt): never stored, read at each scan.
                    self._cache[str(path)] = (key, replace(item.summary, name=None))
                    item = LogSummary(path, self._named(path, item.summary))
                    changed = True
                found.append(item)
            changed |= self._drop_missing({str(item.path) for item in found if item.summary is not None})
            if changed or self._dirty:
                self._save()
                self._dirty = False
            return found

    def _named(self, path: Path, summary: SessionSummary) -> SessionSummary:
        """``summary`` with its session's name now (workspace.yaml read again only when it changed)."""
        names = self._names.get(path)
        if names is None:
            names = self._names[path] = NameCache()
        name = names.of(path.parent)
        return summary if name == summary.name else replace(summary, name=name)

    def _read(self, paths: list[Path], workers: int | None) -> list[LogSummary]:
        job = _Shard(self.max_line_bytes)
        if len(paths) < PARALLEL_MIN or workers == 1:
            return job(paths)
        from ..base.workers import MAX_WORKERS, WorkerPool, available_cpus
        from ..logreader import LogReader  # noqa: F401
        from . import quick  # noqa: F401 - imported once here, forked workers start with it and the model

        count = workers or max(1, min(available_cpus(), MAX_WORKERS))
        shards = [paths[i:i + SHARD] for i in range(0, len(paths), SHARD)]
        with WorkerPool(count) as pool:
            return [item for result in pool.map(job, shards) for item in result]

    def _drop_missing(self, listed: set[str]) -> bool:
        """Forget the logs of this folder that are gone (those of other folders stay: one file serves many);
        ``listed``: logs this scan found there (looked at once already)."""
        prefix = str(self.root) + os.sep
        gone = [name for name in self._cache
                if name.startswith(prefix) and name not in listed and not os.path.exists(name)]
        for name in gone:
            del self._cache[name]
        return bool(gone)

    def _load(self) -> None:
        """The cache file's summaries: a bad entry is left out (said once, and the file rewritten without it);
        a file that is no JSON, or not this version's, is rebuilt."""
        if self._loaded or self.cache_file is None:
            self._loaded = True
            return
        self._loaded = True
        try:
            data = read_private(self.cache_file)
            document = _OBJECT.decode(data) if data is not None else None
        except (OSError, msgspec.DecodeError) as exc:
            if isinstance(exc, msgspec.ValidationError):  # JSON, but no object
                document = {}
            else:
                log.warning("the summary cache %s is unusable (%s): rebuilding it from the session logs",
                            self.cache_file, exc)
                self._dirty = True
                return
        if document is None:
            return
        version = document.get("version")
        if version is None or msgspec.json.decode(version) != self.version:
            log.debug("the summary cache %s is of another version: rebuilding it", self.cache_file)
            self._dirty = True
            return
        try:
            logs = _OBJECT.decode(document["logs"]) if "logs" in document else {}
        except msgspec.ValidationError:
            logs = {"": msgspec.Raw(b"null")}  # not an object: one damaged entry
        self._cache = {path_from_text(name): entry for name, entry in ((n, _entry(e)) for n, e in logs.items())
                       if entry is not None}
        bad = len(logs) - len(self._cache)
        if bad:
            log.warning("the summary cache %s held %d damaged entr%s: left out, their sessions read again",
                        self.cache_file, bad, "y" if bad == 1 else "ies")
            self._dirty = True

    def _save(self) -> None:
        if self.cache_file is None:
            return
        document = {"version": self.version, "logs": {path_text(name): entry for name, entry in self._cache.items()}}
        try:
            private_dir(self.cache_file.parent)
            write_private(self.cache_file, msgspec.json.encode(document))
        except OSError as exc:  # a read-only state folder costs speed, not the listing
            log.debug("cannot save the summary cache %s: %s", self.cache_file, exc)

