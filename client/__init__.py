"""Clients of the broker: the Python client library, the CLI's calls and the MCP front end."""
