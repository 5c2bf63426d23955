"""How a socket is secured: ``ipc://`` as it is, ``tcp://`` with CURVE.

An ipc socket is a file in a 0700 directory: the kernel already keeps strangers out. A
tcp port is open to the network, so every tcp endpoint the broker binds is a CURVE
server (encrypted, and only keys in the allowed folder get in: ``KeyGate``, asked through
ZeroMQ's ZAP for each new connection), and every client or worker that connects over tcp
names the daemon's public key and signs in with its own key pair (``keys.py``).

Plain tcp exists for tests alone: the broker binds it only when asked (``daemon
--insecure`` or ``[broker] insecure``) *and* the address is loopback. A client given no
server key for a loopback endpoint connects in plain, to such a daemon; for any other
address it refuses to start without a key.

The daemon's own actors (embedders, the dreamer, the MCP host, local palace workers)
connect with the daemon's key pair, which the gate always lets in: they run in the same
home and need no entry in the allowed folder.

A port open to the network is also open to floods, so the daemon's tcp side defends
itself (``TcpDefences``, set up with the authenticator): refusals are logged at a bounded
rate (``RefusalLog``: a flood of unknown keys costs a few lines a minute, not gigabytes a
day); a ``ConnectionGuard`` thread caps the connections it holds per peer address and in
all, so half-open handshakes cannot take the file descriptors that palaces, workers and
the local clients need (and stalled handshakes are dropped after ``HANDSHAKE_IVL_MS``);
and ``receive`` refuses messages on an open connection whose key was revoked after it
connected (ZAP only judges new ones).
"""

from __future__ import annotations

import ipaddress
import queue
import resource
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import zmq

from trusty_memory.common import keys
from trusty_memory.common import protocol as p
from trusty_memory.common.config import Config

ZAP_DOMAIN = b"trusty-memory"
# ZMTP heartbeats on tcp connections: a peer whose network went away (no FIN, no RST)
# is dropped after HEARTBEAT_TIMEOUT_MS, and the connecting side dials again by itself.
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 5000
RECONNECT_IVL_MAX_MS = 2000
# A connection that has not finished its handshake by then is dropped (ZeroMQ's default,
# 30 s, let a flood of half-open connections hold descriptors for half a minute each).
HANDSHAKE_IVL_MS = 5000
# The largest message a tcp peer may send (a bulk import batch is tens of MB); ZeroMQ
# drops the connection of one that announces more, before allocating it.
MAX_TCP_MESSAGE_BYTES = 512 * 1024 * 1024
# Kernel keepalives under the heartbeats: a NAT or firewall keeps an idle link's mapping.
TCP_KEEPALIVE_IDLE_S = 60
TCP_KEEPALIVE_INTVL_S = 10
TCP_KEEPALIVE_CNT = 3
# Connections the daemon holds from one peer address (an IPv6 /64), and descriptors it
# keeps free of tcp connections for everything else (palaces, workers, local clients).
PEER_CONNECTIONS_MAX = 256
FD_RESERVE_MIN = 256
FD_LIMIT_MAX = 1 << 20  # what an unlimited soft limit counts as
# Refusal logs (``RefusalLog``): one line per key a minute, REFUSAL_LINES lines at most at
# once and one more each REFUSAL_REFILL_S; past that, one summary line per window.
DENIED_LOG_EVERY_S = 60.0
REFUSAL_LINES = 10
REFUSAL_REFILL_S = 60.0
REFUSAL_WINDOW_S = 10.0
REFUSAL_KEYS_MAX = 256
# How often an open session's key is checked against the allowed folder (``receive``),
# and how many refused messages one ``receive`` reads past before it yields to the loop.
SESSION_RECHECK_S = 0.5
REFUSED_PER_RECEIVE = 100
GUARD_TICK_MS = 1000


def is_tcp(endpoint: str) -> bool:
    return endpoint.startswith("tcp://")


def host_of(endpoint: str) -> str:
    """The host part of ``tcp://HOST:PORT`` (brackets of an IPv6 address removed)."""
    rest = endpoint[len("tcp://") :]
    host = rest.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") else host


def is_loopback(endpoint: str) -> bool:
    host = host_of(endpoint)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _heartbeats(sock: zmq.Socket) -> None:
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_IDLE_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, TCP_KEEPALIVE_INTVL_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, TCP_KEEPALIVE_CNT)


def _listener_limits(sock: zmq.Socket) -> None:
    """What a socket open to the network gets on top: stalled handshakes dropped soon,
    and no message larger than any real request."""
    sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_TCP_MESSAGE_BYTES)


def check_bind(endpoint: str, insecure: bool) -> bool:
    """Whether ``endpoint`` is bound with CURVE; an error for plain tcp that may not be."""
    if not is_tcp(endpoint):
        return False
    if not insecure:
        return True
    if not is_loopback(endpoint):
        raise p.TrustyError(
            p.ErrorCode.INVALID_PARAMS,
            f"plain tcp refused on {endpoint}: --insecure is for loopback addresses only",
        )
    return False


def secure_bind(sock: zmq.Socket, endpoint: str, config: Config) -> str:
    """Set ``sock`` up to bind ``endpoint``: "curve", "plain" (loopback, insecure) or "ipc".

    A CURVE socket of the daemon is also put under its ``TcpDefences``: its connections
    counted and capped, its messages from revoked keys refused (``receive``)."""
    if not is_tcp(endpoint):
        return "ipc"
    _heartbeats(sock)
    _listener_limits(sock)
    if not check_bind(endpoint, config.broker.insecure):
        return "plain"
    pair = keys.server_pair(config.home)
    sock.curve_server = True
    sock.curve_publickey = pair.public
    sock.curve_secretkey = pair.secret
    sock.zap_domain = ZAP_DOMAIN
    if _defences is not None:  # the daemon's sockets (start_authenticator came first)
        _defences.defend(sock, endpoint, answer=endpoint != config.backend)
    return "curve"


def secure_connect(sock: zmq.Socket, endpoint: str, config: Config) -> None:
    """Set ``sock`` up to connect to ``endpoint`` (before ``connect``)."""
    if not is_tcp(endpoint):
        return
    _heartbeats(sock)
    sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
    server_key = config.client.server_key
    if not server_key:
        if is_loopback(endpoint):
            return  # a daemon on this machine started with --insecure (tests)
        raise p.TrustyError(
            p.ErrorCode.INVALID_PARAMS,
            f"no server key for {endpoint}: pass --server-key (or set"
            " TRUSTY_MEMORY_SERVER_KEY, [client] server_key) to the daemon's public key,"
            " which `trusty-memory keys show --server` prints on its host",
        )
    pair = keys.client_pair(config.home)
    sock.curve_serverkey = keys.check_public_key(server_key)
    sock.curve_publickey = pair.public
    sock.curve_secretkey = pair.secret


class Throttle:
    """True at most once per ``every_s``: for an error line that could otherwise repeat at
    every handshake or every event (an unreadable key folder, a bug in the guard)."""

    def __init__(self, every_s: float = DENIED_LOG_EVERY_S) -> None:
        self.every_s = every_s
        self.last = float("-inf")

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return False
        self.last = now
        return True


class RefusalLog:
    """Lines for refusals that a flood can turn neither into gigabytes nor into memory.

    Each key (a client key, a peer address) gets one line per ``per_key_s``, as before,
    while lines are in hand: ``lines`` at most at once, one more each ``refill_s``, whatever
    the number of keys. Refusals past that are only counted, and one summary line per
    ``window_s`` in which there were any says how many ("K more refused handshakes in the
    last S s, from M keys"). A flood of distinct keys thus writes ``lines`` lines, then
    about one a minute and a summary every ``window_s``: a few megabytes a day at most.
    Both maps are bounded by ``keys_max``: the keys logged lately (oldest dropped first)
    and the keys counted in the window (past the cap, only the count grows). Thread-safe:
    the authenticator's thread asks, the guard's thread flushes.
    """

    def __init__(
        self,
        log,
        what: str,
        who: str = "keys",
        *,
        per_key_s: float = DENIED_LOG_EVERY_S,
        lines: int = REFUSAL_LINES,
        refill_s: float = REFUSAL_REFILL_S,
        window_s: float = REFUSAL_WINDOW_S,
        keys_max: int = REFUSAL_KEYS_MAX,
    ) -> None:
        self.log, self.what, self.who = log, what, who
        self.per_key_s, self.lines, self.refill_s = per_key_s, lines, refill_s
        self.window_s, self.keys_max = window_s, keys_max
        self.lock = threading.Lock()
        self.recent: OrderedDict[bytes, float] = OrderedDict()  # key -> when it was logged
        self.in_hand = float(lines)  # lines that may be written now
        self.refilled = self.window_start = time.monotonic()
        self.unlogged = 0  # refusals counted, not logged, in this window
        self.unlogged_keys: set[bytes] = set()
        self.keys_capped = False

    def take(self, key: bytes) -> bool:
        """A refusal for ``key``: True if its line is to be written now (by the caller, who
        alone knows what to say), False if it is a repeat or only counted."""
        now = time.monotonic()
        with self.lock:
            self._roll(now)
            last = self.recent.get(key)
            if last is not None and now - last < self.per_key_s:
                return False
            self.in_hand = min(self.lines, self.in_hand + (now - self.refilled) / self.refill_s)
            self.refilled = now
            if self.in_hand >= 1:
                self.in_hand -= 1
                self.recent[key] = now
                self.recent.move_to_end(key)
                while len(self.recent) > self.keys_max:
                    self.recent.popitem(last=False)
                return True
            self.unlogged += 1
            if len(self.unlogged_keys) < self.keys_max:
                self.unlogged_keys.add(key)
            elif key not in self.unlogged_keys:
                self.keys_capped = True
            return False

    def forget(self, key: bytes) -> None:
        """``key`` was let in: its next refusal is news again."""
        with self.lock:
            self.recent.pop(key, None)

    def flush(self, now: float | None = None) -> None:
        """Write the window's summary once it is over (the guard's thread calls this each
        second, so a flood's summary comes even when the flood has stopped)."""
        with self.lock:
            self._roll(time.monotonic() if now is None else now)

    def _roll(self, now: float) -> None:
        if now - self.window_start < self.window_s:
            return
        while self.recent and now - next(iter(self.recent.values())) >= self.per_key_s:
            self.recent.popitem(last=False)
        if self.unlogged:
            keys_seen = len(self.unlogged_keys)
            at_least = "at least " if self.keys_capped else ""
            self.log.warning(
                f"{self.unlogged} more {self.what} in the last {now - self.window_start:.0f} s,"
                f" from {at_least}{keys_seen} {self.who}",
                summary=self.what,
                refused=self.unlogged,
                keys=keys_seen,
                keys_capped=self.keys_capped,
                window_s=round(now - self.window_start, 1),
                tracked=len(self.recent) + keys_seen,
                tracked_max=2 * self.keys_max,
            )
        self.window_start, self.unlogged = now, 0
        self.unlogged_keys.clear()
        self.keys_capped = False


class AllowedKeys:
    """The allowed folder's keys, read again only when the folder changed (a key file
    added, removed, replaced or rewritten), so asking at every connection and every
    second costs a listing, not a parse of every file."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.signature: tuple | None = None
        self.keys: dict[bytes, str] = {}

    def current(self) -> dict[bytes, str]:
        """Allowed public key -> name; OSError when the folder cannot be read."""
        signature = keys.folder_signature(keys.clients_dir(self.home))
        if signature != self.signature:
            self.keys = keys.allowed_keys(self.home)
            self.signature = signature
        return self.keys


def revoked_name(home: Path, key: bytes) -> str | None:
    """The name ``key`` was revoked under, if it was."""
    revoked = keys.revoked_dir(home)
    return next((f.stem for f in sorted(revoked.glob("*.key")) if _public_or_none(f) == key), None)


class KeyGate:
    """Asked by ZeroMQ's authenticator for every new CURVE connection: is this key allowed?

    The allowed folder is checked at each ask, so ``keys add`` and ``keys revoke`` count
    from the next connection on. A refused key is logged once a minute, not at every one
    of its client's reconnection attempts, and a flood of keys is summed up, not logged
    one by one (``RefusalLog``).
    """

    def __init__(self, home: Path, own_key: bytes, log) -> None:
        self.home = home
        self.own_key = own_key
        self.log = log
        self.allowed = AllowedKeys(home)
        self.refusals = RefusalLog(log, "refused handshakes")
        self.unreadable = Throttle()

    def callback(self, domain: str, key: bytes) -> bool:
        if key == self.own_key:
            return True
        try:
            allowed = self.allowed.current()
        except OSError as exc:
            if self.unreadable():
                self.log.error("allowed keys unreadable; refusing", error=str(exc))
            return False
        if key in allowed:
            self.refusals.forget(key)
            return True
        if self.refusals.take(key):
            self.log.warning(
                "connection refused: key not allowed",
                client_key=key.decode("ascii", "replace"),
                revoked_name=revoked_name(self.home, key),
            )
        return False


def _public_or_none(path: Path) -> bytes | None:
    try:
        return keys._read_public(path)
    except (OSError, p.TrustyError):
        return None


def fd_limit() -> int:
    """This process's soft limit on open files, which the daemon raises towards the hard
    one at start (``broker/daemon.raise_open_file_limit``; nothing in the broker uses
    ``select.select``, which fails past descriptor 1023)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return FD_LIMIT_MAX if soft == resource.RLIM_INFINITY else soft


def connection_caps(limit: int) -> tuple[int, int]:
    """(per peer address, in all): the tcp connections the daemon holds at most, leaving
    a quarter of its descriptors (at least ``FD_RESERVE_MIN``) to everything else."""
    total = max(64, limit - max(FD_RESERVE_MIN, limit // 4))
    return min(PEER_CONNECTIONS_MAX, total), total


def peer_key(host: str) -> str:
    """What connections are counted under: the IPv4 address, or the IPv6 /64 (one host
    holds a whole /64 and could spread a flood over it)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _tcp_peer(fd: int, port: int | None) -> str | None:
    """The peer of the tcp connection on descriptor ``fd`` (ZeroMQ's own, borrowed, never
    closed here), if it is one accepted on ``port``."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return None  # closed meanwhile, or not a socket any more
    try:
        local, peer = sock.getsockname(), sock.getpeername()
    except OSError:
        return None
    finally:
        sock.detach()
    if not isinstance(peer, tuple) or (port is not None and local[1] != port):
        return None
    return peer_key(peer[0])


def _shut(fd: int) -> None:
    """End the connection on ``fd``: ZeroMQ reads its end, closes the descriptor and
    reports it disconnected."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.detach()


def _port_of(endpoint: str) -> int | None:
    try:
        return int(endpoint.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


class ConnectionGuard:
    """Caps the tcp connections the daemon holds, per peer address and in all.

    ZeroMQ accepts every tcp connection and keeps its descriptor until the handshake ends
    or times out; it has no cap of its own, and ZAP is asked only once a handshake gets
    as far as a key, which a half-open connection never does. So this thread reads the
    socket monitor of each tcp socket the daemon binds: each accepted connection's
    descriptor gives its peer address, and one past ``per_peer`` from that address, or
    past ``total`` in all, is shut down at once (ZeroMQ then closes it). Shed connections
    are logged through a ``RefusalLog``. Each second it also flushes the refusal logs'
    summaries (``ticks``).

    The descriptor is read after ZeroMQ accepted it; in the rare case it was closed and
    reused meanwhile, the peer read is that of the connection that reused it, whose own
    accept event follows: the counts stay right, and a connection is only ever shut for
    a peer that is over its cap.
    """

    def __init__(self, log, per_peer: int, total: int) -> None:
        self.log = log
        self.per_peer, self.total = per_peer, total
        self.conns: dict[int, str] = {}  # descriptor -> peer key
        self.counts: Counter[str] = Counter()
        self.shed_total = 0
        self.shed = RefusalLog(log, "connections shed (too many)", who="addresses")
        self.ticks: list[Callable[[float], None]] = [self.shed.flush]
        self.incoming: queue.SimpleQueue[zmq.Socket] = queue.SimpleQueue()
        self.failing = Throttle()
        self.thread = threading.Thread(target=self._run, name="trusty-tcp-guard", daemon=True)

    def watch(self, sock: zmq.Socket) -> None:
        """Count ``sock``'s connections (call from the thread that owns ``sock``, before
        it binds, so that no accept goes unseen)."""
        address = f"inproc://trusty-memory-guard-{id(sock):x}-{time.monotonic_ns()}"
        sock.monitor(address, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        monitor: zmq.SyncSocket = zmq.Context.shadow(sock.context.underlying).socket(zmq.PAIR)
        monitor.setsockopt(zmq.LINGER, 0)
        monitor.setsockopt(zmq.RCVHWM, 0)  # no event dropped, or the counts would drift
        monitor.connect(address)
        self.incoming.put(monitor)  # handed over to the guard's thread
        if not self.thread.is_alive():
            self.thread.start()

    def _run(self) -> None:
        from zmq.utils.monitor import parse_monitor_message

        poller = zmq.Poller()
        while True:
            try:
                while not self.incoming.empty():
                    poller.register(self.incoming.get(), zmq.POLLIN)
                for monitor, _ in poller.poll(GUARD_TICK_MS):
                    while True:
                        try:
                            message = monitor.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self.on_event(parse_monitor_message(message))
                now = time.monotonic()
                for tick in self.ticks:
                    tick(now)
            except Exception as exc:  # the guard must outlive any one bad event
                if self.failing():
                    self.log.exception("tcp guard failed on an event", error=repr(exc))

    def on_event(self, event: Mapping[str, Any]) -> None:
        fd = int(event["value"])
        self._forget(fd)  # a disconnect, or a descriptor reused after a missed one
        if event["event"] != zmq.EVENT_ACCEPTED:
            return
        endpoint = event["endpoint"].decode("utf-8", "replace")
        peer = _tcp_peer(fd, _port_of(endpoint))
        if peer is None:
            return
        if self.counts[peer] >= self.per_peer or len(self.conns) >= self.total:
            _shut(fd)
            self.shed_total += 1
            if self.shed.take(peer.encode()):
                self.log.warning(
                    "connection shed: too many tcp connections",
                    peer=peer,
                    from_peer=self.counts[peer],
                    held=len(self.conns),
                    shed_since_start=self.shed_total,
                    per_peer_max=self.per_peer,
                    total_max=self.total,
                    endpoint=endpoint,
                )
            return
        self.conns[fd] = peer
        self.counts[peer] += 1

    def _forget(self, fd: int) -> None:
        peer = self.conns.pop(fd, None)
        if peer is not None:
            self.counts[peer] -= 1
            if self.counts[peer] <= 0:
                del self.counts[peer]


class SessionCheck:
    """Is the key of an open CURVE connection still allowed?

    ZAP judges a connection once, when it opens; ZeroMQ then tags each message from it
    with the key (its "User-Id"). This checks that tag against the allowed folder (read
    again when it changed, looked at every ``SESSION_RECHECK_S``), so a key revoked while
    its client stays connected gets no more service: on the frontend each request is
    answered with an error naming the revocation, on the backend a worker's messages are
    dropped (the broker then loses it to its heartbeats).
    """

    def __init__(self, home: Path, own_key: bytes, log, refusals: RefusalLog, answer: bool):
        self.home, self.own_key, self.log = home, own_key, log
        self.refusals, self.answer = refusals, answer
        self.allowed = AllowedKeys(home)
        self.keys: dict[bytes, str] = {}
        self.checked = float("-inf")
        self.messages: dict[bytes, str] = {}  # refused key -> the error its requests get
        self.unreadable = Throttle()

    def current(self) -> dict[bytes, str]:
        now = time.monotonic()
        if now - self.checked >= SESSION_RECHECK_S:
            self.checked = now
            try:
                keys_now = self.allowed.current()
            except OSError as exc:  # keep the last good set: a blip must not cut everyone
                if self.unreadable():
                    self.log.error("allowed keys unreadable; keeping the last read", error=str(exc))
                return self.keys
            if keys_now is not self.keys:
                self.keys = keys_now
                self.messages.clear()
        return self.keys

    def admit(self, sock: zmq.Socket, frames: list[zmq.Frame]) -> bool:
        """True to pass the message on; False once it has been answered or dropped."""
        try:
            user_id = frames[-1].get("User-Id")  # a named property: a str
            key = user_id.encode("ascii") if isinstance(user_id, str) else b""
        except (zmq.ZMQError, UnicodeEncodeError):
            key = b""  # a CURVE socket's messages always carry it: refuse what does not
        if key == self.own_key or key in self.current():
            return True
        message = self.message(key)
        if self.refusals.take(key):
            self.log.warning(
                "request refused: key no longer allowed",
                client_key=key.decode("ascii", "replace"),
                revoked_name=revoked_name(self.home, key) if key else None,
            )
        if self.answer:
            self.refuse(sock, frames, message)
        return False

    def message(self, key: bytes) -> str:
        if key not in self.messages:
            if len(self.messages) >= REFUSAL_KEYS_MAX:
                self.messages.clear()
            name = revoked_name(self.home, key) if key else None
            if name is not None:
                why = (
                    f"this client's key was revoked on the daemon (`trusty-memory keys revoke"
                    f" {name}`): its open connection gets no more answers; on the daemon's"
                    f" host, `trusty-memory keys add {name} KEY` allows it again"
                )
            else:
                why = (
                    "this client's key is no longer allowed on the daemon (it left the"
                    " allowed keys): on the daemon's host, `trusty-memory keys add NAME KEY`"
                    " with the key `trusty-memory keys show --client` prints here"
                )
            self.messages[key] = f"refused: {why}"
        return self.messages[key]

    def refuse(self, sock: zmq.Socket, frames: list[zmq.Frame], message: str) -> None:
        """Answer a frontend request ([client, frame], or a REQ's [client, b"", frame])."""
        if len(frames) not in (2, 3):
            return
        payload = frames[-1].bytes
        error = p.error_response(p.salvage_id(payload), p.ErrorCode.NO_WORKER, message)
        reply = [frames[0].bytes, *([b""] if len(frames) == 3 else []), error]
        try:
            sock.send_multipart(reply, zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the client went away


class TcpDefences:
    """The daemon's defences on its CURVE sockets (see the module's docstring): one per
    process, made by ``start_authenticator``, applied by ``secure_bind``."""

    def __init__(self, config: Config, own_key: bytes, gate: KeyGate, log) -> None:
        self.home, self.own_key, self.log = config.home, own_key, log
        limit = fd_limit()
        per_peer, total = connection_caps(limit)
        self.guard = ConnectionGuard(log, per_peer, total)
        self.revoked = RefusalLog(log, "requests refused (key no longer allowed)")
        self.guard.ticks += [gate.refusals.flush, self.revoked.flush]
        self.sessions: dict[int, tuple[zmq.Socket, SessionCheck]] = {}
        log.info("tcp limits", fd_limit=limit, per_peer_max=per_peer, total_max=total,
                 handshake_ivl_ms=HANDSHAKE_IVL_MS)  # fmt: skip

    def defend(self, sock: zmq.Socket, endpoint: str, answer: bool) -> None:
        """Put ``sock`` (about to bind ``endpoint``) under the guard and the session check;
        ``answer``: refused requests get an error (the frontend), else they are dropped."""
        self.guard.watch(sock)
        check = SessionCheck(self.home, self.own_key, self.log, self.revoked, answer)
        self.sessions[id(sock)] = (sock, check)

    def check_of(self, sock: zmq.Socket) -> SessionCheck | None:
        entry = self.sessions.get(id(sock))
        return entry[1] if entry is not None and entry[0] is sock else None


_defences: TcpDefences | None = None


def start_authenticator(ctx: zmq.Context, config: Config, log):
    """The ZAP handler for this process's CURVE sockets (a thread); stop it at exit. The
    daemon's ``TcpDefences`` start with it, for ``secure_bind`` to apply."""
    global _defences
    from zmq.auth.thread import ThreadAuthenticator

    own = keys.server_pair(config.home).public
    gate = KeyGate(config.home, own, log)
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(domain=ZAP_DOMAIN.decode(), credentials_provider=gate)
    _defences = TcpDefences(config, own, gate, log)
    return auth


def receive(sock: zmq.Socket) -> list[bytes]:
    """``sock.recv_multipart(zmq.NOBLOCK)`` for the broker's loop. On the daemon's CURVE
    sockets, a message from a key that is no longer allowed (revoked after its connection
    opened) is refused here (``SessionCheck``) and the next one read; zmq.Again as usual
    when none is left (or after ``REFUSED_PER_RECEIVE`` refused ones: the loop comes back)."""
    check = _defences.check_of(sock) if _defences is not None else None
    if check is None:
        return sock.recv_multipart(zmq.NOBLOCK)
    for _ in range(REFUSED_PER_RECEIVE):
        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
        if check.admit(sock, frames):
            return [frame.bytes for frame in frames]
    raise zmq.Again()


class LinkWatch:
    """What happened to a tcp socket's connection, from ZeroMQ's socket monitor.

    ``poll()`` says whether the link came back after it was lost (a caller then sends
    what is waiting again, on a fresh socket: the answer to what went out before the drop
    is lost with the connection), and ``refused`` names why the daemon turned the last
    handshake down (a key it does not allow), so a client can say so instead of waiting
    out its deadline.

    A wrong server key is quieter: the daemon cannot read the client's first CURVE
    message and just closes the connection, so the client only sees handshakes that fail
    without detail, one per reconnection. ``failed_handshakes`` counts them (since the
    last one that succeeded) and ``silence()`` turns them into words for a caller whose
    deadline passed, instead of "no daemon answers".
    """

    EVENTS = (
        zmq.EVENT_HANDSHAKE_SUCCEEDED
        | zmq.EVENT_DISCONNECTED
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    )

    def __init__(self, sock: zmq.Socket, endpoint: str) -> None:
        self.endpoint = endpoint
        address = f"inproc://trusty-memory-link-{id(self):x}-{time.monotonic_ns()}"
        sock.monitor(address, self.EVENTS)
        # A plain context over the same libzmq one, so this works for asyncio sockets too.
        self.monitor: zmq.SyncSocket = zmq.Context.shadow(sock.context.underlying).socket(zmq.PAIR)
        self.monitor.setsockopt(zmq.LINGER, 0)
        self.monitor.connect(address)
        self.handshakes = 0
        self.failed_handshakes = 0  # closed before they completed, since the last success
        self.lost = False
        self.refused: str | None = None

    def poll(self) -> bool:
        """Read the events so far; True if the link is back up after a loss."""
        from zmq.utils.monitor import parse_monitor_message

        back = False
        while True:
            try:
                event = parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return back
            kind = event["event"]
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.handshakes += 1
                self.failed_handshakes = 0
                self.refused = None
                back = back or (self.lost and self.handshakes > 1)
                self.lost = False
            elif kind == zmq.EVENT_DISCONNECTED:
                self.lost = True
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.refused = (
                    f"the daemon at {self.endpoint} refused this client's key (ZAP status"
                    f" {event['value']}): on its host, `trusty-memory keys add NAME KEY` with"
                    " the key `trusty-memory keys show --client` prints here"
                )
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                self.refused = (
                    f"handshake with {self.endpoint} failed: is --server-key that daemon's"
                    " public key, and does it use CURVE?"
                )
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self.failed_handshakes += 1

    def silence(self) -> str | None:
        """Why nothing came back, when the handshakes tell (call after ``poll()``, once the
        deadline passed): None if they do not (no connection at all, or the last handshake
        succeeded)."""
        if self.refused is not None:
            return self.refused
        if self.failed_handshakes == 0:
            return None
        return (
            f"the server at {self.endpoint} refused the handshake ({self.failed_handshakes}"
            " tries, each closed before it completed): check --server-key"
            " (TRUSTY_MEMORY_SERVER_KEY, [client] server_key): it must be that daemon's"
            " public key, as `trusty-memory keys show --server` prints it on its host"
            " (or the daemon is turning away connections from this address: too many)"
        )

    def close(self) -> None:
        self.monitor.close(linger=0)
