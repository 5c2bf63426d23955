"""A labelled set of texts for the credential detector, written as coding agents write notes.

    .venv/bin/python bench/secrets_data.py [--out bench/data/secrets_labelled.json] [--check]
                                           [--seed N]

Deterministic (a fixed seed): the same code always writes the same file, and ``--check``
says whether the committed file is up to date. Every credential is random, made in the
format its provider documents (the sources are in ``common/credentials/rules.py``); none
is, or was ever, a live one. Each text is an ``.env`` excerpt, a shell history, a stack
trace, a config file, a chat-style note or a code snippet, with the credential's span and
kind labelled (``spans``: ``[start, end, kind]``).

Near misses, which must be kept, are texts of their own and sit beside credentials in
others: git SHAs, UUIDs, content hashes, lockfile integrity strings, container digests,
base64 images, documentation's example keys marked as such, long identifiers, masked and
templated values (``${DB_PASSWORD}``, ``<your-token>``), key names with no secret
(``max_tokens``, ``token_type``, ``cache_key``), URLs without a password.

The texts are data (``bench/data/sources/secrets_labelled.json``, their templates with
holes for the values); this file draws the values and labels the spans.

``bench/secret_detection.py`` measures the detector on it (precision and recall per kind).
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import string
import sys
from collections.abc import Callable
from pathlib import Path

SEED = 20261126
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "secrets_labelled.json"
PER_KIND = 22  # texts per credential kind
NEAR_MISSES = 170  # texts with no credential

ALNUM = string.ascii_letters + string.digits
UPPER32 = string.ascii_uppercase + "234567"  # AWS key ids are base32
B64 = string.ascii_letters + string.digits + "+/"
B64URL = string.ascii_letters + string.digits + "-_"
HEX = "0123456789abcdef"
LOWER_DIGITS = string.ascii_lowercase + string.digits

Part = str | tuple[str, str]  # plain text, or (kind, secret)


class Gen:
    """Random values in documented formats, from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def s(self, alphabet: str, n: int) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def pick(self, items):
        return self.r.choice(items)

    # -- credentials ---------------------------------------------------------------------
    def aws_access_key(self) -> str:
        return self.pick(["AKIA", "AKIA", "ASIA"]) + self.s(UPPER32, 16)

    def aws_secret_key(self) -> str:
        return self.s(B64, 40)

    def gcp_api_key(self) -> str:
        return "AIza" + self.s(ALNUM + "-_", 35)

    def azure_storage_key(self) -> str:
        return base64.b64encode(self.r.randbytes(64)).decode()

    def azure_client_secret(self) -> str:
        return self.s(ALNUM, 3) + str(self.r.randint(0, 9)) + "Q~" + self.s(ALNUM + "_~.-", 34)

    def github_token(self) -> str:
        if self.r.random() < 0.25:
            return "github_pat_" + self.s(ALNUM, 22) + "_" + self.s(ALNUM, 59)
        return self.pick(["ghp_", "gho_", "ghs_", "ghu_", "ghr_"]) + self.s(ALNUM, 36)

    def gitlab_token(self) -> str:
        return self.pick(["glpat-", "glpat-", "gldt-", "glrt-"]) + self.s(ALNUM + "_-", 20)

    def slack_token(self) -> str:
        kind = self.pick(["xoxb", "xoxp", "xoxa", "xoxs"])
        a, b = self.s(string.digits, 11), self.s(string.digits, 12)
        if kind == "xoxp":
            return f"xoxp-{a}-{b}-{self.s(string.digits, 13)}-{self.s(HEX, 32)}"
        return f"{kind}-{a}-{b}-{self.s(ALNUM, 24)}"

    def slack_webhook(self) -> str:
        t = "T" + self.s(string.ascii_uppercase + string.digits, 10)
        b = "B" + self.s(string.ascii_uppercase + string.digits, 10)
        return f"https://hooks.slack.com/services/{t}/{b}/{self.s(ALNUM, 24)}"

    def stripe_key(self) -> str:
        prefix = self.pick(["sk_live_", "rk_live_", "sk_test_", "sk_live_51"])
        return prefix + self.s(ALNUM, self.pick([24, 32, 99]))

    def npm_token(self) -> str:
        return "npm_" + self.s(ALNUM, 36)

    def pypi_token(self) -> str:
        return "pypi-AgEIcHlwaS5vcmc" + self.s(B64URL, self.r.randint(70, 160))

    def private_key(self, escaped: bool = False, cut: bool = False) -> str:
        label = self.pick(
            ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"]
        )
        nl = "\\n" if escaped else "\n"
        lines = [self.s(B64, 64) for _ in range(self.r.randint(3, 8))]
        body = nl.join(lines) + nl + self.s(B64, self.r.randint(10, 60)) + "=="
        block = f"-----BEGIN {label}-----{nl}{body}"
        return block if cut else f"{block}{nl}-----END {label}-----"

    def jwt(self) -> str:
        def b64(obj) -> str:
            raw = json.dumps(obj, separators=(",", ":")).encode()
            return base64.urlsafe_b64encode(raw).decode().rstrip("=")

        header = {"alg": self.pick(["HS256", "RS256", "ES256"]), "typ": "JWT"}
        claims = {
            "sub": self.s(string.digits, 8),
            "iat": self.r.randint(1_600_000_000, 1_800_000_000),
            "role": self.pick(["admin", "service", "reader"]),
        }
        sig = self.s(B64URL, self.pick([43, 86]))
        return f"{b64(header)}.{b64(claims)}.{sig}"

    def password(self) -> str:
        n = self.r.randint(10, 22)
        chars = [self.r.choice(ALNUM) for _ in range(n)]
        for _ in range(self.r.randint(0, 2)):
            chars[self.r.randrange(n)] = self.r.choice("!*$-_.~^")
        chars[self.r.randrange(n)] = self.r.choice(string.digits)
        return "".join(chars)

    def url_password(self) -> str:
        pw = self.password()
        return pw.replace("$", "%24") if self.r.random() < 0.5 else pw

    def token_value(self) -> str:
        return self.pick(
            [
                self.s(ALNUM, 32),
                self.s(HEX, 40),
                self.s(ALNUM + "-_", 48),
                "tok_" + self.s(ALNUM, 28),
            ]
        )

    def entropy_value(self) -> str:
        return self.pick(
            [
                self.s(HEX, 64),
                base64.b64encode(self.r.randbytes(32)).decode(),
                self.s(ALNUM, 40),
                self.s(HEX, 32),
            ]
        )

    # -- near misses ---------------------------------------------------------------------
    def sha(self, n: int = 40) -> str:
        return self.s(HEX, n)

    def uuid(self) -> str:
        h = self.s(HEX, 32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def integrity(self) -> str:
        return "sha512-" + base64.b64encode(self.r.randbytes(64)).decode()

    def image(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.r.randbytes(90)).decode()

    def identifier(self) -> str:
        words = [
            "user",
            "profile",
            "cache",
            "invalidate",
            "handler",
            "request",
            "retry",
            "policy",
            "billing",
            "ledger",
            "snapshot",
            "index",
            "rebuild",
            "worker",
            "queue",
            "timeout",
            "session",
            "manager",
            "factory",
            "token",
            "counter",
        ]
        chosen = [self.pick(words) for _ in range(self.r.randint(3, 6))]
        style = self.pick(["snake", "camel", "kebab"])
        if style == "snake":
            return "_".join(chosen)
        if style == "kebab":
            return "-".join(chosen)
        return chosen[0] + "".join(w.title() for w in chosen[1:])


# The authored texts, as data: ``services`` and ``hosts`` the texts pick from (a real
# password at a documentation domain, db.example.com, is still a password), and the
# templates of each credential kind (``credentials``) and of the near misses. A template
# is its text, or a list of text parts and labelled parts (``{"kind", "value"}``: the span
# is labelled with that kind). In both, «name args» is a value drawn from the generator,
# in reading order: a Gen method («password», «sha 7», «private_key escaped»), «service»,
# «host», «s ALPHABET n» (n characters of an alphabet named below), «int lo hi» and
# «base64 n» (n random bytes, base64-encoded).
SOURCE = Path(__file__).resolve().parent / "data" / "sources" / "secrets_labelled.json"
_AUTHORED = json.loads(SOURCE.read_text(encoding="utf-8"))
SERVICES: list[str] = _AUTHORED["services"]
HOSTS: list[str] = _AUTHORED["hosts"]

ALPHABETS = {
    "ALNUM": ALNUM,
    "ALNUM-_": ALNUM + "-_",
    "UPPER32": UPPER32,
    "B64": B64,
    "B64URL": B64URL,
    "HEX": HEX,
    "LOWER_DIGITS": LOWER_DIGITS,
}
HOLE = re.compile("«([^«»]+)»")

# Each template takes the generator and returns the text's parts.
Template = Callable[[Gen], list[Part]]


def _service(g: Gen) -> str:
    return g.pick(SERVICES)


def _value(g: Gen, spec: str) -> str:
    """The value of one «name args» hole."""
    name, *args = spec.split()
    if name == "service":
        return _service(g)
    if name == "host":
        return g.pick(HOSTS)
    if name == "s":
        return g.s(ALPHABETS[args[0]], int(args[1]))
    if name == "int":
        return str(g.r.randint(int(args[0]), int(args[1])))
    if name == "base64":
        return base64.b64encode(g.r.randbytes(int(args[0]))).decode()
    if name == "private_key" and args == ["encrypted"]:
        return g.private_key().replace(" PRIVATE KEY", " ENCRYPTED PRIVATE KEY")
    if name == "private_key":
        return g.private_key(**dict.fromkeys(args, True))
    if name == "sha":
        return g.sha(*map(int, args))
    if name.startswith("_") or not callable(getattr(Gen, name, None)) or args:
        raise ValueError(f"{SOURCE.name}: no value «{spec}»")
    return getattr(g, name)()


def _fill(g: Gen, text: str) -> str:
    return HOLE.sub(lambda m: _value(g, m.group(1)), text)


def _template(authored: str | list) -> Template:
    parts = [authored] if isinstance(authored, str) else authored

    def make(g: Gen) -> list[Part]:
        return [
            _fill(g, p) if isinstance(p, str) else (p["kind"], _fill(g, p["value"])) for p in parts
        ]

    return make


POSITIVE: dict[str, list[Template]] = {
    kind: [_template(t) for t in templates] for kind, templates in _AUTHORED["credentials"].items()
}
NEGATIVE: list[Template] = [_template(t) for t in _AUTHORED["near_misses"]]


def _text(parts: list[Part]) -> tuple[str, list[list]]:
    out, spans, at = [], [], 0
    for part in parts:
        if isinstance(part, tuple):
            kind, value = part
            spans.append([at, at + len(value), kind])
            part = value
        out.append(part)
        at += len(part)
    return "".join(out), spans


def build(seed: int = SEED) -> dict:
    g = Gen(random.Random(seed))
    items = []
    for kind, templates in POSITIVE.items():
        for i in range(PER_KIND):
            text, spans = _text(templates[i % len(templates)](g))
            items.append({"id": f"{kind}-{i:02d}", "text": text, "spans": spans})
    for i in range(NEAR_MISSES):
        text, spans = _text(NEGATIVE[i % len(NEGATIVE)](g))
        items.append({"id": f"near-miss-{i:03d}", "text": text, "spans": spans})
    g.r.shuffle(items)
    kinds = sorted({s[2] for item in items for s in item["spans"]})
    return {
        "about": "Labelled credential spans in agent-style notes; see bench/secrets_data.py",
        "seed": seed,
        "kinds": kinds,
        "texts": items,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--check", action="store_true", help="is the file up to date?")
    args = parser.parse_args(argv)
    data = json.dumps(build(args.seed), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != data:
            print(f"{args.out} is out of date: run bench/secrets_data.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(data)
    count = len(json.loads(data)["texts"])
    print(f"wrote {count} texts to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
