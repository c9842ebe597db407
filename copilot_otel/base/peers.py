"""Who is at the other end: the daemon's Unix socket in the state folder, its peer's uid, a TCP port's holder,
a loopback TCP peer's uid.

The commands talk to their user's daemon through ``daemon.sock`` in the state folder (0700):
the daemon admits a connection only when the kernel says (SO_PEERCRED) its peer runs as the
daemon's own uid, and a command trusts the socket only when the file and the process behind it
are its own uid. A TCP port proves nothing of the kind: anyone may listen on 127.0.0.1:9464
first. Socket paths are bound and reached through ``/proc/self/fd/N/`` of the folder, so a
state folder deeper than the 108 bytes a socket address holds works too.
"""

from __future__ import annotations

import errno
import os
import pwd
import socket
import stat
import struct
from pathlib import Path

from .private_files import PRIVATE_FILE

SOCKET_NAME = "daemon.sock"
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class NotOurs(OSError):
    """The socket is missing, dead, or not this user's daemon; the message says which.

    ``absent``: no daemon is there at all (no socket, or nobody answers on it), rather than a stranger.
    """

    def __init__(self, message: str, *, absent: bool = False) -> None:
        super().__init__(message)
        self.absent = absent


def peer_uid(sock) -> int:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    _pid, uid, _gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid


def bind_socket(path: Path) -> tuple[socket.socket, int]:
    """A listening Unix socket at ``path``, 0600, replacing a stale one, and its file's inode. Raises OSError.

    Call it only while holding the state folder's lock (one daemon per folder): the file it
    replaces is a dead daemon's.
    """
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            if stat.S_ISSOCK(os.lstat(path.name, dir_fd=folder).st_mode):
                os.unlink(path.name, dir_fd=folder)
        except FileNotFoundError:
            pass
        sock.bind(f"/proc/self/fd/{folder}/{path.name}")
        os.chmod(path.name, PRIVATE_FILE, dir_fd=folder)  # bind() went through the umask
        inode = os.lstat(path.name, dir_fd=folder).st_ino
        sock.listen(64)
        sock.setblocking(False)
        return sock, inode
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(folder)


def remove_socket(path: Path, inode: int) -> None:
    """Remove ``path`` if it is still the socket file bound as ``inode`` (a new daemon's is left alone)."""
    try:
        if os.lstat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass


def connect_own(path: Path, timeout: float) -> socket.socket:
    """A connection to the daemon at ``path``, if both the file and its server are this user's; else NotOurs."""
    me = os.getuid()
    try:
        folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    except OSError as exc:
        raise NotOurs(f"no daemon socket ({path.parent}: {exc.strerror})", absent=True) from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            info = os.lstat(path.name, dir_fd=folder)
        except FileNotFoundError:
            raise NotOurs(f"no daemon socket at {path}", absent=True) from None
        if not stat.S_ISSOCK(info.st_mode):
            raise NotOurs(f"{path} is not a socket")
        if info.st_uid != me:
            raise NotOurs(f"{path} belongs to {describe_uid(info.st_uid)}, not to you")
        sock.settimeout(timeout)
        try:
            sock.connect(f"/proc/self/fd/{folder}/{path.name}")
        except OSError as exc:
            if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                raise NotOurs(f"no daemon answers at {path} (it is not running)", absent=True) from None
            raise NotOurs(f"cannot reach the daemon at {path} ({exc.strerror or exc})") from None
        theirs = peer_uid(sock)
        if theirs != me:
            raise NotOurs(f"the daemon at {path} runs as {describe_uid(theirs)}, not as you")
        return sock
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(folder)


def listener_uid(port: int, *, proc: Path = Path("/proc/net")) -> int | None:
    """The uid of the TCP socket listening on ``port`` on this machine (its network namespace), or None."""
    for name in ("tcp", "tcp6"):
        try:
            rows = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 7 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return int(fields[7])
    return None


def describe_uid(uid: int) -> str:
    """'uid 65534 (nobody)', or 'uid 1234' for a uid without a name."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def port_holder(port: int) -> str | None:
    """Who listens on ``port``, in words ('uid 65534 (nobody)', 'another process of yours'), or None if unknown."""
    uid = listener_uid(port)
    if uid is None:
        return None
    return "another process of yours" if uid == os.getuid() else describe_uid(uid)


# sock_diag (netlink): the kernel's own table of sockets, asked for one connection by its addresses.
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NOCOOKIE = 0xFFFFFFFF
_DIAG_UID_AT = 16 + 4 + 48 + 12  # nlmsghdr, then inet_diag_msg: 4 bytes, the socket id, 3 u32s, then uid


def tcp_peer_uid(local: tuple, remote: tuple, *, family: int = socket.AF_INET) -> int | None:
    """The uid of the process that owns the other end of a TCP connection on this machine (``local`` and
    ``remote`` as our socket names them: the peer's socket has them the other way round), or None when the
    kernel does not say (not a local peer, no netlink, another network namespace)."""
    try:
        peer_ip = socket.inet_pton(family, remote[0].split("%", 1)[0])
        our_ip = socket.inet_pton(family, local[0].split("%", 1)[0])
        sockid = struct.pack("!HH", remote[1], local[1]) + peer_ip.ljust(16, b"\0") + our_ip.ljust(16, b"\0")
    except (OSError, ValueError, IndexError, TypeError, struct.error):
        return None
    request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid \
        + struct.pack("=III", 0, _NOCOOKIE, _NOCOOKIE)
    message = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, 1, 1, 0) + request  # NLM_F_REQUEST
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(0.5)
            diag.send(message)
            answer = diag.recv(4096)
    except (OSError, AttributeError):
        return None
    if len(answer) < _DIAG_UID_AT + 4 or struct.unpack_from("=H", answer, 4)[0] == _NLMSG_ERROR:
        return None
    return struct.unpack_from("=I", answer, _DIAG_UID_AT)[0]
