"""What every CLI verb shares: a client of this home's daemon, and output as text or JSON."""

from __future__ import annotations

import json


def daemon_client():
    """This home's daemon (or the one ``--daemon`` names), started if a client may start it."""
    from trusty_memory.client.sync import Client

    return Client()


def output(args, data, text: str) -> None:
    """``text`` for people; ``data`` as JSON with ``--json``, for scripts."""
    print(json.dumps(data, indent=2, default=str) if args.json else text)
