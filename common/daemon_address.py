"""Where a process reaches the daemon of its home, read from the home's record.

Every caller of the broker needs this, not only the client library: a palace worker asks
the embedder through the broker, and the dreamer calls the palaces. A local daemon is
found through its record in the home (``home.live_daemon``: the lock held, the pid its
writer's), never through this process's environment; a daemon elsewhere (a ``tcp://``
endpoint in the config) is where the config says.
"""

from __future__ import annotations

from trusty_memory.common import home
from trusty_memory.common.config import Config


def is_local(config: Config) -> bool:
    """The daemon runs on this machine (an ``ipc://`` endpoint), found through the home."""
    return config.daemon_endpoint.startswith("ipc://")


def daemon_pid(config: Config) -> int | None:
    """The pid of the daemon that owns the home now (local daemons only), else None."""
    record = home.live_daemon(config.home)
    return record.pid if record else None


def frontend(config: Config) -> str | None:
    """Where to reach the daemon: the live local daemon's recorded socket (None if there
    is none), or the configured endpoint of a remote one."""
    if not is_local(config):
        return config.daemon_endpoint
    record = home.live_daemon(config.home)
    return record.frontend if record else None
