"""The palace store: one palace's SQLite file (the truth) and its vector index (a cache).

Run by: palace worker processes (``workers/palace.py``), and in process by benchmarks that
replay the product's ranking. ``read.ReadStore`` is the read side (readers use it alone),
``write.PalaceStore`` adds the writes; ``schema`` migrates the file, ``search`` and
``ranking`` answer queries, ``maintenance`` runs the dreamer's steps and the archive.
May import: ``common`` and ``workers.embedder.embedding`` (the vector size).
"""
