"""Folders another user could change are refused, as ssh's StrictModes refuses them: copilot-otel's state
folder, and the folder its trace file is written in.

A folder is safe when it and every folder above it belong to us or to root, and no other user may
write in it unless its sticky bit is set (as /tmp's: there others may add names, but not take ours
away or replace them). The whole path is walked, as ssh walks it, links followed and each checked: a
folder of ours under one others may write in can be renamed away and replaced by theirs, so checking
the last folder alone would prove nothing. The state folder itself must be ours and writable by no
one else, sticky or not: others could plant in it the names copilot-otel uses. Group write counts as
ours when the group is private (our primary group, no other member), as Debian's ssh allows it.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from functools import lru_cache
from pathlib import Path

from .parsing import ConfigError

MAX_LINKS = 40  # as the kernel's limit on links followed in one path


class UnsafePath(OSError):
    """A folder or file another user could change, or a link where a file should be: the message says which."""


def owner_name(uid: int) -> str:
    """'user alice', or 'uid 1234' for a uid without a name."""
    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"uid {uid}"


@lru_cache(maxsize=16)
def _private_group(gid: int) -> bool:
    """A group only we are in: our primary group, listing no other member."""
    if gid != os.getegid():
        return False
    try:
        members = grp.getgrgid(gid).gr_mem
        me = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return False
    return all(member == me for member in members)


def writable_by_others(st: os.stat_result) -> bool:
    """Whether a user other than its owner (or root) may write it: others' write, or a shared group's."""
    return bool(st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid)))


def _check(path: str, st: os.stat_result, *, own: bool) -> None:
    if st.st_uid != os.geteuid() and (own or st.st_uid != 0):
        mine = "yours" if own else "yours or root's"
        raise UnsafePath(f"{path} belongs to {owner_name(st.st_uid)}, not {mine}")
    if writable_by_others(st) and (own or not st.st_mode & stat.S_ISVTX):
        hint = "chmod go-w it" if own else "chmod go-w it, or set its sticky bit"
        raise UnsafePath(f"{path} may be written by other users (mode {stat.S_IMODE(st.st_mode):04o}; {hint})")


def check_folder(path: Path, *, own: bool = False) -> None:
    """Raise UnsafePath if ``path``, or a folder above it, is one another user could change (the rules
    above); ``own``: it is copilot-otel's own folder (the state folder). Its parts not made yet are not
    checked: they will be made 0700 by us, in a folder that was. A part that is no folder: NotADirectoryError."""
    pending = [part for part in os.path.join(os.getcwd(), path).split(os.sep) if part and part != "."]
    current = os.sep
    _check(current, os.stat(current), own=own and not pending)
    links = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (os.geteuid(), 0):
                raise UnsafePath(f"{candidate} is a link that belongs to {owner_name(st.st_uid)}")
            links += 1
            if links > MAX_LINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
            target = os.readlink(candidate)
            current = os.sep if target.startswith(os.sep) else current
            pending[:0] = [part for part in target.split(os.sep) if part and part != "."]
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), candidate)
        _check(candidate, st, own=own and not pending)
        current = candidate


def state_refusal(state_dir: Path, exc: UnsafePath) -> str:
    """The one line that refuses a state folder."""
    return (f"refusing the state directory {state_dir}: {exc}; fix that, or choose another with --state-dir or "
            "COPILOT_OTEL_STATE_DIR")


def check_state_dir(state_dir: Path, *, strict: bool = True) -> None:
    """Before a command writes in it: a state folder another user could change is a ConfigError (unless not
    ``strict``); one that cannot be made is the concern of what writes there (a replay goes on without its
    ledger)."""
    if not strict:
        return
    try:
        check_folder(state_dir, own=True)
    except UnsafePath as exc:
        raise ConfigError(state_refusal(state_dir, exc)) from None
    except OSError:
        pass


def check_output_file(flag: str, path: Path, *, strict: bool = True) -> None:
    """A file a command writes at its end (``--metrics-file``) must be writable now, in a folder no other user
    could change, and not be a link or another user's file: else a ConfigError, before the work."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give the path of a file")
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write in {folder}")
    try:
        if strict:
            check_folder(folder)  # a sticky folder is fine: the file is replaced by one of ours
    except UnsafePath as exc:
        raise ConfigError(f"{flag} {path}: refused: {exc}") from None
    if path.is_symlink():
        raise ConfigError(f"{flag} {path}: refused: it is a symbolic link; give the real path")
    if path.exists() and path.stat().st_uid != os.geteuid():
        raise ConfigError(f"{flag} {path}: refused: it belongs to {owner_name(path.stat().st_uid)}, not to you")
