"""Finding the daemon, and starting one when none answers.

Any client may start the daemon, so fifty agent sessions starting at once must make
exactly one, whatever their environments. Two locks in the data home make that so:
starters serialise on ``start.lock`` (the first one spawns and waits until the daemon
answers; the rest then find it answering), and the daemon itself holds ``daemon.lock``
for its life, so even a starter that raced past the first lock cannot produce a second
daemon. A local client connects wherever the home's record says the daemon listens
(``trusty_memory.common.home``), not where its own environment would put the sockets.

A daemon elsewhere (``[client] daemon``, ``TRUSTY_MEMORY_DAEMON``, ``--daemon``: a
``tcp://`` endpoint) is never started from here; clients connect with CURVE
(``transport.py``).
"""

from __future__ import annotations

import time

import zmq

from trusty_memory.client.spawn import spawn_daemon, start_lock
from trusty_memory.common import protocol as p
from trusty_memory.common import transport
from trusty_memory.common.config import Config
from trusty_memory.common.daemon_address import daemon_pid, frontend, is_local
from trusty_memory.common.methods import Method


class DaemonUnavailable(p.TrustyError):
    def __init__(self, message: str) -> None:
        super().__init__(p.ErrorCode.NO_WORKER, message)


def ping(config: Config, timeout_s: float = 1.0) -> bool:
    """True if a broker answers ``ping`` on the frontend within ``timeout_s``."""
    return reach(config, timeout_s) is None


def reach(config: Config, timeout_s: float = 1.0) -> str | None:
    """None if a broker answers ``ping`` within ``timeout_s``; else why not, in words
    (over tcp, a daemon that refused this client's key says so at once, and handshakes
    that never completed, as with a wrong server key, say so at the deadline)."""
    endpoint = frontend(config)
    if endpoint is None:
        return f"no daemon runs for {config.home}"
    sock: zmq.SyncSocket = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    link = None
    try:
        transport.secure_connect(sock, endpoint, config)
        # Watch before connecting: the first handshake's refusal is the one to catch.
        link = transport.LinkWatch(sock, endpoint) if transport.is_tcp(endpoint) else None
        sock.connect(endpoint)
        rid, frame = p.encode_request(Method.PING)
        sock.send(frame)
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if sock.poll(int(min(remaining, 0.05) * 1000) + 1):
                resp = p.decode_response(sock.recv())
                if resp.id == rid:
                    if resp.ok:
                        return None
                    # An error answer carries its error; "empty error" as p.unwrap says it.
                    return f"{endpoint}: {resp.error.message if resp.error else 'empty error'}"
            if link is not None:
                link.poll()
                if link.refused is not None:
                    return link.refused
        # Handshakes that kept failing: most likely a --server-key that is not this daemon's.
        silence = link.silence() if link is not None else None
        return silence or f"no daemon answers at {endpoint}"
    finally:
        sock.close(linger=0)
        if link is not None:
            link.close()


def ensure_daemon(config: Config, timeout_s: float = 30.0) -> None:
    """Return once a daemon answers, starting one if needed."""
    if not is_local(config):
        if (why := reach(config, 2.0)) is not None:
            raise DaemonUnavailable(why)
        return
    if ping(config, 0.5):
        return
    with start_lock(config):
        if ping(config, 0.5):
            return
        # A daemon that owns the home but is slow to answer (fifty starters on two cores)
        # is waited for: a second one would only find the home taken and exit.
        proc = None if daemon_pid(config) is not None else spawn_daemon(config)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ping(config, 0.5):
                return
            if daemon_pid(config) is None:
                if proc is None:
                    proc = spawn_daemon(config)  # the one we waited for is gone
                elif proc.poll() not in (None, 0):
                    break
            time.sleep(0.05)
    raise DaemonUnavailable(
        f"the daemon did not start within {timeout_s:.0f}s; see {config.log_dir / 'daemon.log'}"
    )
