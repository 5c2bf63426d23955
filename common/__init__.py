"""trusty-memory: a local memory daemon for coding agents.

The package is assembled from the repository's actor folders (see ``pyproject.toml``):
``trusty_memory`` itself holds what every actor shares (the wire protocol, names, config,
logging, the CLI); ``.broker``, ``.workers``, ``.client`` (and ``.dreamer``) hold one kind
of process each.
"""

__version__ = "0.2.0"  # pyproject.toml reads it from here
