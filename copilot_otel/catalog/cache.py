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
import math
import os
import threading
from pathlib import Path
from collections.abc import Mapping

import msgspec
from msgspec import Struct
from msgspec.structs import asdict, astuple, fields, replace
import orjson

from ..config import DEFAULT_MAX_LINE_BYTES
from ..model.options import ModelOptions
from .history import summarize_log
from ..base.private import private_dir, read_private, write_private
from ..source.sources import UnreadableLog, list_sessions, path_from_text, path_text
from ..model.summary import SessionSummary
from ..source.workspace import NameCache

log = logging.getLogger(__name__)

# A summary with other fields, or made by other rules (2: a name shown by the content capture rule; 4: no name: each
# is read from its workspace.yaml at each scan, never stored here), makes the cached ones unusable: start afresh.
CACHE_VERSION = "4:" + ",".join(SessionSummary.__struct_fields__)
PARALLEL_MIN = 128  # fewer logs to read are read in this process: starting workers costs more
SHARD = 32


class LogSummary(Struct, frozen=True):
    """A session log and its summary (None: the log could not be read; ``error`` says why)."""

    path: Path
    summary: SessionSummary | None
    error: str | None = None


def log_summary(path: Path, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> LogSummary:
    """One whole session log through the model, tallied (malformed lines are skipped quietly), and named."""
    try:
        return LogSummary(path, summarize_log(path, ModelOptions(), max_line_bytes))
    except UnreadableLog as exc:
        return LogSummary(path, None, exc.reason)


class _Shard(Struct, frozen=True):
    """Summarize a list of logs (plain data: a worker process can be handed it)."""

    max_line_bytes: int

    def __call__(self, paths: list[Path]) -> list[LogSummary]:
        return [log_summary(path, max_line_bytes=self.max_line_bytes) for path in paths]


def _key(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


# Each field's annotation as written: 'str', 'str | None', 'int' or 'float'; the others (tuples of records) are
# checked by converting them to their type.
_KINDS = {name: SessionSummary.__annotations__[name] for name in SessionSummary.__struct_fields__}
_RECORDS = {f.name: f.type for f in fields(SessionSummary) if _KINDS[f.name].startswith("tuple")}
_INT64 = 2**63 - 1


def _fits(kind: str, value: object) -> bool:
    if value is None:
        return kind.endswith("| None")
    if kind.startswith("str"):
        return isinstance(value, str)
    if type(value) is int:
        return kind in ("int", "float") and 0 <= value <= _INT64
    return kind == "float" and type(value) is float and 0 <= value < math.inf


def _entry(entry: object) -> tuple[list[int], dict] | None:
    """A cache entry ([identity key, summary as a dict]) as written, or None for anything else."""
    if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and isinstance(entry[1], dict)):
        return None
    key, summary = entry
    if len(key) != 3 or not all(type(x) is int and 0 <= x <= _INT64 for x in key):
        return None
    if summary.keys() != _KINDS.keys() or not all(name in _RECORDS or _fits(_KINDS[name], summary[name])
                                                   for name in _KINDS):
        return None
    try:
        records = {name: msgspec.convert(summary[name], kind) for name, kind in _RECORDS.items()}
    except msgspec.ValidationError:
        return None
    if not all(_fits("int", x) or _fits("float", x) for name in _RECORDS for record in records[name]
               for x in (astuple(record) if isinstance(record, Struct) else record) if not isinstance(x, str)):
        return None
    return key, {**summary, **records}


class Catalog:
    """The summaries of the sessions in one session-state folder, each read again only when its log changed."""

    def __init__(self, root: Path, *, cache_file: Path | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.root = Path(root)
        self.cache_file = cache_file
        self.max_line_bytes = max_line_bytes
        self.version = CACHE_VERSION
        self._cache: dict[str, tuple[list[int], dict]] = {}  # str(path) -> (identity key, summary as a dict)
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
                    found.append(LogSummary(path, self._named(path, SessionSummary(**cached[1]))))
                else:
                    stale.append((path, key))
            fresh = self._read([path for path, _key_ in stale], workers)
            changed = False
            for (path, key), item in zip(stale, fresh):
                if item.summary is not None:
                    # The name is the session's text (its first prompt): never stored, read at each scan.
                    self._cache[str(path)] = (key, asdict(replace(item.summary, name=None)))
                    item = LogSummary(path, self._named(path, item.summary))
                    changed = True
                found.append(item)
            changed |= self._drop_missing()
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

        count = workers or max(1, min(available_cpus(), MAX_WORKERS))
        shards = [paths[i:i + SHARD] for i in range(0, len(paths), SHARD)]
        with WorkerPool(count) as pool:
            return [item for result in pool.map(job, shards) for item in result]

    def _drop_missing(self) -> bool:
        """Forget the logs of this folder that are gone (those of other folders stay: one file serves many)."""
        prefix = str(self.root) + os.sep
        gone = [name for name in self._cache if name.startswith(prefix) and not os.path.exists(name)]
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
            document = orjson.loads(data) if data is not None else {"version": self.version, "logs": {}}
        except (OSError, ValueError) as exc:
            log.warning("the summary cache %s is unusable (%s): rebuilding it from the session logs", self.cache_file,
                        exc)
            self._dirty = True
            return
        if not isinstance(document, dict) or document.get("version") != self.version:
            log.debug("the summary cache %s is of another version: rebuilding it", self.cache_file)
            self._dirty = True
            return
        logs = document.get("logs")
        entries = logs.items() if isinstance(logs, dict) else ()
        self._cache = {path_from_text(name): entry for name, entry in ((n, _entry(e)) for n, e in entries)
                       if entry is not None}
        bad = (len(logs) if isinstance(logs, dict) else 1) - len(self._cache)
        if bad:
            log.warning("the summary cache %s held %d damaged entr%s: left out, their sessions read again",
                        self.cache_file, bad, "y" if bad == 1 else "ies")
            self._dirty = True

    def _save(self) -> None:
        if self.cache_file is None:
            return
        document = {"version": self.version, "logs": {path_text(name): msgspec.to_builtins(list(entry))
                                                       for name, entry in self._cache.items()}}
        try:
            private_dir(self.cache_file.parent)
            write_private(self.cache_file, orjson.dumps(document))
        except OSError as exc:  # a read-only state folder costs speed, not the listing
            log.debug("cannot save the summary cache %s: %s", self.cache_file, exc)

