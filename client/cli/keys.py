"""``trusty-memory keys``: the CURVE key pairs of this home and the client keys it lets in
(``common/keys.py`` does the work; a daemon on ``tcp://`` reads them)."""

from __future__ import annotations

from trusty_memory.client.cli.output import output
from trusty_memory.client.cli.parser import actions, command
from trusty_memory.common.config import load_config
from trusty_memory.common.protocol import ErrorCode, TrustyError


def _home():
    return load_config().home


def cmd_keys_init(args) -> int:
    from trusty_memory.common import keys  # lazy: the keys verbs only

    data = keys.init(_home())
    made = ", ".join(data["created"]) or "none (both existed)"
    text = (
        f"keys in {data['directory']} (created: {made})\n"
        f"server public key: {data['server']}\n"
        f"client public key: {data['client']}"
    )
    output(args, data, text)
    return 0


def cmd_keys_show(args) -> int:
    from trusty_memory.common import keys  # lazy: the keys verbs only

    data = keys.show(_home())
    only = "server" if args.server else "client" if args.client else None
    if only is not None:
        if data[only] is None:
            raise TrustyError(
                ErrorCode.INVALID_PARAMS, f"no {only} key: run `trusty-memory keys init` first"
            )
        output(args, {only: data[only]}, data[only])
        return 0
    text = "\n".join(
        f"{name} public key: {key or '(none: keys init)'}" for name, key in data.items()
    )
    output(args, data, text)
    return 0


def cmd_keys_add(args) -> int:
    from trusty_memory.common import keys  # lazy: the keys verbs only

    data = keys.add(_home(), args.name, args.public_key)
    output(args, data, f"allowed {data['name']} ({data['key']})")
    return 0


def cmd_keys_list(args) -> int:
    from trusty_memory.common import keys  # lazy: the keys verbs only

    rows = keys.listed(_home())
    lines = [f"{r['status']:<10} {r['name']:<24} {r['key'] or r.get('error')}" for r in rows]
    output(args, {"keys": rows}, "\n".join(lines) or "(no client keys)")
    return 0


def cmd_keys_revoke(args) -> int:
    from trusty_memory.common import keys  # lazy: the keys verbs only

    data = keys.revoke(_home(), args.name)
    text = (
        f"revoked {data['name']}: new connections refused at once; a running daemon refuses"
        " the requests of its open ones within a second"
    )
    output(args, data, text)
    return 0


def register(sub) -> None:
    keys = actions(sub, "keys", "CURVE keys for a daemon on tcp, and who may connect")
    command(keys, "init", cmd_keys_init, "create this home's server and client key pairs")
    s = command(keys, "show", cmd_keys_show, "this home's public keys")
    which = s.add_mutually_exclusive_group()
    which.add_argument("--server", action="store_true", help="print only the server key")
    which.add_argument("--client", action="store_true", help="print only the client key")
    s = command(keys, "add", cmd_keys_add, "allow a client's public key in")
    s.add_argument("name", help="who it is (letters, digits, '.', '_', '-')")
    s.add_argument("public_key", help="its public key (`keys show --client` on its host)")
    command(keys, "list", cmd_keys_list, "allowed and revoked client keys")
    s = command(keys, "revoke", cmd_keys_revoke, "refuse a client's key from now on")
    s.add_argument("name", help="the name it was added under")
