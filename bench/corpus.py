"""Synthesize a large COPILOT_HOME from a few real Copilot CLI session logs.

Each synthetic session is a copy of one real ``events.jsonl`` in which the session id
and every other uuid (event ids, parent ids, interaction ids, message ids, agent ids)
are rewritten consistently to fresh ones, and tool call ids get a per-copy suffix, so
no two copies share a trace or span id. Event shapes, sizes and timestamps stay those
the real CLI wrote.

    python bench/corpus.py /tmp/big-home --sessions 3000
    python bench/corpus.py /tmp/idle-home --idle-folders 10000

``--idle-folders N`` makes N folders each holding a *small finished* session (the
smallest real session that ends with ``session.shutdown``, with its 22 kB
``system.message`` prompt lines left out): the load of a machine where thousands of
old sessions sit untouched.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_SOURCE

EVENTS_FILE = "events.jsonl"
SESSION_STATE = "session-state"
# A uuid anywhere, or a whole JSON string value that is a tool call id ("call_...").
_TOKEN = re.compile(rb'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"call_[A-Za-z0-9_.-]+"')


@dataclass
class Template:
    """A real session log cut into literal pieces and the ids between them."""

    source: Path
    session_id: bytes
    pieces: list[bytes]  # literal, token, literal, token, ..., literal
    lines: int
    size: int

    @classmethod
    def load(cls, path: Path, *, drop_types: tuple[str, ...] = ()) -> Template:
        raw = path.read_bytes()
        if drop_types:
            kept = [line for line in raw.splitlines(keepends=True)
                    if not any(f'"type":"{t}"'.encode() in line[:80] for t in drop_types)]
            raw = b"".join(kept)
        pieces: list[bytes] = []
        last = 0
        for match in _TOKEN.finditer(raw):
            pieces.append(raw[last:match.start()])
            pieces.append(match.group())
            last = match.end()
        pieces.append(raw[last:])
        return cls(path, path.parent.name.encode(), pieces, raw.count(b"\n"), len(raw))

    def render(self, rng: random.Random, copy_tag: str) -> tuple[str, bytes]:
        """A copy with fresh ids: (new session id, file bytes)."""
        mapping: dict[bytes, bytes] = {}
        out = []
        suffix = f"_{copy_tag}".encode()
        for index, piece in enumerate(self.pieces):
            if index % 2 == 0:
                out.append(piece)
                continue
            new = mapping.get(piece)
            if new is None:
                if piece.startswith(b'"'):
                    new = piece[:-1] + suffix + b'"'
                else:
                    new = str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()
                mapping[piece] = new
            out.append(new)
        session = mapping.get(self.session_id)
        if session is None:  # a log that never names its own id: still give the folder a fresh one
            session = str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode()
        return session.decode(), b"".join(out)


def generate_source(dest: Path) -> Path:
    """Run every test scenario once with the real Copilot CLI (tests/cli) offline; return the home."""
    from tests.support.copilot_cli import CopilotCLI, generate_corpus
    from tests.support.provider import ScriptedProvider

    print(f"{dest}: no real sessions yet; running the Copilot CLI scenarios once (about a minute)...",
          file=sys.stderr)
    with ScriptedProvider() as provider:
        corpus = generate_corpus(CopilotCLI(), provider.port, dest.parent)
    return corpus.home_all


def source_logs(source: Path) -> list[Path]:
    """The real events.jsonl files under a COPILOT_HOME, its session-state/, or a folder of sessions.

    The default source is made on first use, by the real CLI, as the tests make theirs.
    """
    if source == DEFAULT_SOURCE and not source.exists():
        source = generate_source(source)
    root = source / SESSION_STATE if (source / SESSION_STATE).is_dir() else source
    files = sorted(p for p in root.glob(f"*/{EVENTS_FILE}") if p.is_file() and p.stat().st_size)
    if not files:
        raise SystemExit(f"{source}: no */{EVENTS_FILE} found; generate the corpus first "
                         "(tests/support/copilot_cli.py generate_corpus)")
    return files


def _write(state: Path, session_id: str, data: bytes) -> None:
    folder = state / session_id
    folder.mkdir(mode=0o700)
    path = folder / EVENTS_FILE
    with open(path, "wb") as handle:
        handle.write(data)
    path.chmod(0o600)


def synthesize(dest: Path, sessions: int, *, source: Path = DEFAULT_SOURCE, seed: int = 1) -> dict:
    """Write ``sessions`` rewritten copies of the real logs (round robin) into dest/session-state."""
    templates = [Template.load(p) for p in source_logs(source)]
    state = Path(dest) / SESSION_STATE
    state.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    lines = size = 0
    for i in range(sessions):
        template = templates[i % len(templates)]
        session_id, data = template.render(rng, f"s{seed}c{i}")
        _write(state, session_id, data)
        lines += template.lines
        size += len(data)
    return {"sessions": sessions, "lines": lines, "bytes": size, "templates": len(templates)}


def idle_template(source: Path = DEFAULT_SOURCE) -> Template:
    """The smallest real finished session, without its long system prompt lines."""
    candidates = []
    for path in source_logs(source):
        template = Template.load(path, drop_types=("system.message",))
        text = b"".join(template.pieces)
        last = text.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        if b'"type":"session.shutdown"' in last[:80] and b'"type":"session.error"' not in text:
            candidates.append(template)
    if not candidates:
        raise SystemExit(f"{source}: no finished session (ending with session.shutdown) to use as idle folder")
    return min(candidates, key=lambda t: t.size)


def make_idle(dest: Path, folders: int, *, source: Path = DEFAULT_SOURCE, seed: int = 2) -> dict:
    """Write ``folders`` small finished sessions into dest/session-state."""
    template = idle_template(source)
    state = Path(dest) / SESSION_STATE
    state.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    size = 0
    for i in range(folders):
        session_id, data = template.render(rng, f"i{seed}c{i}")
        _write(state, session_id, data)
        size += len(data)
    return {"sessions": folders, "lines": template.lines * folders, "bytes": size, "templates": 1,
            "template": str(template.source)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dest", type=Path, help="COPILOT_HOME-like folder to create (session-state/ inside)")
    parser.add_argument("--sessions", type=int, default=None,
                        help="rewritten copies of the real sessions (default 3000, or 0 with --idle-folders)")
    parser.add_argument("--idle-folders", type=int, default=0, metavar="N",
                        help="also create N folders each holding a small finished session")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help=f"COPILOT_HOME holding the real sessions (default {DEFAULT_SOURCE})")
    parser.add_argument("--seed", type=int, default=1, help="seed of the id generator (default 1)")
    args = parser.parse_args(argv)
    sessions = args.sessions if args.sessions is not None else (0 if args.idle_folders else 3000)
    if (args.dest / SESSION_STATE).exists() and any((args.dest / SESSION_STATE).iterdir()):
        parser.error(f"{args.dest / SESSION_STATE} is not empty")
    started = time.perf_counter()
    if sessions:
        made = synthesize(args.dest, sessions, source=args.source, seed=args.seed)
        print(f"{made['sessions']} sessions from {made['templates']} real logs: {made['lines']} lines, "
              f"{made['bytes'] / 1e6:.1f} MB")
    if args.idle_folders:
        made = make_idle(args.dest, args.idle_folders, source=args.source, seed=args.seed + 1)
        print(f"{made['sessions']} idle folders (from {made['template']}): {made['lines']} lines, "
              f"{made['bytes'] / 1e6:.1f} MB")
    print(f"written to {args.dest / SESSION_STATE} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
