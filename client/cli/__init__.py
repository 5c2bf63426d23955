"""The command line, ``trusty-memory``: a thin layer over the client library.

Run by: the CLI process (``main.py``'s ``main``, the console script). Each verb group sits
beside its code: ``admin`` (setup, doctor, logs, config), ``extended`` (the extended
tools' verbs), ``keys``, ``service`` (``systemd``/``launchd`` units); ``output`` prints.
May import: ``common``, ``client``, and, to run them in this process, ``dreamer`` (``dream``)
and ``ui`` (``ui``).
"""
