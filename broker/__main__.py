import sys

from trusty_memory.broker.daemon import run_daemon

sys.exit(run_daemon())
