"""``python -m trusty_memory.broker [--client-started] [--take-over]``: the daemon.

``--client-started`` is what a client passes when it starts a daemon on demand: such a
daemon exits after ``[daemon] idle_exit_s`` without client requests. ``--take-over`` is
``trusty-memory daemon --take-over`` (a service manager's): a home another daemon holds
is taken over or waited for instead of exiting 1.
"""

import sys

from trusty_memory.broker.daemon import run_daemon

flags = sys.argv[1:]
sys.exit(
    run_daemon(client_started="--client-started" in flags, take_over_home="--take-over" in flags)
)
