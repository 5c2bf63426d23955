"""``trusty-memory worker``: a palace's writer or a reader, on a host other than the broker's.

The broker routes to it like to a local worker (it registers on the backend the same
way, ``W_READY``, marked remote), but this host owns the palace's files: they live in
this home (``TRUSTY_MEMORY_HOME``), and the palace is created here if it is new. Vectors
come from the broker's embedder, asked through the backend (the only broker socket this
worker needs to reach). Nobody supervises it from afar, so it rejoins by itself whenever
the broker sends it away or goes silent (``workers/base.py``), and stops on SIGTERM.
"""

from __future__ import annotations

from trusty_memory import protocol as p
from trusty_memory import transport
from trusty_memory.broker.palaces import PalaceRegistry
from trusty_memory.config import load_config
from trusty_memory.logs import setup_logging
from trusty_memory.names import validate_palace_name


def run_remote_worker(palace: str, reader: bool = False) -> int:
    """Serve ``palace`` for the broker at ``[broker] backend`` until stopped."""
    config = load_config()
    name = validate_palace_name(palace)
    if not transport.is_tcp(config.backend):
        raise p.TrustyError(
            p.ErrorCode.INVALID_PARAMS, f"--broker: want tcp://HOST:PORT, got {config.backend}"
        )
    config.ensure_dirs()
    registry = PalaceRegistry(config)
    if not reader and not registry.exists(name):
        registry.create(name, None)
    log = setup_logging("palace", default_level="info").bind(broker=config.backend)
    log.info("remote worker starting", palace=name, role="reader" if reader else "writer")
    if reader:
        from trusty_memory.workers.reader import PalaceReader

        return PalaceReader(config, log, name, remote=True).run()
    from trusty_memory.workers.writer import PalaceWriter

    return PalaceWriter(config, log, name, remote=True).run()
