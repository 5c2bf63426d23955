"""What every CLI verb shares: a client of this home's daemon, and output as text or JSON.

Everything written for people goes through :func:`say` (``output`` included), which
shows the controls in stored text and arguments instead of letting the terminal obey
them (``human.visible``). It does so on a pipe too: a pipe often ends on a terminal
(``| less -R``, ``| tee``, a log cat later), and a script that needs the exact text has
``--json``, whose encoder escapes every control already, so it is left byte for byte."""

from __future__ import annotations

import json
from typing import IO

from trusty_memory.common.human import visible


def daemon_client():
    """This home's daemon (or the one ``--daemon`` names), started if a client may start it."""
    from trusty_memory.client.sync import Client  # lazy: pyzmq; verbs that call the daemon

    return Client()


def output(args, data, text: str) -> None:
    """``text`` for people (:func:`say`); ``data`` as JSON with ``--json``, for scripts."""
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        say(text)


def say(text: str, file: IO[str] | None = None, flush: bool = False) -> None:
    """Print ``text`` for people, on stdout or ``file``: its lines and tabs as they are,
    every other control shown escaped, never obeyed."""
    print(visible(text, lines=True), file=file, flush=flush)


class Shown:
    """A stream for people, for code that writes to the stream it is given (the
    dreamer's progress): each write goes out as :func:`say` would put it."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(visible(text, lines=True))

    def flush(self) -> None:
        self.stream.flush()
