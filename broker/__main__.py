"""``python -m trusty_memory.broker [--client-started] [--take-over] [--start-lock-fd=N]``.

``--client-started`` is what a client passes when it starts a daemon on demand: such a
daemon exits after ``[daemon] idle_exit_s`` without client requests. ``--take-over`` is
``trusty-memory daemon --take-over`` (a service manager's): a home another daemon holds
is taken over or waited for instead of exiting 1. ``--start-lock-fd=N``: descriptor N
holds the home's start lock for a starter that did not wait (``client/spawn.py``); it is
closed once the daemon's record is written.
"""

import sys

from trusty_memory.broker.daemon import run_daemon

flags = sys.argv[1:]
lock_fds = [int(f.split("=", 1)[1]) for f in flags if f.startswith("--start-lock-fd=")]
sys.exit(
    run_daemon(
        client_started="--client-started" in flags,
        take_over_home="--take-over" in flags,
        start_lock_fd=lock_fds[0] if lock_fds else None,
    )
)
