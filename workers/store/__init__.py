"""The palace store: one palace's SQLite file (the truth) and its vector index (a cache).

Run by: palace worker processes (``workers/palace.py``), and in process by benchmarks that
replay the product's ranking. The store is three classes, each adding to the one before:
``state.PalaceState`` (what a palace process holds in memory: filters, index, L1, and how
it follows the change log), ``read.ReadStore`` (every read; readers use it alone) and
``write.PalaceStore`` (the writes, and the API the modules that change drawers use:
``transaction()``, ``after_write(added=, removed=)``). Around them:

* ``schema`` migrates the file; ``rows`` are the drawer rows and the change log every write
  goes through; ``archive`` the archive table; ``dream_log`` the dream passes' log.
* ``ranking`` is deep recall, its rules and their SQL; ``search`` keyword search, a fact's
  history and stats; ``dates``, ``context`` and ``same_fact`` the rules they share.
* ``bulk`` imports and exports, ``edit`` updates and restores, ``dedup`` and ``decay``
  are the dreamer's steps.

Nothing outside ``workers/store/`` uses a private name of these classes.
May import: ``common`` and ``workers.embedder.embedding`` (the vector size).
"""

import sys

# sqlite-utils imports pandas whenever it is installed, only to map pandas.Timestamp to a
# column type the store never uses. Where pandas is installed with pyarrow (common in an
# agent's Python environment), that import costs hundreds of milliseconds and starts
# pyarrow's jemalloc background thread, so the worker template counts two threads and
# refuses to fork (seen on a 16-core host: ``bench/fork_check.py``). None in sys.modules
# makes the import fail, which sqlite-utils handles (``except ImportError``).
sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]
