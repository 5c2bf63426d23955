"""Writes to a daemon, one line per answer: ``ok <drawer id> <seconds>`` or ``err
<seconds> <message>`` (seconds since the start, when the answer came).

``python -m tests.engine.remote_writes PALACE SECONDS``: run by ``test_netns.py`` inside a
network namespace (the test process itself cannot enter one), with the daemon, its key
and this home's key in the environment like any remote client.
"""

from __future__ import annotations

import sys
import time

from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p


def main() -> int:
    palace, seconds = sys.argv[1], float(sys.argv[2])
    start = time.monotonic()
    deadline = start + seconds
    with Client() as client:
        i = 0
        while time.monotonic() < deadline:
            try:
                stored = client.remember(palace, f"note {i} written across the veth pair")
                print(f"ok {stored.drawer_id} {time.monotonic() - start:.3f}", flush=True)
            except p.TrustyError as exc:
                print(f"err {time.monotonic() - start:.3f} {exc.message}", flush=True)
            i += 1
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
