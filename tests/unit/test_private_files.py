"""private.py, strictmodes.py and rotation.py: what copilot-otel creates is 0700/0600 whatever the umask; it
writes only in folders no other user could change and only to regular files of its own; the trace file
rotates by size in the Collector file exporter's style, deleting only the backups it wrote."""

from __future__ import annotations

import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path

import pytest

from copilot_otel.base.private_files import open_private, private_dir, touch_private, write_private
from copilot_otel.base.strictmodes import UnsafePath, check_folder
from copilot_otel.delivery.rotation import RotatingFile, Rotation, backup_name, backups_of, manifest_of


@contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277])
def test_created_folders_and_files_are_private_whatever_the_umask(tmp_path, mask):
    """Folders made (parents included) are 0700 and files 0600, under a lax, the usual and a strange umask."""
    with umask(mask):
        folder = private_dir(tmp_path / "a" / "b")
        os.close(open_private(folder / "f"))
        touch_private(folder / "g")
        write_private(folder / "h", b"data")
    assert [mode(p) for p in (tmp_path / "a", folder)] == [0o700, 0o700]
    assert [mode(folder / name) for name in ("f", "g", "h")] == [0o600, 0o600, 0o600]
    assert (folder / "h").read_bytes() == b"data"


def test_what_exists_keeps_its_mode(tmp_path):
    """An existing folder or file is the user's: it is used as it is."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    existing = shared / "traces.jsonl"
    existing.write_bytes(b"")
    os.chmod(existing, 0o644)
    private_dir(shared)
    os.close(open_private(existing))
    assert (mode(shared), mode(existing)) == (0o755, 0o644)


def test_write_private_replaces_whole(tmp_path):
    """The new content replaces the old in one rename; no temporary file is left."""
    target = tmp_path / "cache.json"
    write_private(target, b"old")
    write_private(target, b"new")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["cache.json"]


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.5
        return self.now


def test_backup_names_are_the_collectors():
    """traces.jsonl rotates to traces-2026-12-03T13-04-53.123.jsonl (UTC, milliseconds), as lumberjack names them."""
    from pathlib import Path

    assert backup_name(Path("/s/traces.jsonl"), 1796303093.123).name == "traces-2026-12-03T13-04-53.123.jsonl"


def test_a_file_rotates_before_a_record_would_take_it_past_the_limit(tmp_path):
    """Whole records only: the file is renamed when the next record would not fit, records never split,
    the newest backups are kept, and each file is 0600."""
    target = tmp_path / "traces.jsonl"
    record = b"x" * 39 + b"\n"  # 40 bytes
    with umask(0o022):
        sink = RotatingFile(target, Rotation(max_bytes=100, backups=2), clock=Clock(1796303093.0))
        for _ in range(10):
            sink.write(record)
        sink.close()
    backups = backups_of(target)
    assert len(backups) == 2  # 10 records of 40 bytes: 2 per file, 5 files, the oldest 2 dropped
    assert [p.stat().st_size for p in [*backups, target]] == [80, 80, 80]
    assert all(mode(p) == 0o600 for p in [*backups, target])
    assert [p.name for p in backups] == sorted(p.name for p in backups)


def test_one_write_of_many_records_rotates_between_them(tmp_path):
    """A write of many records (the daemon's batch) is spread over files at record boundaries, each file within
    the limit, as the same records written one by one would be."""
    record = b"x" * 39 + b"\n"  # 40 bytes
    one_by_one, at_once = tmp_path / "a" / "traces.jsonl", tmp_path / "b" / "traces.jsonl"
    for target in (one_by_one, at_once):
        target.parent.mkdir()
    sink = RotatingFile(one_by_one, Rotation(max_bytes=100, backups=10), clock=Clock(1796303093.0))
    for _ in range(11):
        sink.write(record)
    sink.close()
    sink = RotatingFile(at_once, Rotation(max_bytes=100, backups=10), clock=Clock(1796303093.0))
    sink.write(record)
    sink.write(record * 10)
    sink.close()
    files = [*backups_of(at_once), at_once]
    assert [p.stat().st_size for p in files] == [80] * 5 + [40]
    assert [p.read_bytes() for p in files] == [p.read_bytes() for p in [*backups_of(one_by_one), one_by_one]]


def test_a_record_larger_than_the_limit_is_written_whole(tmp_path):
    """A record longer than max_bytes gets a file of its own rather than being cut."""
    target = tmp_path / "traces.jsonl"
    sink = RotatingFile(target, Rotation(max_bytes=10, backups=5), clock=Clock(1796303093.0))
    sink.write(b"short\n")
    sink.write(b"a much longer record\n")
    sink.close()
    assert target.read_bytes() == b"a much longer record\n"
    assert [p.read_bytes() for p in backups_of(target)] == [b"short\n"]


def test_no_limit_never_rotates(tmp_path):
    """max_bytes 0: one file, appended to."""
    target = tmp_path / "traces.jsonl"
    sink = RotatingFile(target, Rotation())
    for _ in range(100):
        sink.write(b"0123456789\n")
    sink.close()
    assert target.stat().st_size == 1100 and backups_of(target) == []


def test_appending_to_an_existing_file_counts_its_size(tmp_path):
    """A restart appends to the current file, and rotates it as if it had never stopped."""
    target = tmp_path / "traces.jsonl"
    target.write_bytes(b"y" * 89 + b"\n")
    sink = RotatingFile(target, Rotation(max_bytes=100, backups=1), clock=Clock(1796303093.0))
    sink.write(b"z" * 19 + b"\n")
    sink.close()
    assert [p.read_bytes() for p in backups_of(target)] == [b"y" * 89 + b"\n"]
    assert target.read_bytes() == b"z" * 19 + b"\n"


# ---------------------------------------------------------------- issue 21: shared folders, planted files

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another user: needs root")


def folder(path: Path, mode: int, *, uid: int | None = None, gid: int | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    if uid is not None or gid is not None:
        os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)
    return path


@needs_root
@pytest.mark.parametrize("mode,group,own,refused", [
    (0o700, None, True, None),
    (0o755, None, True, None),
    (0o777, None, False, "may be written by other users (mode 0777; chmod go-w it, or set its sticky bit)"),
    (0o1777, None, False, None),  # /tmp: others add names, cannot take ours
    (0o1777, None, True, "may be written by other users (mode 1777; chmod go-w it)"),  # but not our own folder
    (0o770, 0, True, None),  # group write by our private group (root's: no other member)
    (0o770, NOBODY, True, "may be written by other users (mode 0770"),
])
def test_a_folder_is_judged_by_its_owner_and_who_may_write_it(tmp_path, mode, group, own, refused):
    """StrictModes, as ssh: ours (or root's, above our own), writable by no one else unless sticky; a group
    of our own counts as us."""
    path = folder(tmp_path / "f", mode, gid=group)
    if refused is None:
        check_folder(path, own=own)
    else:
        with pytest.raises(UnsafePath, match=re.escape(refused)):
            check_folder(path, own=own)


@needs_root
def test_every_folder_above_is_checked_and_links_are_followed_and_checked(tmp_path):
    """A folder of ours under one others may write (not sticky) or own is refused; a link in the path must
    be ours and its target is checked in turn; parts not made yet and a sticky parent are fine."""
    good = folder(tmp_path / "good", 0o700)
    check_folder(good / "not" / "made" / "yet", own=True)
    check_folder(folder(tmp_path / "sticky", 0o1777) / "mine", own=False)
    shared = folder(tmp_path / "shared", 0o777)
    with pytest.raises(UnsafePath, match=f"{shared} may be written by other users"):
        check_folder(folder(shared / "mine", 0o700), own=True)
    theirs = folder(tmp_path / "theirs", 0o755, uid=NOBODY)
    with pytest.raises(UnsafePath, match=f"{theirs} belongs to user nobody"):
        check_folder(folder(theirs / "mine", 0o700), own=True)
    (tmp_path / "our-link").symlink_to(good)
    check_folder(tmp_path / "our-link", own=True)
    (tmp_path / "link-to-shared").symlink_to(shared / "mine")
    with pytest.raises(UnsafePath, match=f"{shared} may be written"):
        check_folder(tmp_path / "link-to-shared", own=True)
    (tmp_path / "their-link").symlink_to(good)
    os.lchown(tmp_path / "their-link", NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match="is a link that belongs to user nobody"):
        check_folder(tmp_path / "their-link" / "state", own=True)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        check_folder(tmp_path / "file" / "state", own=True)


@needs_root
def test_an_existing_file_is_used_only_if_it_is_a_regular_file_of_ours_alone(tmp_path):
    """open_private opens no link, no FIFO (without blocking), no file of another user's, no file with
    another name elsewhere (a hard link), no file others may write; each refusal says which."""
    mine = tmp_path / "mine"
    mine.write_bytes(b"mine\n")
    cases = {}
    cases["link"] = tmp_path / "link"
    cases["link"].symlink_to(mine)
    cases["dangling link"] = tmp_path / "dangling"
    cases["dangling link"].symlink_to(tmp_path / "nowhere")
    cases["fifo"] = tmp_path / "fifo"
    os.mkfifo(cases["fifo"])
    cases["theirs"] = tmp_path / "theirs"
    cases["theirs"].write_bytes(b"")
    os.chown(cases["theirs"], NOBODY, NOBODY)
    cases["hard link"] = tmp_path / "hard"
    os.link(mine, cases["hard link"])
    cases["writable"] = tmp_path / "writable"
    cases["writable"].write_bytes(b"")
    os.chmod(cases["writable"], 0o666)
    said = {"link": "is a symbolic link", "dangling link": "is a symbolic link", "fifo": "is not a regular file",
            "theirs": "belongs to user nobody, not to you", "hard link": "has 1 other hard link",
            "writable": "may be written by other users (mode 0666"}
    for name, path in cases.items():
        with pytest.raises(UnsafePath, match=re.escape(said[name])):
            os.close(open_private(path, os.O_RDWR | os.O_APPEND))
    assert not (tmp_path / "nowhere").exists() and mine.read_bytes() == b"mine\n"


def test_rotation_deletes_only_the_backups_it_wrote(tmp_path):
    """Files named as backups (even newer-looking, even ours) that rotation did not write are never counted
    nor deleted; a backup replaced by another file is not deleted either; only the written ones go."""
    target = tmp_path / "traces.jsonl"
    sink = RotatingFile(target, Rotation(max_bytes=10, backups=2), clock=Clock(1796303093.0))
    planted = [tmp_path / f"traces-2999-01-01T00-00-0{n}.000.jsonl" for n in range(5)]
    for path in planted:
        path.write_bytes(b"")
    for n in range(4):
        sink.write(b"record %d\n" % n)
    replaced = backups_of(target)[0]
    replaced.unlink()
    replaced.write_bytes(b"not the backup it was\n")
    for n in range(4, 8):
        sink.write(b"record %d\n" % n)
    sink.close()
    assert [p.read_bytes() for p in backups_of(target)] == [b"record 5\n", b"record 6\n"]
    assert all(p.exists() for p in planted) and replaced.read_bytes() == b"not the backup it was\n"


def test_a_damaged_backup_record_deletes_nothing(tmp_path, caplog):
    """The record of backups is not JSON: said, nothing deleted, and it is written afresh."""
    target = tmp_path / "traces.jsonl"
    sink = RotatingFile(target, Rotation(max_bytes=10, backups=1), clock=Clock(1796303093.0))
    for n in range(3):
        sink.write(b"record %d\n" % n)
    manifest_of(target).write_bytes(b"{not json")
    sink.write(b"record 3\n")
    sink.close()
    assert "cannot read the backups recorded" in caplog.text
    assert len(list(tmp_path.glob("traces-*.jsonl"))) == 2 and len(backups_of(target)) == 1
