"""Basic-auth checks that a flood of wrong passwords cannot use to keep a right one out.

A bcrypt check costs its checker about 50 ms of a core, by design, and a wrong guess costs its
sender microseconds: a checker that takes whoever comes first belongs to the flooder. So the
checks wait in one queue per source, and the one login thread takes them from each source in
turn. A source is a remote address (an IPv6 /64), and on loopback, where every local process is
127.0.0.1, the uid of the process that connected (the kernel's word, ``owner.tcp_peer_uid``).
A source has at most ``per_source`` checks waiting; more are refused at once (503). So a right
password from a source with nothing waiting is checked after at most one check for every other
source with one waiting: a flood from other sources delays it by a few checks, never keeps it out.

A login found right is remembered (a keyed hash of it, never the password) and needs no check
again; so is one found wrong, so that a scraper left with an old password, or a flood that
repeats itself, costs one check, not one a request.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import secrets
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Hashable

from ..base.peers import tcp_peer_uid

PER_SOURCE = 2  # checks one source may have waiting (the one being checked aside)
REMEMBERED = 1024  # logins remembered as right, and as many as wrong


class Busy(Exception):
    """This source already has its share of checks waiting."""


class Logins:
    """Checks ``(user, password)`` with ``check(source, user, password) -> bool``, fairly between sources.

    ``verify(user, password)`` is the blocking bcrypt check; ``run(fn, *args)`` runs it off the loop (one
    thread: the checks of all sources take turns there).
    """

    def __init__(self, verify: Callable[[str, str], bool], run: Callable[..., Awaitable], *,
                 per_source: int = PER_SOURCE) -> None:
        self._verify = verify
        self._run = run
        self.per_source = per_source
        self._key = secrets.token_bytes(32)
        self._right: dict[bytes, None] = {}
        self._wrong: dict[bytes, None] = {}
        self._waiting: dict[Hashable, deque[asyncio.Future]] = {}  # source -> its turns; sources in turn order
        self._checking = False

    async def check(self, source: Hashable, user: str, password: str) -> bool:
        """Whether the login is right; raises Busy when ``source`` already has ``per_source`` checks waiting."""
        key = hmac.new(self._key, f"{user}\0{password}".encode(errors="surrogateescape"), hashlib.sha256).digest()
        if key in self._right:
            return True
        if key in self._wrong:
            return False
        turns = self._waiting.get(source)
        if turns is None:
            turns = self._waiting[source] = deque()
        elif len(turns) >= self.per_source:
            raise Busy(source)
        turn = asyncio.get_running_loop().create_future()
        turns.append(turn)
        self._next()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # its turn came as it was cancelled: pass it on
                self._checking = False
                self._next()
            raise
        # The check runs to its end even if this request is cancelled: the next starts only then.
        job = asyncio.ensure_future(self._run(self._verify, user, password))
        job.add_done_callback(self._checked)
        good = await asyncio.shield(job)
        _remember(self._right if good else self._wrong, key)
        return good

    def _checked(self, job: asyncio.Future) -> None:
        if not job.cancelled():
            job.exception()  # the waiter, if any, reports it
        self._checking = False
        self._next()

    def _next(self) -> None:
        """Give the login thread to the next source in turn, if it is free."""
        while not self._checking and self._waiting:
            source = next(iter(self._waiting))
            turns = self._waiting.pop(source)
            while turns and turns[0].done():  # given up while waiting
                turns.popleft()
            if not turns:
                continue
            turn = turns.popleft()
            if turns:
                self._waiting[source] = turns  # to the back of the round
            self._checking = True
            turn.set_result(None)


def _remember(seen: dict[bytes, None], key: bytes) -> None:
    if len(seen) >= REMEMBERED:
        seen.pop(next(iter(seen)))
    seen[key] = None


def source_of(transport) -> Hashable:
    """Whose turn a request takes: ('uid', n) for a local process, else its address (an IPv6 /64)."""
    if transport is None:
        return "unknown"
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple) or not peer:
        return "local"  # a Unix socket: its peer was checked already
    try:
        address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
    except ValueError:
        return "unknown"
    mapped = getattr(address, "ipv4_mapped", None)
    if address.is_loopback or (mapped is not None and mapped.is_loopback):
        sock = transport.get_extra_info("socket")
        family = sock.family if sock is not None else socket.AF_INET
        uid = tcp_peer_uid(transport.get_extra_info("sockname"), peer, family=family)
        return ("uid", uid) if uid is not None else "loopback"
    if address.version == 6 and mapped is None:
        return ipaddress.ip_network(f"{address}/64", strict=False)
    return mapped or address
