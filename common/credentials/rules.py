"""What counts as a credential, as data: one row per format, with the source that defines it.

Two kinds of row:

* ``TOKENS`` - formats a provider fixes (a prefix, a length, an alphabet). Where
  detect-secrets has the format, the row names its plugin's pattern (``plugin``:
  ``module.Class`` or ``module.Class[i]`` under ``detect_secrets.plugins``), which
  ``detector.py`` compiles as the library ships it (kept in ``shipped.py``, so that the
  library and its HTTP stack stay out of the workers); only the formats it lacks carry a
  pattern here, with the URL of the provider's documentation of that format.
* ``ASSIGNMENTS`` - a value next to a key-like name (``password=``, ``"api_key": "..."``,
  ``secret: ...``, ``the password is ...``): the name words, and what the value must look
  like for that name (``detector.py`` holds the value tests).

Each row has ``needles``: lowercase substrings of which one must be in the text for the
row to run at all (the prefilter that keeps a plain note cheap). ``bounded`` puts a
pattern between non-alphanumerics, so a format is never matched inside a longer word.
``extend`` is a character class a match is grown over to the right, for patterns that
match only the start of a longer token (detect-secrets' Stripe and JWT patterns), so the
whole token is redacted and no tail of it is left in clear.
"""

from __future__ import annotations

from dataclasses import dataclass

DETECT_SECRETS = "https://github.com/Yelp/detect-secrets/tree/v1.5.0/detect_secrets/plugins/"


@dataclass(frozen=True)
class TokenRule:
    kind: str  # the marker's kind
    source: str  # where the format is defined
    needles: tuple[str, ...]  # lowercase; one must be in the text
    pattern: str | None = None  # a regex of our own (None: ``plugin``'s)
    plugin: str | None = None  # detect-secrets' ``module.Class`` or ``module.Class[i]``
    group: int = 0  # the group that is the secret
    bounded: bool = False  # not inside a longer alphanumeric run
    extend: str = ""  # a character class the match is grown over to the right
    check: str = ""  # a further test of the match (``detector._tokens``)
    after: str = ""  # the secret starts after this text of the match (``AccountKey=``)


_GITLAB_PREFIXES = ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941", "glcbt-",
                    "glimt-", "glptt-", "glagent-", "gloas-")  # fmt: skip

TOKENS: tuple[TokenRule, ...] = (
    # -- cloud providers --------------------------------------------------------------
    TokenRule(
        "aws-access-key",
        DETECT_SECRETS + "aws.py",
        ("akia", "asia", "abia", "acca", "a3t"),
        plugin="aws.AWSKeyDetector[0]",
        bounded=True,
    ),
    TokenRule(
        "aws-secret-key",
        DETECT_SECRETS + "aws.py",
        ("aws",),
        plugin="aws.AWSKeyDetector[1]",
        group=1,
    ),
    TokenRule(
        "aws-secret-key",  # the credentials file and env vars write it unquoted
        "https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html",
        ("secret",),
        pattern=r"(?i)(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)"
        r"[\"']?\s*(?:=|:|=>)\s*[\"']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        group=1,
    ),
    TokenRule(
        "aws-secret-key",  # beside its key id: the console's credentials CSV, "id / secret"
        "https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html",
        ("akia", "asia"),
        pattern=r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}[\"']?[ \t]*[,;:|/ \t][ \t]*[\"']?"
        r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        group=1,
        check="random",
    ),
    TokenRule(
        "gcp-api-key",
        "https://cloud.google.com/docs/authentication/api-keys",
        ("aiza",),
        pattern=r"AIza[0-9A-Za-z_\-]{35}",
        bounded=True,
    ),
    TokenRule(
        "gcp-oauth-secret",
        "https://developers.google.com/identity/protocols/oauth2/web-server#creatingcred",
        ("gocspx-",),
        pattern=r"GOCSPX-[A-Za-z0-9_\-]{28}",
        bounded=True,
    ),
    TokenRule(
        "azure-storage-key",
        DETECT_SECRETS + "azure_storage_key.py",
        ("accountkey=",),
        plugin="azure_storage_key.AzureStorageKeyDetector",
        after="=",
    ),
    TokenRule(
        "azure-storage-key",  # Service Bus / Event Hubs connection strings too
        "https://learn.microsoft.com/en-us/azure/storage/common/storage-configure-connection-string",
        ("accountkey", "sharedaccesskey"),
        pattern=r"(?i)(?:SharedAccessKey|AccountKey)\s*=\s*([A-Za-z0-9+/]{40,90}={0,2})",
        group=1,
    ),
    TokenRule(
        "azure-sas-signature",
        "https://learn.microsoft.com/en-us/rest/api/storageservices/create-service-sas",
        ("sig=",),
        pattern=r"[?&]sig=([A-Za-z0-9%+/]{30,}(?:=|%3[Dd]){0,2})",
        group=1,
    ),
    TokenRule(
        "azure-client-secret",
        "https://learn.microsoft.com/en-us/entra/identity-platform/how-to-add-credentials",
        ("q~",),
        pattern=r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}"
        r"(?![A-Za-z0-9_~.\-])",
    ),
    # -- code hosts and registries ----------------------------------------------------
    TokenRule(
        "github-token",
        DETECT_SECRETS + "github_token.py",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        plugin="github_token.GitHubTokenDetector",
        bounded=True,
    ),
    TokenRule(
        "github-token",
        "https://github.blog/security/application-security/"
        "introducing-fine-grained-personal-access-tokens-for-github/",
        ("github_pat_",),
        pattern=r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}",
        bounded=True,
    ),
    TokenRule(
        "gitlab-token",
        DETECT_SECRETS + "gitlab_token.py",
        _GITLAB_PREFIXES,
        plugin="gitlab_token.GitLabTokenDetector",
        bounded=True,
    ),
    TokenRule(
        "npm-token",
        "https://github.blog/changelog/2021-09-23-npm-has-a-new-access-token-format/",
        ("npm_",),
        pattern=r"npm_[A-Za-z0-9]{36}",
        bounded=True,
    ),
    TokenRule(
        "npm-token",  # .npmrc: legacy tokens are UUIDs; ``_auth`` is base64 user:password
        "https://docs.npmjs.com/cli/v10/configuring-npm/npmrc#auth-related-configuration",
        ("_authtoken", "_auth", "_password"),
        pattern=r":(?:_authToken|_auth|_password)\s*=\s*[\"']?([A-Za-z0-9_+/=\-]{16,})",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "pypi-token",
        DETECT_SECRETS + "pypi_token.py",
        ("pypi-ag",),
        plugin="pypi_token.PypiTokenDetector",
        extend=r"[A-Za-z0-9_\-]",
    ),
    # -- chat, payments, AI APIs ------------------------------------------------------
    TokenRule(
        "slack-token",
        DETECT_SECRETS + "slack.py",
        ("xox",),
        plugin="slack.SlackDetector[0]",
        extend=r"[A-Za-z0-9\-]",
    ),
    TokenRule(
        "slack-token",
        "https://api.slack.com/authentication/token-types#app-level",
        ("xapp-",),
        pattern=r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+",
        bounded=True,
    ),
    TokenRule(
        "slack-webhook",
        DETECT_SECRETS + "slack.py",
        ("hooks.slack.com",),
        plugin="slack.SlackDetector[1]",
    ),
    TokenRule(
        "stripe-key",
        DETECT_SECRETS + "stripe.py",
        ("k_live_",),
        plugin="stripe.StripeDetector",
        bounded=True,
        extend="[0-9a-zA-Z]",
    ),
    TokenRule(
        "stripe-key",  # test-mode keys reach a real account's test data
        "https://docs.stripe.com/keys",
        ("k_test_",),
        pattern=r"(?:sk|rk)_test_[0-9a-zA-Z]{24,}",
        bounded=True,
    ),
    TokenRule(
        "stripe-key",
        "https://docs.stripe.com/webhooks#verify-webhook-signatures-with-official-libraries",
        ("whsec_",),
        pattern=r"whsec_[A-Za-z0-9]{32,}",
        bounded=True,
    ),
    TokenRule(
        "openai-key",
        DETECT_SECRETS + "openai.py",
        ("t3blbkfj",),
        plugin="openai.OpenAIDetector",
    ),
    TokenRule(
        "openai-key",
        "https://platform.openai.com/docs/api-reference/authentication",
        ("sk-proj-", "sk-svcacct-", "sk-admin-"),
        pattern=r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}",
        bounded=True,
    ),
    TokenRule(
        "anthropic-key",
        "https://docs.anthropic.com/en/api/overview#authentication",
        ("sk-ant-",),
        pattern=r"sk-ant-(?:api|admin)\d{2}-[A-Za-z0-9_\-]{20,}",
        bounded=True,
    ),
    TokenRule(
        "sendgrid-key",
        DETECT_SECRETS + "sendgrid.py",
        ("sg.",),
        plugin="sendgrid.SendGridDetector",
        bounded=True,
    ),
    TokenRule(
        "mailchimp-key",
        DETECT_SECRETS + "mailchimp.py",
        ("-us",),
        plugin="mailchimp.MailchimpDetector",
        bounded=True,
    ),
    TokenRule(
        "telegram-token",
        DETECT_SECRETS + "telegram_token.py",
        (":",),
        plugin="telegram_token.TelegramBotTokenDetector",
        bounded=True,
        check="mixed",
    ),
    TokenRule(
        "square-secret",
        DETECT_SECRETS + "square_oauth.py",
        ("sq0csp-",),
        plugin="square_oauth.SquareOAuthDetector",
    ),
    # -- blocks, tokens, passwords in URLs ----------------------------------------------
    TokenRule(
        "private-key",  # the header is detect-secrets'; the span runs to the END line
        DETECT_SECRETS + "private_key.py",
        ("private key", "putty-user-key"),
        plugin="private_key.PrivateKeyDetector",
        check="key_block",
    ),
    TokenRule(
        "private-key",  # any label: ENCRYPTED PRIVATE KEY, ... (PKCS #8, RFC 5958)
        "https://www.rfc-editor.org/rfc/rfc7468#section-11",
        ("private key",),
        pattern=r"BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?",
        check="key_block",
    ),
    TokenRule(
        "jwt",
        DETECT_SECRETS + "jwt.py",
        ("eyj",),
        plugin="jwt.JwtTokenDetector",
        extend=r"[A-Za-z0-9_\-.=]",
        check="jwt",
    ),
    TokenRule(
        "url-password",
        DETECT_SECRETS + "basic_auth.py",
        ("://",),
        plugin="basic_auth.BasicAuthDetector",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "url-password",  # userinfo with characters basic_auth.py leaves out (! * $ ...)
        "https://www.rfc-editor.org/rfc/rfc3986#section-3.2.1",
        ("://",),
        pattern=r"(?i)(?<![a-z0-9+.\-])[a-z][a-z0-9+.\-]{1,24}://[^\s:/?#@\[\]\"'<>]{0,128}:"
        r"([^\s/?#\"'<>]{1,256})@(?=[A-Za-z0-9\[])",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "password",  # curl -u user:password
        "https://curl.se/docs/manpage.html#-u",
        ("-u ", "--user"),
        pattern=r"(?<![\w-])(?:-u|--user)[ \t=]+[\"']?[^\s:\"']{1,64}:([^\s\"']{4,256})",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "password",  # mysql -pSECRET (no blank: with one, the word is a database's name)
        "https://dev.mysql.com/doc/refman/8.4/en/connection-options.html#option_general_password",
        ("mysql",),
        pattern=r"\bmysql(?:dump|admin|sh)?\b[^\n]*?[ \t]-p([^\s\"'][^\s\"']{3,255})",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "password",  # sshpass -p, redis-cli -a, docker login -p
        "https://redis.io/docs/latest/develop/tools/cli/#host-port-password-and-database",
        ("sshpass", "redis-cli", "docker login"),
        pattern=r"\b(?:sshpass[ \t]+-p|redis-cli\b[^\n]*?[ \t]-a|docker[ \t]+login\b[^\n]*?[ \t]-p)"
        r"[ \t]+[\"']?([^\s\"'-][^\s\"']{3,255})",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "password",  # .netrc: machine HOST login USER password PASSWORD
        "https://everything.curl.dev/usingcurl/netrc.html",
        ("machine",),
        pattern=r"\bmachine[ \t]+\S+[ \t\n]+login[ \t]+\S+[ \t\n]+password[ \t]+(\S{4,256})",
        group=1,
        check="not_placeholder",
    ),
    TokenRule(
        "openai-key",  # the legacy format, bare
        "https://platform.openai.com/docs/api-reference/authentication",
        ("sk-",),
        pattern=r"sk-[A-Za-z0-9]{48}",
        bounded=True,
        check="random",
    ),
    TokenRule(
        "bearer-token",
        "https://www.rfc-editor.org/rfc/rfc6750#section-2.1",
        ("bearer",),
        pattern=r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{16,}=*)",
        group=1,
        check="random",
    ),
    TokenRule(
        "basic-auth-header",
        "https://www.rfc-editor.org/rfc/rfc7617#section-2",
        ("basic",),
        pattern=r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?basic\s+([A-Za-z0-9+/]{8,}={0,2})",
        group=1,
    ),
)


@dataclass(frozen=True)
class AssignmentRule:
    """A value after a key-like name: ``NAME = value``, ``"NAME": "value"``, ``NAME: value``,
    ``--NAME value``, ``the NAME is value``. The name is an identifier that ENDS with one
    of ``words`` (``DB_PASSWORD``, ``clientSecret``; not ``password_policy``) and does not
    start with one of ``not_after`` (``cache_key``, ``public_key``)."""

    kind: str
    source: str
    words: tuple[str, ...]  # lowercase, as regex alternatives
    value: str  # the value test (``detector.VALUE_TESTS``)
    not_after: tuple[str, ...] = ()  # name prefixes that make it no credential
    needles: tuple[str, ...] = ()


# Passwords: detect-secrets' keyword plugin's words for them (plugins/keyword.py DENYLIST).
_PASSWORD_WORDS = ("password", "passwd", "passphrase", "pwd", "contrase(?:ñ|n)a", "db_?pass",
                   "database_?pass", "key_?pass", "pass")  # fmt: skip
# Tokens, secrets and API keys: the rest of that list, with the names agents' env files use.
_SECRET_WORDS = ("secret", "token", "api[_ -]?key", "apikey", "auth_?key", "service_?key",
                 "account_?key", "db_?key", "database_?key", "priv_?key", "private[_ ]?key",
                 "client_?key", "access[_ ]?key", "secret[_ ]?key", "master_?key", "credentials?",
                 "auth", "bearer", "license_?key", "signing_?key", "encryption_?key",
                 "secret_?key_?base", "session_?key", "webhook_?key")  # fmt: skip
# Weaker names: only a high-entropy value next to them is taken for a secret.
_KEYISH_WORDS = ("key", "salt", "sig", "signature", "hmac", "cookie", "session_?id", "sessid",
                 "dsn", "seed", "pin")  # fmt: skip
# Key names that hold no secret: lookups, identifiers, public halves.
_NOT_SECRET_PREFIXES = ("cache", "primary", "foreign", "sort", "partition", "range", "hash",
                        "idempotency", "public", "publishable", "pub", "row", "dict", "map",
                        "lookup", "object", "s3", "redis", "memcache", "unique", "composite",
                        "i18n", "translation", "react", "ssh_public", "gpg", "pgp_public",
                        "next", "prev", "last", "first", "max", "min", "num", "total",
                        "input", "output", "prompt", "completion", "csrf", "test",
                        "storage", "idp", "ui")  # fmt: skip

ASSIGNMENTS: tuple[AssignmentRule, ...] = (
    AssignmentRule(
        "password",
        DETECT_SECRETS + "keyword.py",
        _PASSWORD_WORDS,
        value="password",
        needles=("pass", "pwd", "contrase"),
    ),
    AssignmentRule(
        "secret",
        DETECT_SECRETS + "keyword.py",
        _SECRET_WORDS,
        value="secret",
        not_after=_NOT_SECRET_PREFIXES,
        needles=("secret", "token", "key", "auth", "cred", "bearer"),
    ),
    AssignmentRule(
        "high-entropy",
        DETECT_SECRETS + "high_entropy_strings.py",
        _KEYISH_WORDS,
        value="random",
        not_after=_NOT_SECRET_PREFIXES,
        needles=("key", "salt", "sig", "hmac", "cookie", "sess", "dsn", "seed", "pin"),
    ),
)

# Values that stand for a secret rather than being one: references, templates, masks.
PLACEHOLDERS = (
    # $VAR, ${VAR}, ${VAR:-default}: a variable's name is in one case (``$mVW0K...`` is not)
    r"\$\{?(?:[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*)(?::?-[^}]*)?\}?",
    r"\$\(.*\)",  # $(command)
    r"\$\{\{.*",  # ${{ secrets.TOKEN }} (GitHub Actions)
    r"![A-Za-z]+(?:_[A-Za-z]+)*",  # YAML tags: !vault, !Ref, !GetAtt, !env_var
    r"%\(?[A-Za-z_]+\)?s?%?",  # %(name)s, %VAR%
    r"\{\{.*\}\}|\{[A-Za-z_][\w.]*\}?",  # {{ template }}, {name}, f"{obj.token}"
    r"<[^<>]*>",  # <your-token>
    r"\[[^\[\]]*\]",  # [REDACTED]
    r"[*•xX#.\-_]{3,}",  # ****, xxxx, ....
    r"(?i:none|null|nil|true|false|undefined|empty|unset|required|optional|string|str|"
    r"bytes|secret|password|passwd|token|changeme|change_me|changeit|example|sample|dummy|"
    r"placeholder|redacted|hidden|masked|removed|omitted|todo|tbd|fixme|xxx|your[_-]?[\w-]*|"
    r"my[_-][\w-]*|env|vault|see|yes|no|on|off|n/?a|default|foo|bar|baz|pass|pw|pwd|user|"
    r"username|login)",
)

# Words in the same line that mark a value as documentation's example, not a live secret:
# "AKIAIOSFODNN7EXAMPLE (the AWS docs' example key)". A value spelling EXAMPLE is one too.
# Words, not parts of a name: ``db.example.com`` or ``sample-app`` mark nothing.
EXAMPLE_WORDS = (
    r"(?i)(?<![\w.@/\-])(?:examples?|placeholders?|dummy|fake|sample|made[- ]up|"
    r"for illustration|illustrative|from the docs|docs'? (?:key|token)|not a real|not real)"
    r"(?![\w@/\-]|\.\w)"
)
EXAMPLE_WINDOW = 60  # characters either side of the value, within its line
