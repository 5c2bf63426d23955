"""What every actor shares: the wire protocol, config, the home's layout, names, logs,
keys, the transport and how processes are launched.

Run by: every process of the project. May import: the standard library and the chosen
libraries, never another folder of the project (``pyproject.toml``'s import-linter
contracts check it): every actor can depend on ``common`` because ``common`` depends on
no actor.
"""

__version__ = "0.2.0"  # pyproject.toml reads it from here
