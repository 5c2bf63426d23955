"""``trusty-memory ui``: a local web page to look inside the palaces.

A client of the daemon like the CLI (``views.py`` makes the same calls), rendered on the
server (``app.py``: Starlette, Jinja2, htmx vendored in ``static/``), loopback-only with a
token in the URL and CSRF checks on every change (``security.py``), run by uvicorn
(``server.py``).

Run by: the ``trusty-memory ui`` process (``python -m trusty_memory.ui``, which the command
line becomes). May import: ``common``, the client library (``client.aio``, ``client.sync``)
and the dreamer's one-pass entry (a dry run from the page); never ``workers`` or ``broker``,
and nothing imports it back (pyproject.toml's import contracts).
"""
