"""``python -m trusty_memory.broker [--client-started]``: the daemon.

``--client-started`` is what a client passes when it starts a daemon on demand: such a
daemon exits after ``[daemon] idle_exit_s`` without client requests.
"""

import sys

from trusty_memory.broker.daemon import run_daemon

sys.exit(run_daemon(client_started="--client-started" in sys.argv[1:]))
