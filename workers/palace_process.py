"""A palace worker process: its command line, and which role it plays.

``python -m trusty_memory.workers.palace_process --palace=NAME [--reader]``, started by the
broker's supervisor, or the same arguments handed to the worker template, whose forked
child calls ``main`` (``workers/template.py``). A writer (``writer.py``) owns the palace's
SQLite file; a reader (``reader.py``) serves reads from a read-only copy of its state. Kept
apart from ``palace.py``, which both roles build on, so that no module imports one that
imports it back.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys

from trusty_memory.common.config import load_config
from trusty_memory.common.home import CRASH_TEST_ENV
from trusty_memory.common.logs import setup_logging
from trusty_memory.workers.reader import PalaceReader
from trusty_memory.workers.writer import PalaceWriter


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trusty-memory-palace")
    parser.add_argument("--palace", required=True)
    parser.add_argument("--reader", action="store_true", help="serve reads only, read-only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # A crash in native code (SQLite, hnswlib, numpy) leaves a traceback in the daemon log.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    if os.environ.get(CRASH_TEST_ENV) == "all":
        os.kill(os.getpid(), signal.SIGSEGV)
    args = parse_args(argv)
    config = load_config()
    log = setup_logging("palace", default_level="info")
    if args.reader:
        return PalaceReader(config, log, args.palace).run()
    return PalaceWriter(config, log, args.palace).run()


if __name__ == "__main__":
    sys.exit(main())
