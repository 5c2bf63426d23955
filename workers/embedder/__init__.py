"""The embedder: the MiniLM model, compiled once per machine, served to every palace.

Run by: embedder processes (``python -m trusty_memory.workers.embedder.worker``), which
batch texts across requests; ``setup`` and ``doctor`` use ``compiled_model`` and
``export_tools`` in process. ``model_build.py`` runs as a script of its own, beside a copy
of ``compiled_model.py``, in whichever interpreter has the export tools.
May import: ``common`` and ``workers.base`` (the worker loop).
"""
