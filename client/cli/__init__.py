"""The command line, ``trusty-memory``: a thin layer over the client library.

Run by: the CLI process (``main.py``'s ``main``, the console script). ``main`` assembles
the verb groups in ``GROUPS``; each group sits beside its code and has
``register(subparsers)``: ``server`` (serve, ui, daemon, worker, status, health, stop),
``memory`` (remember, recall, list, show, forget, update, search), ``palaces`` (palace,
stats, scale), ``kg``, ``transfer`` (export, import), ``dreaming`` (dream, dreamer,
archive), ``admin`` (setup, doctor, logs, config), ``service`` (``systemd``/``launchd``
units), ``keys``. ``parser`` adds subcommands, ``output`` prints, ``human`` words things
for people.
May import: ``common``, ``client``, and, to run them in this process, ``dreamer`` (``dream``)
and ``ui`` (``ui``).
"""
