"""``python -m trusty_memory.dreamer``: the dreamer process, and the one-shot ``dream``.

Run by the daemon with ``--supervised`` (it then stops when the daemon goes away), or by
hand as ``trusty-memory dreamer``. ``trusty-memory dream`` runs one pass in the calling
process instead (``dream_once``): the dreamer is only a client, so both are the same code.
It calls the broker through the ``Caller`` it is given, or one of its own that never starts
a daemon: the front ends that may start one (the CLI, the web page) hand in their client,
so the dreamer imports none of theirs.
"""

from __future__ import annotations

import argparse
import signal
import sys

from trusty_memory.common.caller import Caller
from trusty_memory.common.config import Config, load_config
from trusty_memory.common.home import expected_parent
from trusty_memory.common.methods import Method
from trusty_memory.dreamer import progress as ev
from trusty_memory.dreamer.runner import DreamPass, PassReport
from trusty_memory.dreamer.scheduler import Scheduler


def dream_once(
    config: Config,
    palaces: list[str] | None = None,
    *,
    dry_run: bool = False,
    emit: ev.Emit = ev.silent,
    caller: Caller | None = None,
) -> list[PassReport]:
    """One pass over each palace (all of them when ``palaces`` is None), in this process,
    through ``caller`` (one of its own, closed after, when None)."""
    own = caller is None
    client = Caller(config) if caller is None else caller
    try:
        names = palaces or client.call(Method.PALACE_LIST)["palaces"]
        return [
            DreamPass(client, name, config.dreamer, dry_run=dry_run, emit=emit).run()
            for name in names
        ]
    finally:
        if own:
            client.close()


def run_dreamer(
    supervised: bool = False, json_lines: bool = False, caller: Caller | None = None
) -> int:
    """The long-running dreamer: the scheduler's loop until SIGTERM/SIGINT. Supervised,
    its calls are the daemon's own traffic (``background``), which never counts as use."""
    from trusty_memory.common.logs import setup_logging  # lazy: structlog, not loaded by `dream`

    config = load_config()
    log = setup_logging("dreamer", default_level="info")
    client = Caller(config, background=supervised) if caller is None else caller
    emit = ev.json_lines() if json_lines else ev.silent
    scheduler = Scheduler(
        client, config.dreamer, log, emit=emit, parent_pid=expected_parent() if supervised else None
    )

    def stop(signum, frame) -> None:
        scheduler.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("dreamer started", supervised=supervised, idle_after_s=config.dreamer.idle_after_s)
    try:
        scheduler.run()
    finally:
        client.close()
        log.info("dreamer stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trusty-memory-dreamer")
    parser.add_argument("--supervised", action="store_true", help="run as the daemon's child")
    parser.add_argument("--json", action="store_true", help="JSON-lines events on stdout")
    args = parser.parse_args(argv)
    return run_dreamer(supervised=args.supervised, json_lines=args.json)


if __name__ == "__main__":
    sys.exit(main())
