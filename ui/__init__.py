"""``trusty-memory ui``: a local web page to look inside the palaces.

A client of the daemon like the CLI (``views.py`` makes the same calls), rendered on the
server (``app.py``: Starlette, Jinja2, htmx vendored in ``static/``), loopback-only with a
token in the URL and CSRF checks on every change (``security.py``), run by uvicorn
(``server.py``).
"""
