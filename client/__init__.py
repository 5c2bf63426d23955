"""Clients of the broker: the Python library (``sync``, ``aio``, ``daemon``, ``spawn``,
``bulk``), the MCP front end (``mcp/``) and the command line (``cli/``).

Run by: any process that calls the daemon: an agent's ``serve``, the MCP host, the CLI,
scripts using the library. May import: ``common`` and ``client``; never ``workers`` or
``broker`` (it talks to them over ZeroMQ, and starts the daemon by module name).
"""
