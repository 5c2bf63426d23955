"""The broker: routes requests by palace to worker processes and supervises them.

Run by: the daemon process (``python -m trusty_memory.broker``), one per home.
May import: ``common``. It never touches SQLite or vectors, so never ``workers``; it
starts clients' processes (the MCP host, the dreamer) by module name, not by import.
"""
