"""The dreamer: keeps palaces healthy while they are idle.

A separate process and a client of the broker like any other (it never opens a palace's
files): every step is a ``dream_*`` request that the palace's writer runs as one bounded
batch in one transaction (``workers/store/dedup.py``, ``decay.py``). The pieces:

* ``planner``   turns duplicate pairs into merge groups (pure, no I/O).
* ``progress``  the JSON-lines events, Engram's trainer protocol: progress, metric,
                recommendation, complete.
* ``runner``    one pass over one palace: scan -> merge -> decay/prune -> KG -> finish,
                preview (``dry_run``) or apply, within a time budget, yielding between
                batches.
* ``scheduler`` the long-running loop: which palace is due (idle long enough, or not
                dreamed for ``every_s``), and stepping aside when foreground work arrives.

Run by: the dreamer process (``python -m trusty_memory.dreamer --supervised``, started by
the daemon's supervisor) and ``trusty-memory dream``. May import: ``common`` only (it calls
the broker through ``common.caller``; a front end that may start the daemon hands in its
client); never ``client``, ``workers``, ``broker`` or ``ui`` (pyproject.toml's import
contracts).
"""
