"""``trusty-memory ui``: a local web page to look inside the palaces.

A client of the daemon like the CLI (``views.py`` makes the same calls), rendered on the
server (``app.py``: Starlette, Jinja2, htmx vendored in ``static/``), loopback-only with a
token in the URL and CSRF checks on every change (``security.py``), run by uvicorn
(``server.py``).

Run by: the ``trusty-memory ui`` process. May import: ``common``, the client library
(``client.aio``), the MCP front end's loopback http server (``client.mcp.http``), the
dreamer's one-pass entry (a dry run from the page) and the CLI's human formats; never
``workers`` or ``broker`` (pyproject.toml's import contracts).
"""
