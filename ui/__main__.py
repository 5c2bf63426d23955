"""``python -m trusty_memory.ui``: the web page's process, what ``trusty-memory ui`` becomes.

The command line parses ``ui``'s flags (for its help and its errors) and hands over with
them, as ``daemon`` hands over to the broker: the page's code (Starlette, Jinja2, the
library's clients) runs in a process of its own, and the command line imports none of it.
"""

from __future__ import annotations

import argparse
import sys

from trusty_memory.ui.server import DEFAULT_PORT, run_ui


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trusty-memory ui")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--allow-remote", action="store_true")
    args = parser.parse_args(argv)
    return run_ui(args.host, args.port, allow_remote=args.allow_remote)


if __name__ == "__main__":
    sys.exit(main())
