"""The palaces remote writers serve, remembered across the daemon's restarts.

A palace whose writer registered from another host (``trusty-memory worker``) lives on
that host: its files there are the truth, and the broker starts no local worker for it.
Kept in memory only, that rule ended with the daemon: after a restart, a request that came
before the remote worker reconnected started a local writer on whatever the home held
under that name (an old copy, or a palace created afresh), acknowledged writes into it,
and those writes were stranded there once the remote worker was back. So the set lives in
the home (``remote_palaces.json``, replaced whole and synced on every change), read at
start; until the remote writer reconnects, the palace's requests wait for it (their
deadline answers them, naming the host), ``palace_create`` refuses the name, and nothing
is written here. Only an operator takes a palace off the list (``trusty-memory palace
forget-remote NAME``), and only while no remote writer serves it: local workers then serve
it again from this home's files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from trusty_memory.common import protocol as p
from trusty_memory.common.palace_dir import write_atomic

FILE_NAME = "remote_palaces.json"


class UnreadableList(RuntimeError):
    """The file cannot be read: the daemon must not start without knowing its contents."""


class RemotePalaces:
    """Palace services served by remote writers, by service name (``palace:NAME``), with
    the host each was last served from; every change is on disk before it returns."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._hosts: dict[str, str] = {}  # service -> host
        self._since: dict[str, str] = {}  # service -> when first recorded (RFC 3339)
        if path.exists():
            self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
            entries = data["palaces"]
            for name, entry in entries.items():
                service = p.palace_service(name)
                self._hosts[service] = str(entry["host"])
                self._since[service] = str(entry.get("since", ""))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # Starting with an empty list would let local writers serve remote palaces:
            # refuse to start and say which file to mend.
            raise UnreadableList(
                f"{self.path}: unreadable ({exc!r}); it lists the palaces remote workers"
                " serve: mend it, or remove it if no palace of this home is served remotely"
            ) from exc

    def __contains__(self, service: object) -> bool:
        return service in self._hosts

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._hosts))

    def __len__(self) -> int:
        return len(self._hosts)

    def get(self, service: str) -> str | None:
        """The host a remote writer served ``service`` from, or None."""
        return self._hosts.get(service)

    def refuse_name(self, name: str) -> None:
        """Refuse to make or move a palace to a name a remote writer serves (connected now
        or not): a palace made here under it would be served in its place whenever that
        worker is away."""
        host = self._hosts.get(p.palace_service(name))
        if host is not None:
            raise p.TrustyError(
                p.ErrorCode.PALACE_EXISTS,
                f"palace already exists: {name} (served by a remote worker on {host})",
            )

    def forget_palace(self, name: str, connected: Callable[[str], bool]) -> str:
        """Take palace ``name`` off the list (``palace_forget_remote``) and return the host it
        had. Refused for a palace never served remotely, and while a remote writer serves it
        (``connected(service)``): its files are on that host, and it would register again."""
        service = p.palace_service(name)
        host = self._hosts.get(service)
        if host is None:
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS,
                f"palace_forget_remote: palace {name} is not served by a remote worker",
            )
        if connected(service):
            raise p.TrustyError(
                p.ErrorCode.INVALID_PARAMS,
                f"palace_forget_remote: a remote worker on {host} serves palace {name} now:"
                " stop it first (its files stay on its host)",
            )
        self.forget(service)
        return host

    def record(self, service: str, host: str) -> None:
        """A remote writer registered for ``service`` from ``host``."""
        if self._hosts.get(service) == host:
            return
        self._hosts[service] = host
        self._since.setdefault(service, datetime.now(UTC).isoformat(timespec="seconds"))
        self._save()

    def forget(self, service: str) -> str | None:
        """Take ``service`` off the list; the host it had, or None if it was not on it."""
        host = self._hosts.pop(service, None)
        self._since.pop(service, None)
        if host is not None:
            self._save()
        return host

    def _save(self) -> None:
        palaces = {
            p.palace_of(service): {"host": host, "since": self._since.get(service, "")}
            for service, host in sorted(self._hosts.items())
        }
        write_atomic(self.path, (json.dumps({"palaces": palaces}, indent=2) + "\n").encode())
