"""Worker processes: palace workers (one SQLite file + vector index each) and embedders.

Run by: each palace's writer and readers (``palace.py``, forked from ``template.py`` or
started afresh), a remote palace worker (``remote.py``), the template itself, and the
embedder processes (``embedder/``). ``store/`` is the palace store those workers own.
May import: ``common`` and ``workers``; never ``client`` or ``broker`` (a worker reaches
the embedder through the broker with the wire protocol, like any client).
"""
