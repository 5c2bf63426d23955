"""The credential detector and redactor (``common/credentials``), and scrub on a real store.

Every credential here is random, made in its provider's format at test time; none is live.
The store test uses the unit tests' deterministic pseudo-embedder (``fake_embed``), named as
such: no model, so it checks where vectors and text go, not what they mean.

Covers: common/credentials/detector.py common/credentials/rules.py common/credentials/shipped.py
    common/credentials/markers.py common/credentials/redactor.py workers/scrub.py
    bench/secrets_data.py
"""

from __future__ import annotations

import json
import os
import random
import stat
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import secrets_data
from bench.secret_detection import quality
from tests.unit.test_store import SETTINGS, fake_embed
from trusty_memory.common import protocol as p
from trusty_memory.common.config import load_config
from trusty_memory.common.credentials import detector, markers, rules, shipped
from trusty_memory.common.credentials import redactor as r
from trusty_memory.common.messages import (
    ImportDrawer,
    ImportParams,
    ImportTriple,
    ScrubParams,
    UpdateParams,
)
from trusty_memory.workers import scrub as palace_scrub
from trusty_memory.workers.store import bulk
from trusty_memory.workers.store import edit as store_edit
from trusty_memory.workers.store.write import PalaceStore

ROOT = Path(__file__).resolve().parents[2]
RNG = random.Random(31)
ALNUM = string.ascii_letters + string.digits


def rand(alphabet: str, n: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


AWS = "AKIA" + rand(string.ascii_uppercase + "234567", 16)
PASSWORD = rand(ALNUM, 14) + "7"
GITHUB = "ghp_" + rand(ALNUM, 36)


def kinds(text: str) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in detector.find(text)]


# -- formats ---------------------------------------------------------------------------------

FORMATS = [
    (f"export AWS_ACCESS_KEY_ID={AWS}", "aws-access-key", AWS),
    (f"aws_secret_access_key = {(s := rand(ALNUM + '/+', 40))}", "aws-secret-key", s),
    (f"key={(s := 'AIza' + rand(ALNUM + '-_', 35))}", "gcp-api-key", s),
    (f"AccountKey={(s := rand(ALNUM + '+/', 86) + '==')};", "azure-storage-key", s),
    (f"git clone https://{GITHUB}@github.com/acme/api.git", "github-token", GITHUB),
    (f"token {(s := 'glpat-' + rand(ALNUM, 20))} for CI", "gitlab-token", s),
    (
        f"SLACK_BOT_TOKEN={(s := 'xoxb-12345678901-123456789012-' + rand(ALNUM, 24))}",
        "slack-token",
        s,
    ),
    (f"STRIPE_KEY={(s := 'sk_live_' + rand(ALNUM, 99))}", "stripe-key", s),
    (f"//registry.npmjs.org/:_authToken={(s := 'npm_' + rand(ALNUM, 36))}", "npm-token", s),
    (f"twine -p {(s := 'pypi-AgEIcHlwaS5vcmc' + rand(ALNUM, 80))}", "pypi-token", s),
    (f"postgresql://app:{PASSWORD}@db.internal:5432/app", "url-password", PASSWORD),
    (f"DB_PASSWORD={PASSWORD}", "password", PASSWORD),
    (f'{{"client_secret": "{(s := rand(ALNUM, 32))}"}}', "secret", s),
    (f"hmac_salt = {(s := rand('0123456789abcdef', 64))}", "high-entropy", s),
    (f"the staging password is {PASSWORD}.", "password", PASSWORD),
]


@pytest.mark.parametrize(("text", "kind", "secret"), FORMATS, ids=[f[1] for f in FORMATS])
def test_each_format_is_found_whole(text, kind, secret):
    found = detector.find(text)
    assert [(f.kind, text[f.start : f.end]) for f in found] == [(kind, secret)]


def test_a_private_key_block_is_found_from_begin_to_end():
    body = "\n".join(rand(ALNUM + "+/", 64) for _ in range(4))
    block = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    text = f"the leaked key:\n{block}\nrevoked it."
    assert kinds(text) == [("private-key", block)]
    cut = f"log: -----BEGIN OPENSSH PRIVATE KEY-----\n{body}"  # a log cut the END line off
    assert kinds(cut) == [("private-key", cut[5:])]


NEAR_MISSES = [
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed the retry",
    "request_id=550e8400-e29b-41d4-a716-446655440000 failed with 502",
    '"integrity": "sha512-' + "Q" * 10 + rand(ALNUM + "+/", 76) + '=="',
    "<img src='data:image/png;base64," + rand(ALNUM + "+/", 120) + "'>",
    "AKIAIOSFODNN7EXAMPLE is the example key in the AWS docs",
    "GITHUB_TOKEN=ghp_" + "x" * 36 + " (placeholder)",
    "DB_PASSWORD=${DB_PASSWORD}\ntoken: <your-token>\npassword: ********",
    "api_key = os.environ['API_KEY']\nsecret_key = SECRET_KEY\ntoken = accessToken",
    "max_tokens=4096, token_type: bearer, password_min_length=12",
    "cache_key = 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "getUserProfileCacheInvalidationHandlerFactoryV2 retries 3 times",
    'FATAL: password authentication failed for user "app"',
    "psql postgresql://app@db.internal:5432/orders",
    "env:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_kept(text):
    assert detector.find(text) == []


def test_a_secret_found_by_two_rules_is_one_span():
    text = f"export GITHUB_TOKEN={GITHUB}"
    assert kinds(text) == [("github-token", GITHUB)]


def test_a_triple_object_is_read_as_the_value_of_its_predicate():
    red = r.Redactor(b"k" * 32)
    assert red.redact(PASSWORD, "password").count == 1
    assert red.redact(PASSWORD).count == 0  # alone, a random word is no credential
    assert red.redact("2.4.1", "deployed_version").count == 0


# -- markers and the key ---------------------------------------------------------------------


def test_the_shipped_patterns_are_what_detect_secrets_ships():
    """``shipped.py`` is detect-secrets' denylists as the installed version has them; on a
    mismatch the message is the table to paste there."""
    import importlib
    import re

    wanted = {}
    for ref in shipped.PATTERNS:
        module, cls = ref.rsplit(".", 1)
        plugin = importlib.import_module(f"detect_secrets.plugins.{module}")
        wanted[ref] = tuple(
            (pattern.pattern, pattern.flags & ~re.UNICODE)
            for pattern in getattr(plugin, cls).denylist
        )
    assert wanted == shipped.PATTERNS, "\n".join(f"{k!r}: {v!r}," for k, v in wanted.items())
    named = {r.plugin.split("[")[0] for r in rules.TOKENS if r.plugin}
    assert named == set(shipped.PATTERNS)


def test_a_worker_never_imports_detect_secrets_or_an_http_stack():
    """The detector, warmed as the worker template warms it, pulls in neither the library
    nor ``requests``: about 200 modules that cost every forked worker memory."""
    code = (
        "import sys\n"
        "from trusty_memory.common.credentials import detector\n"
        "import trusty_memory.workers.palace_process\n"
        "detector.warm()\n"
        "assert detector.find('token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('detect_secrets', 'requests', 'urllib3', 'http', 'email', 'multiprocessing')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("token", "valid"),
    [
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", True),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0", True),  # no signature part
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.", True),  # its dot kept
        ("eyJhbGciOiJIUzI1NiJ9", False),  # one part
        ("eyJub3QganNvbg.eyJzdWIiOiIxIn0.c2ln", False),  # header not JSON
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcde", False),  # a length base64 never has
    ],
)
def test_a_jwt_is_recognised_by_its_form(token, valid):
    from detect_secrets.plugins.jwt import JwtTokenDetector

    assert detector._jwt(token) is valid
    stripped = token.rstrip(".")
    assert (len(stripped.split(".")) >= 2 and JwtTokenDetector.is_formally_valid(stripped)) is valid


def test_redaction_replaces_each_secret_by_a_keyed_marker_and_is_idempotent():
    red = r.Redactor(b"k" * 32)
    text = f"creds: {AWS} and postgresql://app:{PASSWORD}@db:5432/app"
    done = red.redact(text)
    assert AWS not in done.text and PASSWORD not in done.text
    assert done.count == 2 and markers.count(done.text) == 2
    assert [kind for _, kind in markers.split(done.text) if kind] == [
        "aws-access-key",
        "url-password",
    ]
    assert red.redact(done.text).text == done.text  # a marker is never taken for a secret
    # The same secret gives the same marker; another home's key another fingerprint.
    marker = markers.marker("aws-access-key", red.fingerprint(AWS))
    assert red.redact(f"again {AWS}").text == f"again {marker}"
    assert r.Redactor(b"j" * 32).fingerprint(AWS) != red.fingerprint(AWS)


def test_refusal_says_what_and_where_but_never_the_secret():
    text = f"line one\nkey {AWS} here"
    found = detector.find(text)
    message = r.where(text, found)
    assert message == "aws-access-key at characters 14-33 (line 2)"
    assert AWS not in message


def test_the_home_key_is_made_once_private_and_kept(tmp_path):
    key = r.home_key(tmp_path)
    path = tmp_path / r.KEY_FILE
    assert len(key) == r.KEY_BYTES and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert r.home_key(tmp_path) == key
    path.write_text("not a key\n")
    with pytest.raises(p.TrustyError, match="is not a redaction key"):
        r.home_key(tmp_path)


def test_processes_starting_at_once_agree_on_one_key(tmp_path):
    code = (
        "import sys; from pathlib import Path;"
        "from trusty_memory.common.credentials.redactor import home_key;"
        "print(home_key(Path(sys.argv[1])).hex())"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE)
        for _ in range(4)
    ]
    keys = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert len(keys) == 1 and keys.pop().decode() == r.home_key(tmp_path).hex()


def test_the_privacy_mode_is_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(tmp_path))
    assert load_config().privacy.secrets == "redact"
    monkeypatch.setenv("TRUSTY_MEMORY_PRIVACY_SECRETS", "Refuse")
    assert load_config().privacy.secrets == "refuse"
    monkeypatch.setenv("TRUSTY_MEMORY_PRIVACY_SECRETS", "hide")
    with pytest.raises(ValueError, match="unknown mode 'hide'; choose redact, refuse, keep"):
        load_config()


# -- the labelled set ------------------------------------------------------------------------


def test_the_labelled_set_is_what_its_generator_writes():
    data = json.loads((ROOT / "bench" / "data" / "secrets_labelled.json").read_text())
    assert data == secrets_data.build()
    assert len(data["texts"]) >= 400


def test_precision_and_recall_per_kind_on_the_labelled_set():
    data = json.loads((ROOT / "bench" / "data" / "secrets_labelled.json").read_text())
    figures = quality(data["texts"], show=False)
    assert figures["precision_all"] >= 0.99
    assert all(value >= 0.99 for value in figures["precision"].values()), figures["precision"]
    assert all(value >= 0.95 for value in figures["recall"].values()), figures["recall"]


# -- scrub, on a store ------------------------------------------------------------------------


def embed(texts: list[str]) -> np.ndarray:
    return np.stack([fake_embed(t) for t in texts])


def test_scrub_leaves_no_copy_in_any_file_of_the_palace(tmp_path):
    """A palace written in clear (as ``keep`` and older versions did): drawers, context
    words, an update's archived version, a triple. Scrub redacts them all, re-embeds what
    changed, and no file under the palace holds the secrets, in any case."""
    palace_dir = tmp_path / "palaces" / "proj"
    store = PalaceStore.open(palace_dir, "proj", SETTINGS)
    url = f"postgresql://app:{PASSWORD}@db.internal:5432/app"
    drawers = [
        ImportDrawer(
            drawer_id="11111111-1111-4111-8111-111111111111",
            content=f"staging creds {AWS} and {url}",
            room="Backend",
        ),
        ImportDrawer(
            drawer_id="22222222-2222-4222-8222-222222222222",
            content="Follow-up: rotated them after the demo",
            room="Backend",
            context=f"staging creds {AWS} and postgresql app {PASSWORD} db",
        ),
    ]
    triples = [
        ImportTriple(
            subject="db", predicate="password", object=PASSWORD, valid_from="2026-01-05T09:00:00Z"
        ),
    ]
    bulk.import_batch(store, ImportParams(drawers=drawers, triples=triples), embed)
    store_edit.update_drawer(
        store,
        UpdateParams(drawer_id=drawers[0].drawer_id, text=f"moved to vault; old key {AWS}"),
        embed,
    )
    store.maybe_snapshot(force=True)
    red = r.Redactor(b"k" * 32)
    dry, store = palace_scrub.scrub(store, red, ScrubParams(), embed, reopen=lambda: None)
    assert not dry.applied and dry.found == {"aws-access-key": 3, "password": 1, "url-password": 1}
    assert (dry.drawers, dry.archived, dry.triples) == (2, 1, 1)

    def reopen():
        return PalaceStore.open(palace_dir, "proj", SETTINGS)

    done, store = palace_scrub.scrub(store, red, ScrubParams(apply=True), embed, reopen)
    assert done.applied and done.reembedded == 2  # the live drawer and the archived version
    again, store = palace_scrub.scrub(store, red, ScrubParams(), embed, reopen)
    assert again.found == {}
    live = store.get(drawers[0].drawer_id)
    assert live.content.startswith("moved to vault; old key [secret:aws-access-key #")
    vector, own = store.db.conn.execute(
        "SELECT vector, own_vector FROM drawers WHERE id = ?", (live.drawer_id,)
    ).fetchone()
    assert own is None  # its vector is the redacted text's own, mixed with nothing
    assert np.allclose(np.frombuffer(vector, "<f4"), fake_embed(live.content), atol=1e-6)
    assert store.kg_query("db").triples[0].object.startswith("[secret:password #")
    store.close()
    for path in palace_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes().lower()
            for secret in (AWS, PASSWORD):
                assert secret.lower().encode() not in data, (path.name, secret)
    assert not os.path.exists(palace_dir / "palace.sqlite3-wal") or (
        (palace_dir / "palace.sqlite3-wal").stat().st_size == 0
    )
