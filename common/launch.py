"""The command line of every process the project starts: an interpreter that cannot import
the caller's files.

Agent hosts start ``trusty-memory serve`` in the project the agent works on, and every
process started from there inherits that folder as its working directory. ``python -m``
puts the working directory first on ``sys.path``, so a ``structlog.py`` or ``numpy.py`` in
an opened repository would be imported by the broker, the MCP host, the template and the
embedder instead of the library: foreign code inside the processes that hold every
palace. ``-P`` (Python 3.11+) leaves the working directory off ``sys.path`` while keeping
``PYTHONPATH`` and site-packages, which a user may rely on (``-I`` would drop both).
"""

from __future__ import annotations

import sys

SAFE_PATH = "-P"  # never the working directory (or a script's folder) first on sys.path


def module_command(module: str, *args: str) -> list[str]:
    """``python -P -m module args...`` with this interpreter."""
    return [sys.executable, SAFE_PATH, "-m", module, *args]


def module_args(argv: list[str]) -> list[str]:
    """The arguments after ``-m module`` in a ``module_command``."""
    return argv[argv.index("-m") + 2 :]
