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
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import zmq

from trusty_memory import keys
from trusty_memory import protocol as p
from trusty_memory.config import Config

ZAP_DOMAIN = b"trusty-memory"
# ZMTP heartbeats on tcp connections: a peer whose network went away (no FIN, no RST)
# is dropped after HEARTBEAT_TIMEOUT_MS, and the connecting side dials again by itself.
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 5000
RECONNECT_IVL_MAX_MS = 2000
DENIED_LOG_EVERY_S = 60.0


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
    """Set ``sock`` up to bind ``endpoint``: "curve", "plain" (loopback, insecure) or "ipc"."""
    if not is_tcp(endpoint):
        return "ipc"
    _heartbeats(sock)
    if not check_bind(endpoint, config.broker.insecure):
        return "plain"
    pair = keys.server_pair(config.home)
    sock.curve_server = True
    sock.curve_publickey = pair.public
    sock.curve_secretkey = pair.secret
    sock.zap_domain = ZAP_DOMAIN
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


class KeyGate:
    """Asked by ZeroMQ's authenticator for every new CURVE connection: is this key allowed?

    The allowed folder is read at each ask, so ``keys add`` and ``keys revoke`` count from
    the next connection on. A refused key is logged once a minute, not at every one of
    its client's reconnection attempts.
    """

    def __init__(self, home: Path, own_key: bytes, log) -> None:
        self.home = home
        self.own_key = own_key
        self.log = log
        self.denied_logged: dict[bytes, float] = {}

    def callback(self, domain: str, key: bytes) -> bool:
        if key == self.own_key:
            return True
        try:
            allowed = keys.allowed_keys(self.home)
        except OSError as exc:
            self.log.error("allowed keys unreadable; refusing", error=str(exc))
            return False
        if key in allowed:
            self.denied_logged.pop(key, None)
            return True
        now = time.monotonic()
        if now - self.denied_logged.get(key, -DENIED_LOG_EVERY_S) >= DENIED_LOG_EVERY_S:
            self.denied_logged[key] = now
            revoked = keys.revoked_dir(self.home)
            was = next(
                (f.stem for f in sorted(revoked.glob("*.key")) if _public_or_none(f) == key),
                None,
            )
            self.log.warning(
                "connection refused: key not allowed",
                client_key=key.decode("ascii", "replace"),
                revoked_name=was,
            )
        return False


def _public_or_none(path: Path) -> bytes | None:
    try:
        return keys._read_public(path)
    except (OSError, p.TrustyError):
        return None


def start_authenticator(ctx: zmq.Context, config: Config, log):
    """The ZAP handler for this process's CURVE sockets (a thread); stop it at exit."""
    from zmq.auth.thread import ThreadAuthenticator

    own = keys.server_pair(config.home).public
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback(
        domain=ZAP_DOMAIN.decode(), credentials_provider=KeyGate(config.home, own, log)
    )
    return auth


class LinkWatch:
    """What happened to a tcp socket's connection, from ZeroMQ's socket monitor.

    ``poll()`` says whether the link came back after it was lost (a caller then sends
    what is waiting again, on a fresh socket: the answer to what went out before the drop
    is lost with the connection), and ``refused`` names why the daemon turned the last
    handshake down (a key it does not allow), so a client can say so instead of waiting
    out its deadline.
    """

    EVENTS = (
        zmq.EVENT_HANDSHAKE_SUCCEEDED
        | zmq.EVENT_DISCONNECTED
        | zmq.EVENT_HANDSHAKE_FAILED_AUTH
        | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    )

    def __init__(self, sock: zmq.Socket, endpoint: str) -> None:
        self.endpoint = endpoint
        address = f"inproc://trusty-memory-link-{id(self):x}-{time.monotonic_ns()}"
        sock.monitor(address, self.EVENTS)
        # A plain context over the same libzmq one, so this works for asyncio sockets too.
        self.monitor = zmq.Context.shadow(sock.context.underlying).socket(zmq.PAIR)
        self.monitor.setsockopt(zmq.LINGER, 0)
        self.monitor.connect(address)
        self.handshakes = 0
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

    def close(self) -> None:
        self.monitor.close(linger=0)
