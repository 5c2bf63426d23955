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

``bench/secret_detection.py`` measures the detector on it (precision and recall per kind).
"""

from __future__ import annotations

import argparse
import base64
import json
import random
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


SERVICES = [
    "billing-api",
    "auth-gateway",
    "ledger",
    "search-indexer",
    "notifier",
    "payments",
    "reporting",
    "ingest-worker",
    "admin-ui",
    "scheduler",
]
HOSTS = [
    "db.internal",
    "pg-primary.prod.svc",
    "10.0.3.17",
    "mysql.staging.local",
    "cluster0.x7kq2.mongodb.net",
    "redis-cache",
    "rabbitmq.internal",
    "db.example.com",  # a real password at a documentation domain is still a password
]


# Each template takes the generator and returns the text's parts.
Template = Callable[[Gen], list[Part]]


def _service(g: Gen) -> str:
    return g.pick(SERVICES)


POSITIVE: dict[str, list[Template]] = {
    "aws-access-key": [
        lambda g: [
            f"Found the staging creds for {_service(g)} in .env:\nAWS_ACCESS_KEY_ID=",
            ("aws-access-key", g.aws_access_key()),
            "\nAWS_DEFAULT_REGION=eu-west-1",
        ],
        lambda g: [
            "$ aws configure list\n      access_key     ****************",
            "\n$ export AWS_ACCESS_KEY_ID=",
            ("aws-access-key", g.aws_access_key()),
            "\n$ aws s3 ls s3://backups",
        ],
        lambda g: [
            "botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId)"
            " when calling the PutObject operation: key ",
            ("aws-access-key", g.aws_access_key()),
            " does not exist",
        ],
        lambda g: [
            "Note: the CI user's key is ",
            ("aws-access-key", g.aws_access_key()),
            f"; it only has write access to the {_service(g)} bucket.",
        ],
        lambda g: [
            '$ aws sts assume-role ...\n{"Credentials": {"AccessKeyId": "',
            ("aws-access-key", "ASIA" + g.s(UPPER32, 16)),
            '", "SecretAccessKey": "',
            ("aws-secret-key", g.aws_secret_key()),
            '", "SessionToken": "',
            ("secret", "FwoGZXIvYXdzE" + g.s(B64, 180)),
            '", "Expiration": "2026-03-01T12:00:00Z"}}',
        ],
    ],
    "aws-secret-key": [
        lambda g: [
            "Access key ID,Secret access key\n",
            ("aws-access-key", g.aws_access_key()),
            ",",
            ("aws-secret-key", g.aws_secret_key()),
        ],
        lambda g: [
            "[default]\naws_access_key_id = ",
            ("aws-access-key", g.aws_access_key()),
            "\naws_secret_access_key = ",
            ("aws-secret-key", g.aws_secret_key()),
            "\nregion = us-east-1",
        ],
        lambda g: [
            "Set these in the deploy job:\nAWS_SECRET_ACCESS_KEY=",
            ("aws-secret-key", g.aws_secret_key()),
            "\nAWS_REGION=us-west-2",
        ],
        lambda g: [
            's3 = boto3.client("s3", aws_secret_access_key="',
            ("aws-secret-key", g.aws_secret_key()),
            '", region_name="eu-central-1")',
        ],
    ],
    "gcp-api-key": [
        lambda g: [
            "Maps widget broke because GOOGLE_MAPS_API_KEY=",
            ("gcp-api-key", g.gcp_api_key()),
            " was restricted to the old referrer",
        ],
        lambda g: [
            "curl 'https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key=",
            ("gcp-api-key", g.gcp_api_key()),
            "' returned REQUEST_DENIED",
        ],
        lambda g: [
            'firebaseConfig = { apiKey: "',
            ("gcp-api-key", g.gcp_api_key()),
            '", authDomain: "demo-app.firebaseapp.com" }',
        ],
    ],
    "private-key": [
        lambda g: [
            "openssl pkcs8 output:\n",
            ("private-key", g.private_key().replace(" PRIVATE KEY", " ENCRYPTED PRIVATE KEY")),
        ],
        lambda g: [
            'service account JSON for the exporter:\n{"type": "service_account",'
            ' "project_id": "analytics-prod", "private_key_id": "',
            g.sha(),
            '", "private_key": "',
            ("private-key", g.private_key(escaped=True)),
            '\\n", "client_email": "exporter@analytics-prod.iam.gserviceaccount.com"}',
        ],
        lambda g: [
            "The deploy key that was committed by mistake:\n",
            ("private-key", g.private_key()),
            "\nRevoked it in the repo settings.",
        ],
        lambda g: ["ssh debug log (cut):\n", ("private-key", g.private_key(cut=True))],
    ],
    "azure-storage-key": [
        lambda g: [
            "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;"
            "AccountName=reportsprod;AccountKey=",
            ("azure-storage-key", g.azure_storage_key()),
            ";EndpointSuffix=core.windows.net",
        ],
        lambda g: [
            "Service bus: Endpoint=sb://orders-bus.servicebus.windows.net/;"
            "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=",
            ("azure-storage-key", base64.b64encode(g.r.randbytes(32)).decode()),
        ],
    ],
    "azure-client-secret": [
        lambda g: [
            "App registration for the importer: tenant ",
            g.uuid(),
            ", client id ",
            g.uuid(),
            ", AZURE_CLIENT_SECRET=",
            ("azure-client-secret", g.azure_client_secret()),
        ],
        lambda g: [
            '"azure": {"clientSecret": "',
            ("azure-client-secret", g.azure_client_secret()),
            '", "tenantId": "',
            g.uuid(),
            '"}',
        ],
    ],
    "github-token": [
        lambda g: [
            "$ export GITHUB_TOKEN=",
            ("github-token", g.github_token()),
            "\n$ gh pr create --fill --base main",
        ],
        lambda g: [
            "remote: Invalid username or password.\nfatal: Authentication failed for "
            "'https://x-access-token:",
            ("github-token", g.github_token()),
            "@github.com/acme/infra.git/'",
        ],
        lambda g: [
            "CI used a personal token (",
            ("github-token", g.github_token()),
            ") instead of the app installation token; switched it.",
        ],
        lambda g: [
            "git remote set-url origin https://",
            ("github-token", g.github_token()),
            "@github.com/acme/api.git",
        ],
        lambda g: [
            'curl -H "Authorization: token ',
            ("github-token", g.github_token()),
            '" https://api.github.com/repos/acme/api/actions/runs',
        ],
    ],
    "gitlab-token": [
        lambda g: [
            "git clone https://oauth2:",
            ("gitlab-token", g.gitlab_token()),
            "@gitlab.com/acme/platform.git",
        ],
        lambda g: [
            "Renovate needs RENOVATE_TOKEN=",
            ("gitlab-token", g.gitlab_token()),
            " with api scope on the group",
        ],
    ],
    "slack-token": [
        lambda g: [
            "SLACK_BOT_TOKEN=",
            ("slack-token", g.slack_token()),
            "\nSLACK_CHANNEL=#deploys",
        ],
        lambda g: [
            "slack_sdk.errors.SlackApiError: invalid_auth for token ",
            ("slack-token", g.slack_token()),
        ],
        lambda g: [
            "the alert bot posts with ",
            ("slack-token", g.slack_token()),
            ", scopes chat:write and channels:read",
        ],
    ],
    "slack-webhook": [
        lambda g: ["Alertmanager receiver: slack_api_url: ", ("slack-webhook", g.slack_webhook())],
        lambda g: [
            "curl -X POST -H 'Content-type: application/json' --data '{\"text\":\"deploy done\"}' ",
            ("slack-webhook", g.slack_webhook()),
        ],
    ],
    "stripe-key": [
        lambda g: [
            "STRIPE_SECRET_KEY=",
            ("stripe-key", g.stripe_key()),
            "\nSTRIPE_PUBLISHABLE_KEY=pk_live_",
            g.s(ALNUM, 24),
        ],
        lambda g: [
            "stripe.error.AuthenticationError: Invalid API Key provided: ",
            ("stripe-key", g.stripe_key()),
        ],
        lambda g: [
            "webhook verification failed until I used the endpoint's signing secret ",
            ("stripe-key", "whsec_" + g.s(ALNUM, 32)),
        ],
    ],
    "npm-token": [
        lambda g: [
            "~/.npmrc on the build box:\n//registry.npmjs.org/:_authToken=",
            ("npm-token", g.npm_token()),
            "\nalways-auth=true",
        ],
        lambda g: ["NPM_TOKEN=", ("npm-token", g.npm_token()), " npm publish --access public"],
        lambda g: ["publishing failed with E401 for token ", ("npm-token", g.npm_token())],
    ],
    "pypi-token": [
        lambda g: ["twine upload dist/* -u __token__ -p ", ("pypi-token", g.pypi_token())],
        lambda g: ["[pypi]\n  username = __token__\n  password = ", ("pypi-token", g.pypi_token())],
    ],
    "jwt": [
        lambda g: [
            "curl -H 'Authorization: Bearer ",
            ("jwt", g.jwt()),
            "' https://api.internal/v1/me returned 403",
        ],
        lambda g: [
            "The session cookie was access_token=",
            ("jwt", g.jwt()),
            "; expired after 15 minutes.",
        ],
        lambda g: ["decoded the token from the logs: ", ("jwt", g.jwt()), " (role claim is wrong)"],
        lambda g: [
            '{"access_token": "',
            ("jwt", g.jwt()),
            '", "token_type": "Bearer", "expires_in": 3600}',
        ],
    ],
    "url-password": [
        lambda g: [
            "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection to"
            f' server at "{g.pick(HOSTS)}", port 5432 failed\nDATABASE_URL=postgresql://app:',
            ("url-password", g.url_password()),
            f"@{g.pick(HOSTS)}:5432/{_service(g)}",
        ],
        lambda g: [
            "MONGO_URI=mongodb+srv://reporting:",
            ("url-password", g.url_password()),
            "@",
            "cluster0.x7kq2.mongodb.net/analytics?retryWrites=true",
        ],
        lambda g: [
            "celery broker: amqp://worker:",
            ("url-password", g.url_password()),
            "@rabbitmq.internal:5672//",
        ],
        lambda g: [
            "REDIS_URL=redis://:",
            ("url-password", g.url_password()),
            "@redis-cache:6379/0",
        ],
        lambda g: [
            "mysql://root:",
            ("url-password", g.url_password()),
            "@mysql.staging.local:3306/shop works from the bastion only",
        ],
    ],
    "password": [
        lambda g: [
            "mysql -h db.internal -u root -p",
            ("password", g.password()),
            " shop < fix.sql",
        ],
        lambda g: [
            "~/.netrc:\nmachine git.acme.io\n  login ci-bot\n  password ",
            ("password", g.password()),
        ],
        lambda g: [
            "apiVersion: v1\nkind: Secret\nstringData:\n  password: ",
            ("password", g.password()),
            "\n  username: app",
        ],
        lambda g: [
            "helm upgrade redis bitnami/redis --set auth.password=",
            ("password", g.password()),
        ],
        lambda g: [
            "kubectl create secret generic db --from-literal=password=",
            ("password", g.password()),
        ],
        lambda g: [
            "curl -u admin:",
            ("password", g.password()),
            " https://jenkins.internal/api/json?tree=jobs[name]",
        ],
        lambda g: [
            "DB_HOST=",
            g.pick(HOSTS),
            "\nDB_USER=app\nDB_PASSWORD=",
            ("password", g.password()),
            "\nDB_NAME=orders",
        ],
        lambda g: [
            '{"username": "svc-report", "password": "',
            ("password", g.password()),
            '", "host": "',
            g.pick(HOSTS),
            '"}',
        ],
        lambda g: [
            "docker-compose.yml:\n  postgres:\n    environment:\n      POSTGRES_PASSWORD: ",
            ("password", g.password()),
            "\n",
        ],
        lambda g: [
            "$ PGPASSWORD=",
            ("password", g.password()),
            f" psql -h {g.pick(HOSTS)} -U app -c 'select 1'",
        ],
        lambda g: [
            "Server=tcp:sql-prod.database.windows.net,1433;Database=crm;User ID=crm;Password=",
            ("password", g.password()),
            ";Encrypt=True;",
        ],
        lambda g: [
            "The admin password for the staging Grafana is ",
            ("password", g.password()),
            " - change it after the demo.",
        ],
        lambda g: [
            "mysqldump --user=backup --password=",
            ("password", g.password()),
            " shop > shop.sql",
        ],
        lambda g: [
            "jdbc:postgresql://",
            g.pick(HOSTS),
            ":5432/ledger?user=ledger&password=",
            ("password", g.password()),
            "&ssl=true",
        ],
        lambda g: [
            "application.properties:\nspring.datasource.url=jdbc:mysql://db:3306/shop\n"
            "spring.datasource.password=",
            ("password", g.password()),
        ],
        lambda g: [
            'appsettings.Production.json: "Smtp": {"User": "mailer", "Password": "',
            ("password", g.password()),
            '"}',
        ],
        lambda g: [
            "./manage.py createsuperuser --username ops --password ",
            ("password", g.password()),
        ],
    ],
    "secret": [
        lambda g: ['PS> $env:API_TOKEN = "', ("secret", g.token_value()), '"'],
        lambda g: [
            "https://api.vendor.io/v1/orders?access_token=",
            ("secret", g.token_value()),
            "&limit=50",
        ],
        lambda g: ["export VAULT_TOKEN=", ("secret", "hvs." + g.s(ALNUM, 90))],
        lambda g: ["API_TOKEN=", ("secret", g.token_value()), "\nAPI_URL=https://api.vendor.io"],
        lambda g: [
            'config.json: {"client_id": "',
            g.uuid(),
            '", "client_secret": "',
            ("secret", g.token_value()),
            '"}',
        ],
        lambda g: ["SECRET_KEY = '", ("secret", g.token_value()), "'  # settings/prod.py"],
        lambda g: [
            "sendgrid:\n  api_key: ",
            ("secret", "SG." + g.s(B64URL, 22) + "." + g.s(B64URL, 43)),
            "\n",
        ],
        lambda g: ["headers = {'X-Api-Key': '", ("secret", g.token_value()), "'}"],
        lambda g: ["export OPENAI_API_KEY=", ("secret", "sk-proj-" + g.s(ALNUM + "-_", 48))],
        lambda g: ["the webhook's auth_token: ", ("secret", g.token_value()), "\n"],
        lambda g: [
            "curl -H 'X-API-KEY: ",
            ("secret", g.s(ALNUM, 32)),
            "' https://api.vendor.io/v2/orders",
        ],
        lambda g: ['const client = new Client({ apiKey: "', ("secret", g.token_value()), '" });'],
        lambda g: ["HEROKU_API_KEY=", ("secret", g.uuid()), "\nHEROKU_APP=orders-prod"],
    ],
    "high-entropy": [
        lambda g: [
            "JWT_SIGNING_KEY=",
            ("high-entropy", g.entropy_value()),
            f"\nJWT_ISSUER={_service(g)}",
        ],
        lambda g: ["encryption_key: ", ("high-entropy", g.entropy_value()), "\n"],
        lambda g: ['HMAC_SALT = "', ("high-entropy", g.entropy_value()), '"'],
        lambda g: ["hmac_key=", ("high-entropy", g.entropy_value()), " is shared with the CDN"],
        lambda g: [
            "Cookie: sessionid=",
            ("high-entropy", g.s(LOWER_DIGITS, 32)),
            "; csrftoken=abc",
        ],
        lambda g: ["MASTER_KEY: ", ("high-entropy", g.entropy_value())],
    ],
}

NEGATIVE: list[Template] = [
    lambda g: [
        "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBa"
        + g.s(B64, 40)
        + "\n-----END CERTIFICATE-----"
    ],
    lambda g: ["-----BEGIN PUBLIC KEY-----\n" + g.s(B64, 64) + "\n-----END PUBLIC KEY-----"],
    lambda g: ["password_hash: $2b$12$" + g.s(ALNUM, 53)],
    lambda g: ["salt = bcrypt.gensalt()\nhashed = bcrypt.hashpw(password, salt)"],
    lambda g: [f"oid sha256:{g.sha(64)}\nsize {g.r.randint(1000, 10**6)}"],
    lambda g: [f"cache:\n  key: deps-{g.sha(40)}\n  paths: [node_modules]"],
    lambda g: ["Password: see the 1Password item 'staging db'"],
    lambda g: ["token = tokenizer.encode(text)[0]\nkey = (user_id, day)"],
    lambda g: ["AKIA" + "X" * 16 + " is the masked key from the screenshot"],
    lambda g: [f'"private_key_id": "{g.sha()}", "client_id": "{g.r.randint(10**17, 10**18)}"'],
    lambda g: [f"Merged {g.sha(7)}..{g.sha(7)}; the fix is commit {g.sha()} on main."],
    lambda g: [f"git log --oneline: {g.sha(7)} fix retry; {g.sha(7)} bump deps; {g.sha()}"],
    lambda g: [f"request_id={g.uuid()} user_id={g.uuid()} failed with 502 after 30s"],
    lambda g: [f"idempotency_key: {g.uuid()} was reused by the retry, so no double charge"],
    lambda g: [f"sha256sum: {g.sha(64)}  release-2.4.1.tar.gz"],
    lambda g: [f"content_hash = {g.sha(64)} (drawers dedup on it)"],
    lambda g: [f"cache_key = {g.sha(64)}"],
    lambda g: [f'etag: "{g.sha(32)}" unchanged, so the CDN served a 304'],
    lambda g: [
        f'"node_modules/left-pad": {{"version": "1.3.0", "resolved": '
        f'"https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz", '
        f'"integrity": "{g.integrity()}"}}'
    ],
    lambda g: [f"image: ghcr.io/acme/{_service(g)}@sha256:{g.sha(64)}"],
    lambda g: [f'The avatar is inlined as <img src="{g.image()}"> in the email template.'],
    lambda g: [
        "AWS docs example: AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        " - not real keys, used in the tutorial."
    ],
    lambda g: [f"e.g. GITHUB_TOKEN=ghp_{'x' * 36} (placeholder in the README)"],
    lambda g: [f"Example from the Stripe docs: sk_test_{g.s(ALNUM, 24)} is a sample key."],
    lambda g: [f"Renamed {g.identifier()} to {g.identifier()} and {g.identifier()}."],
    lambda g: [f"function {g.identifier()}() calls {g.identifier()} inside the retry loop"],
    lambda g: ["DB_PASSWORD=${DB_PASSWORD}\nAPI_TOKEN=${API_TOKEN:-}\nSECRET_KEY=<set in vault>"],
    lambda g: ["password: ********\ntoken: [REDACTED]\napi_key: <your-api-key>"],
    lambda g: [
        'api_key = os.environ["API_KEY"]\npassword = getpass.getpass()\n'
        "token = settings.SLACK_TOKEN"
    ],
    lambda g: [f"max_tokens={g.r.randint(256, 8192)}, token_type: bearer, tokenizer: porter"],
    lambda g: [f"password_min_length = {g.r.randint(8, 16)}; password_policy: strict"],
    lambda g: ['The login failed: FATAL: password authentication failed for user "app"'],
    lambda g: ["Rotate the token every 90 days; the secret lives in Vault under kv/billing."],
    lambda g: [f"secretName: {_service(g)}-db-credentials\nsecretKeyRef: {{name: db, key: url}}"],
    lambda g: [f"psql postgresql://app@{g.pick(HOSTS)}:5432/orders (password from ~/.pgpass)"],
    lambda g: [f"see https://{_service(g)}.example.com/docs/api?page=2&sort=asc for the API"],
    lambda g: [f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{g.s(B64, 43)} deploy@ci (public key)"],
    lambda g: [f"pk_live_{g.s(ALNUM, 24)} is the publishable key; it is meant to be public."],
    lambda g: [
        f"version 2.{g.r.randint(0, 20)}.{g.r.randint(0, 9)} of {_service(g)} on port"
        f" {g.r.randint(3000, 9000)}; build {g.sha(12)}"
    ],
    lambda g: [f"Kubernetes uid {g.uuid()} and resourceVersion {g.r.randint(10**6, 10**7)}"],
    lambda g: ["The token bucket refills 50 tokens/s; key rotation is at 03:00 UTC."],
    lambda g: [f"primary_key = {g.uuid()}; sort_key = created_at#{g.sha(8)}"],
    lambda g: [f"trace id {g.sha(32)} span id {g.sha(16)} in the tempo UI"],
    lambda g: [f"X-Request-Id: {g.uuid()}\nX-Trace: {g.sha(32)}"],
    lambda g: [f"public_key: {g.s(B64, 44)}  # wireguard peer, safe to share"],
    lambda g: [f"pnpm-lock: resolution: {{integrity: {g.integrity()}}}"],
    lambda g: [
        "the auth flow: token -> refresh -> secret rotation; the password is never"
        " logged and the key is in KMS."
    ],
    lambda g: [f"{g.identifier()}: {g.identifier()}\n{g.identifier()} = {g.identifier()}"],
    lambda g: [
        "env:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n  NPM_TOKEN: ${{ secrets.NPM_TOKEN }}"
    ],
    lambda g: ["db_password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256"],
    lambda g: ["ApiKey: !Ref ApiKeyParameter\nPassword: !Sub '{{resolve:secretsmanager:db}}'"],
    lambda g: ['password: ""\ntoken: null\nsecret: true\nauth: basic'],
    lambda g: ['token := os.Getenv("TOKEN")\npassword := cfg.Password'],
    lambda g: ['partition_key = "tenant_id"\nsort_key = "created_at"'],
    lambda g: [f"tokens_used: {g.r.randint(100, 90000)}, prompt_tokens={g.r.randint(10, 900)}"],
    lambda g: ["curl -H 'Authorization: Bearer <token>' https://api.internal/v1/me"],
    lambda g: ["password=$(cat /run/secrets/db_password) ./start.sh"],
    lambda g: [f"Reset link sent to ops@{_service(g)}.io; the password reset token expires in 1h."],
    lambda g: [f"session_key = request.session.session_key  # {g.identifier()}"],
    lambda g: [
        f"The sample JWT in the docs, eyJhbGciOiJIUzI1NiJ9.{g.s(B64URL, 20)}."
        f"{g.s(B64URL, 20)}, is made up."
    ],
    lambda g: [f"checksum md5 {g.sha(32)} sha1 {g.sha(40)}"],
    lambda g: [f"the pool's key_id is {g.uuid()} and key_name is {g.identifier()}"],
]


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
