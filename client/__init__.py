"""Clients of the broker: the Python library (``sync``, ``aio``, ``daemon``, ``spawn``,
``bulk``), the MCP front end (``mcp/``) and the command line (``cli/``).

The library's ``Client`` is ``common.caller.Caller`` (the blocking call every caller of the
broker shares, the palace workers' and the dreamer's too) with starting the daemon and
typed helpers added.

Run by: any process that calls the daemon: an agent's ``serve``, the MCP host, the CLI,
scripts using the library. May import: ``common``, ``client`` and, for ``dream``, the
dreamer; never ``broker`` or ``ui`` (it starts them by module name), nor ``workers`` but
for the model cache ``setup`` compiles (pyproject.toml's import contracts).
"""
