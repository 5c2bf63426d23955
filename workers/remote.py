"""``trusty-memory worker``: a palace's writer or a reader, on a host other than the broker's.

The broker routes to it like to a local worker (it registers on the backend the same
way, ``W_READY``, marked remote), but this host owns the palace's files: they live in
this home (``TRUSTY_MEMORY_HOME``), and the palace is created here if it is new. Vectors
come from the broker's embedder, asked through the backend (the only broker socket this
worker needs to reach). Nobody supervises it from afar, so it rejoins by itself whenever
the broker sends it away or goes silent (``workers/base.py``), and stops on SIGTERM.
"""

from __future__ import annotations

import sys

from trusty_memory.common import palace_dir, transport
from trusty_memory.common import protocol as p
from trusty_memory.common.config import load_config
from trusty_memory.common.logs import setup_logging
from trusty_memory.common.names import validate_palace_name


def run_remote_worker(palace: str, reader: bool = False) -> int:
    """Serve ``palace`` for the broker at ``[broker] backend`` until stopped."""
    config = load_config()
    name = validate_palace_name(palace)
    if not transport.is_tcp(config.backend):
        raise p.TrustyError(
            p.ErrorCode.INVALID_PARAMS, f"--broker: want tcp://HOST:PORT, got {config.backend}"
        )
    config.ensure_dirs()
    if not reader and not palace_dir.exists(config, name):
        palace_dir.create(config, name, None)
    log = setup_logging("palace", default_level="info").bind(broker=config.backend)
    log.info("remote worker starting", palace=name, role="reader" if reader else "writer")
    if reader:
        from trusty_memory.workers.reader import PalaceReader  # lazy: reader or writer, not both

        return PalaceReader(config, log, name, remote=True).run()
    from trusty_memory.workers.writer import PalaceWriter  # lazy: reader or writer, not both

    return PalaceWriter(config, log, name, remote=True).run()


def main(argv: list[str] | None = None) -> int:
    """``python -m trusty_memory.workers.remote --palace=NAME [--reader]``: what
    ``trusty-memory worker`` runs, with ``TRUSTY_MEMORY_BROKER_BACKEND`` naming the broker."""
    import argparse

    parser = argparse.ArgumentParser(prog="trusty_memory.workers.remote")
    parser.add_argument("--palace", required=True)
    parser.add_argument("--reader", action="store_true")
    args = parser.parse_args(argv)
    try:
        return run_remote_worker(args.palace, reader=args.reader)
    except p.TrustyError as exc:
        print(f"trusty-memory worker: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
