"""What knowing a log by its content costs: the CRC-32 the tailer continues over what it reads, and the
pass over the prefix when a log's file changes (a copy moved over it) or a position is restored.

A real CLI log (tests/fixtures/cli/1.0.102/subagent) grown to SIZE_MB megabytes (tests/support/biglog)
is read whole by FileTail as the daemon reads it (4 MiB per read, the model's event types decoded,
the rest skimmed), once as it is and once with the tail's crc32 replaced by a function that does nothing:
the difference is the CRC's share. Then the file is copied over itself and read again (the check of
the prefix: one CRC pass over it), and a position restored from a checkpoint is opened (the same pass).
Prints figures; asserts nothing.

    .venv/bin/python bench/identity_bench.py [SIZE_MB]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from copilot_otel.model.sessions import READ_TYPES
from copilot_otel.source import identity
from copilot_otel.source import tail as tail_module
from copilot_otel.source.tail import FileTail
from tests.support.biglog import grow

SOURCE = next(Path(__file__).resolve().parent.parent.joinpath(
    "tests/fixtures/cli/1.0.102/subagent/session-state").glob("*/events.jsonl"))


def read_whole(path: Path) -> tuple[float, FileTail]:
    tail = FileTail(path, keep=READ_TYPES)
    started = time.perf_counter()
    while tail.read(max_bytes=4 << 20).more:
        pass
    return time.perf_counter() - started, tail


def best(runs: int, action) -> float:
    return min(action() for _ in range(runs))


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    folder = Path(tempfile.mkdtemp(prefix="identity-bench-"))
    try:
        path = folder / "events.jsonl"
        path.write_bytes(grow(SOURCE.read_bytes(), size_mb << 20))
        size = path.stat().st_size
        read_whole(path)  # into the page cache
        real = tail_module.crc32
        with_crc, without = [], []
        for _ in range(5):  # alternated, the best of each: the machine is shared
            with_crc.append(read_whole(path)[0])
            tail_module.crc32 = lambda data, value=0: value
            try:
                without.append(read_whole(path)[0])
            finally:
                tail_module.crc32 = real
        with_crc, without = min(with_crc), min(without)
        _, tail = read_whole(path)

        def copied() -> float:
            shutil.copyfile(path, folder / "copy")
            os.replace(folder / "copy", path)
            started = time.perf_counter()
            result = tail.read()
            assert result.copied and not result.items
            return time.perf_counter() - started

        check = best(3, copied)

        def restored() -> float:
            again = FileTail(path, keep=READ_TYPES)
            again.resume(tail.offset, tail.line, tail.identity, end=tail.offset, crc=tail.crc)
            started = time.perf_counter()
            assert not again.read().items
            return time.perf_counter() - started

        restart = best(3, restored)
        with open(path, "rb") as handle:
            started = time.perf_counter()
            identity.prefix_crc(handle, size)
            crc_pass = time.perf_counter() - started
        mb = size / (1 << 20)
        print(f"log: {mb:.0f} MiB, {tail.line:,} lines (real CLI log, grown)")
        print(f"read whole, with the CRC:     {with_crc:.3f} s ({mb / with_crc:,.0f} MiB/s)")
        print(f"read whole, CRC a no-op:      {without:.3f} s ({mb / without:,.0f} MiB/s)")
        print(f"the CRC's share of a read:    {100 * (with_crc - without) / with_crc:.1f} % "
              f"(the same bytes' CRC alone: {100 * crc_pass / with_crc:.1f} %)")
        print(f"a copy moved over it, checked: {check:.3f} s (one CRC pass over {mb:.0f} MiB)")
        print(f"a restored position, checked:  {restart:.3f} s")
        print(f"prefix_crc alone:              {crc_pass:.3f} s ({mb / crc_pass:,.0f} MiB/s)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
