"""detect-secrets 1.5.0's plugin patterns, as data: the denylists ``rules.TOKENS`` names.

``rules.py`` takes the formats detect-secrets knows from its plugins, as the library ships
them (``rules.DETECT_SECRETS``; Apache License 2.0). Importing the plugins at run time
brought ``requests``, ``urllib3``, ``http``, ``email`` and ``multiprocessing`` into every
palace worker (the plugins import them to verify a key online, which this never does),
about 200 modules held by the worker template, and that cost each forked worker 1.2 MB of
memory of its own (BENCHMARKS.md, "Idle palaces and the credential rules"). So the patterns
are kept here, ``(pattern, flags)`` per plugin class in its ``denylist`` order, and
detect-secrets is needed only by the test that checks this table is still what the
installed version ships (``tests/unit/test_credentials.py``), which prints the table to
paste here when a new version changes it.
"""

from __future__ import annotations

import re

VERSION = "1.5.0"

# ``module.Class`` under ``detect_secrets.plugins`` -> its denylist, in order.
PATTERNS: dict[str, tuple[tuple[str, int], ...]] = {
    "aws.AWSKeyDetector": (
        ("(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}", 0),
        (
            "aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\\'\\\"]([0-9a-zA-Z/+]{40})[\\'\\\"]",
            re.IGNORECASE,
        ),
    ),
    "azure_storage_key.AzureStorageKeyDetector": (("AccountKey=[a-zA-Z0-9+\\/=]{88}", 0),),
    "basic_auth.BasicAuthDetector": (
        (
            "://[^:/\\?\\#\\[\\]@!\\$\\&'\\(\\)\\*\\+,;=\\s]+:([^:/\\?\\#\\[\\]@!\\$\\&'\\(\\)\\*\\+,;=\\s]+)@",
            0,
        ),
    ),
    "github_token.GitHubTokenDetector": (("(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}", 0),),
    "gitlab_token.GitLabTokenDetector": (
        ("(glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\\-]{20,50}(?!\\w)", 0),
        ("GR1348941[A-Za-z0-9_\\-]{20,50}(?!\\w)", 0),
        ("glcbt-([0-9a-fA-F]{2}_)?[A-Za-z0-9_\\-]{20,50}(?!\\w)", 0),
        ("glimt-[A-Za-z0-9_\\-]{25}(?!\\w)", 0),
        ("glptt-[A-Za-z0-9_\\-]{40}(?!\\w)", 0),
        ("glagent-[A-Za-z0-9_\\-]{50,1024}(?!\\w)", 0),
        ("gloas-[A-Za-z0-9_\\-]{64}(?!\\w)", 0),
    ),
    "jwt.JwtTokenDetector": (("eyJ[A-Za-z0-9-_=]+\\.[A-Za-z0-9-_=]+\\.?[A-Za-z0-9-_.+/=]*?", 0),),
    "mailchimp.MailchimpDetector": (("[0-9a-z]{32}-us[0-9]{1,2}", 0),),
    "openai.OpenAIDetector": (("sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}", 0),),
    "private_key.PrivateKeyDetector": (
        ("BEGIN DSA PRIVATE KEY", 0),
        ("BEGIN EC PRIVATE KEY", 0),
        ("BEGIN OPENSSH PRIVATE KEY", 0),
        ("BEGIN PGP PRIVATE KEY BLOCK", 0),
        ("BEGIN PRIVATE KEY", 0),
        ("BEGIN RSA PRIVATE KEY", 0),
        ("BEGIN SSH2 ENCRYPTED PRIVATE KEY", 0),
        ("PuTTY-User-Key-File-2", 0),
    ),
    "pypi_token.PypiTokenDetector": (
        ("pypi-AgEIcHlwaS5vcmc[A-Za-z0-9-_]{70,}", 0),
        ("pypi-AgENdGVzdC5weXBpLm9yZw[A-Za-z0-9-_]{70,}", 0),
    ),
    "sendgrid.SendGridDetector": (("SG\\.[a-zA-Z0-9_-]{22}\\.[a-zA-Z0-9_-]{43}", 0),),
    "slack.SlackDetector": (
        ("xox(?:a|b|p|o|s|r)-(?:\\d+-)+[a-z0-9]+", re.IGNORECASE),
        (
            "https://hooks\\.slack\\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+",
            re.IGNORECASE | re.VERBOSE,
        ),
    ),
    "square_oauth.SquareOAuthDetector": (("sq0csp-[0-9A-Za-z\\\\\\-_]{43}", 0),),
    "stripe.StripeDetector": (("(?:r|s)k_live_[0-9a-zA-Z]{24}", 0),),
    "telegram_token.TelegramBotTokenDetector": (("\\d{8,10}:[0-9A-Za-z_-]{35}", 0),),
}
