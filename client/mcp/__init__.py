"""The MCP front end: ``trusty-memory serve`` and the one MCP host every session shares.

Run by: ``serve`` (``stdio.py``, ``relay.py``: the standard library only, ~19 MB per
agent session) and the MCP host process (``host.py``, the official SDK: ``session.py``
serves one session, ``tools.py`` the contract's tools, ``tools_extended.py`` the rest,
each a ``tool_record.Tool`` per tool, ``tool_sets.py`` lists and calls them,
``resources.py`` the resources), started by the daemon. ``http.py`` adds the SDK's HTTP
transport, ``direct.py`` serves in one process where no daemon may be started.
May import: ``common`` and ``client``.
"""
