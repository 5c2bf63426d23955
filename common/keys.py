"""CURVE keys: the daemon's identity, this home's client identity, and who may come in.

A daemon that listens on ``tcp://`` authenticates every peer with ZeroMQ's CURVE (see
``transport.py``). The keys live in ``<home>/keys/`` (0700), in the format pyzmq's
``zmq.auth.create_certificates`` writes:

* ``server.key`` + ``server.key_secret`` - the daemon's key pair; clients name its public
  key (``--server-key``) and so know they reach this daemon and no other.
* ``client.key`` + ``client.key_secret`` - this home's own key pair, used when it is a
  client of another daemon or runs a remote palace worker.
* ``clients/NAME.key`` - the public keys allowed in. ``revoke`` moves one to
  ``revoked/NAME.key``: the daemon checks the folder at every connection attempt, so a
  revoked key is refused from the next one on, without a restart, and within a second
  on the connections it already holds (each request then gets an error naming the
  revocation).

Containers mount secrets read-only elsewhere, so three environment variables override
those places: ``TRUSTY_MEMORY_SERVER_SECRET_FILE`` and ``TRUSTY_MEMORY_CLIENT_SECRET_FILE``
(``.key_secret`` files) and ``TRUSTY_MEMORY_CLIENT_KEYS_DIR`` (a folder of allowed public
keys; a Kubernetes secret mount, one file per key holding the certificate or the bare
Z85 key, works as it is).
"""

from __future__ import annotations

import functools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from trusty_memory.common import protocol as p

KEYS_DIR = "keys"
SERVER = "server"
CLIENT = "client"
SERVER_SECRET_ENV = "TRUSTY_MEMORY_SERVER_SECRET_FILE"
CLIENT_SECRET_ENV = "TRUSTY_MEMORY_CLIENT_SECRET_FILE"
CLIENT_KEYS_ENV = "TRUSTY_MEMORY_CLIENT_KEYS_DIR"

Z85_KEY_LEN = 40  # a 32-byte key in Z85
_Z85 = re.compile(r"[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class KeyPair:
    public: bytes  # Z85
    secret: bytes  # Z85
    path: Path  # the ``.key_secret`` file it came from


def _error(message: str) -> p.TrustyError:
    return p.TrustyError(p.ErrorCode.INVALID_PARAMS, message)


def _writing(fn):
    """A file system error while changing keys (a read-only secret mount, a full disk)
    as one clear error, not a traceback."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OSError as exc:
            where = f" {exc.filename}" if exc.filename else ""
            raise _error(f"keys: cannot write{where}: {exc.strerror or exc}") from None

    return wrapped


def keys_dir(home: Path) -> Path:
    return home / KEYS_DIR


def clients_dir(home: Path) -> Path:
    """The folder of allowed public keys (``TRUSTY_MEMORY_CLIENT_KEYS_DIR`` overrides)."""
    explicit = os.environ.get(CLIENT_KEYS_ENV)
    return Path(explicit) if explicit else keys_dir(home) / "clients"


def revoked_dir(home: Path) -> Path:
    return keys_dir(home) / "revoked"


def check_public_key(text: str | bytes) -> bytes:
    """A Z85 public key as bytes, or an error that says what is wrong with it."""
    key = text.decode("ascii", "replace") if isinstance(text, bytes) else text
    key = key.strip()
    if len(key) != Z85_KEY_LEN or not _Z85.fullmatch(key):
        raise _error(
            f"not a CURVE public key: {key[:60]!r} (want {Z85_KEY_LEN} Z85 characters,"
            " as `trusty-memory keys show` prints them)"
        )
    return key.encode("ascii")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise _error(
            f"bad key name: {name!r} (letters, digits, '.', '_' and '-', not first; up to 64)"
        )
    return name


def _private_dir(path: Path) -> None:
    path.mkdir(mode=stat.S_IRWXU, parents=True, exist_ok=True)
    os.chmod(path, stat.S_IRWXU)


@_writing
def init(home: Path) -> dict:
    """Create the server and client key pairs that are missing; the public keys (Z85)."""
    import zmq.auth

    directory = keys_dir(home)
    _private_dir(directory)
    _private_dir(directory / "clients")
    created = []
    for name in (SERVER, CLIENT):
        if not (directory / f"{name}.key_secret").exists():
            zmq.auth.create_certificates(directory, name)
            created.append(name)
        for suffix in (".key", ".key_secret"):  # the home is private, public keys too
            os.chmod(directory / f"{name}{suffix}", 0o600)
    return {
        "server": _read_public(directory / f"{SERVER}.key").decode(),
        "client": _read_public(directory / f"{CLIENT}.key").decode(),
        "created": created,
        "directory": str(directory),
    }


def _load_pair(path: Path, what: str) -> KeyPair:
    import zmq.auth

    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise _error(f"cannot read the {what} key {path}: {exc}") from None
    if not secret:
        raise _error(f"{path} holds no secret key (a .key_secret file is needed)")
    return KeyPair(public, secret, path)


def server_pair(home: Path) -> KeyPair:
    """The daemon's key pair; missing, an error that says how to make one."""
    path = Path(os.environ.get(SERVER_SECRET_ENV) or keys_dir(home) / f"{SERVER}.key_secret")
    if not path.exists():
        raise _error(f"no server key at {path}: run `trusty-memory keys init` first")
    return _load_pair(path, "server")


def client_pair(home: Path) -> KeyPair:
    """The key pair this home signs in to a daemon with."""
    path = Path(os.environ.get(CLIENT_SECRET_ENV) or keys_dir(home) / f"{CLIENT}.key_secret")
    if not path.exists():
        raise _error(f"no client key at {path}: run `trusty-memory keys init` first")
    return _load_pair(path, "client")


def _read_public(path: Path) -> bytes:
    """The public key of a certificate file, or of a file holding just the Z85 key."""
    import zmq.auth

    try:
        public, _ = zmq.auth.load_certificate(path)
        return check_public_key(public)
    except (ValueError, p.TrustyError):
        return check_public_key(path.read_text())


@_writing
def add(home: Path, name: str, public_key: str) -> dict:
    """Allow ``public_key`` in under ``name`` (replacing a key of that name)."""
    check_name(name)
    key = check_public_key(public_key)
    directory = clients_dir(home)
    _private_dir(directory)
    path = directory / f"{name}.key"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(
        "#   trusty-memory: a client allowed in\n"
        f'#   name: {name}\n\nmetadata\ncurve\n    public-key = "{key.decode()}"\n'
    )
    os.replace(tmp, path)
    (revoked_dir(home) / f"{name}.key").unlink(missing_ok=True)
    return {"name": name, "key": key.decode(), "status": "allowed", "path": str(path)}


@_writing
def revoke(home: Path, name: str) -> dict:
    """Move ``name``'s key to ``revoked/``: refused from the next connection on, and on
    the connections already open from the daemon's next look at the folder
    (``transport.SessionCheck``)."""
    check_name(name)
    path = clients_dir(home) / f"{name}.key"
    if not path.exists():
        raise p.TrustyError(p.ErrorCode.INVALID_PARAMS, f"no allowed key named {name}")
    _private_dir(revoked_dir(home))
    target = revoked_dir(home) / f"{name}.key"
    os.replace(path, target)
    return {"name": name, "status": "revoked", "path": str(target)}


def _key_files(directory: Path) -> list[Path]:
    """Key files in a folder; a Kubernetes secret mount's ``..data`` links are skipped."""
    if not directory.is_dir():
        return []
    return sorted(
        f for f in directory.iterdir() if not f.name.startswith(".") and f.is_file()
        and not f.name.endswith((".key_secret", ".tmp"))
    )  # fmt: skip


def folder_signature(directory: Path) -> tuple:
    """What changes when a key file in ``directory`` is added, removed, replaced or
    rewritten (names, inodes, times and sizes; symbolic links followed, as a Kubernetes
    secret mount swaps them): the daemon reads the keys again only when it differs.
    OSError when the folder exists but cannot be listed."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    signature: list[tuple[str, int | None, int | None, int | None]] = []
    for entry in sorted(entries, key=lambda e: e.name):
        try:
            st = entry.stat()
            signature.append((entry.name, st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            signature.append((entry.name, None, None, None))
    return tuple(signature)


def listed(home: Path) -> list[dict]:
    """Every allowed and revoked key, by name; unreadable files say why."""
    rows: list[dict[str, str | None]] = []
    for status, directory in (("allowed", clients_dir(home)), ("revoked", revoked_dir(home))):
        for path in _key_files(directory):
            name = path.name.removesuffix(".key")
            try:
                rows.append({"name": name, "key": _read_public(path).decode(), "status": status})
            except (OSError, p.TrustyError) as exc:
                error = getattr(exc, "message", str(exc))
                rows.append({"name": name, "key": None, "status": "unreadable", "error": error})
    return rows


def allowed_keys(home: Path) -> dict[bytes, str]:
    """Allowed public key -> its name, read from the folder now (what the daemon asks at
    each connection attempt, so adding and revoking need no restart)."""
    keys: dict[bytes, str] = {}
    for path in _key_files(clients_dir(home)):
        try:
            keys[_read_public(path)] = path.name.removesuffix(".key")
        except (OSError, p.TrustyError):
            continue  # `keys list` names it as unreadable
    return keys


def show(home: Path) -> dict:
    """This home's public keys (None where a pair does not exist)."""
    out: dict[str, str | None] = {}
    for name, loader in ((SERVER, server_pair), (CLIENT, client_pair)):
        try:
            out[name] = loader(home).public.decode()
        except p.TrustyError:
            out[name] = None
    return out
