"""A fifth retrieval set: standalone notes asked about in other words.

    .venv/bin/python bench/paraphrase_notes_data.py [--out bench/data/paraphrase_notes.json]
        [--check]

What a user of a memory does most: an agent noted a fact weeks ago in the project's own
words (a table name, a flag, a vendor, a version), and a person asks for it later in
theirs ("what happens to a payment callback that keeps failing?" for a note about Stripe
webhooks and a dead_letter table). The other notes sets mostly ask with the note's rare
words, which BM25 rewards; here every question was written to avoid each word that makes
its note distinctive (names, identifiers, numbers, the note's own verbs where a synonym is
natural), so only meaning connects them, while the notes of one project share its common
words (service, deploy, config, the project's name). Keyword matches on such words are the
incidental evidence deep recall must not trust over meaning (issue: "deep recall that is
never the worse first answer").

Five projects an agent might work on (a Go billing service, a React front end, a Python
data pipeline, the infrastructure, a Rust command-line tool), sixteen notes each, written
as an agent notes at the end of a task: in bursts of a few, seconds to two minutes apart,
in the project's room, every note standing alone. The notes and the questions were
written together, before any ranking rule was measured on this set; it is for judging
rules, never for choosing them. Deterministic: timestamps come from a fixed seed, and
``--check`` says whether the committed file is current.
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eng_notes_data import dumps, write_or_check

SEED = 20261128
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "paraphrase_notes.json"
START = datetime(2026, 3, 2, 10, 12, tzinfo=UTC)

# Each project: the prefix of its note ids, its room, tags, the notes in writing order
# (each burst a list of notes), and questions as (note number, question). Note numbers
# count from 1 across the project's bursts.
PROJECTS: list[dict] = [
    {
        "key": "lg",
        "room": "Backend",
        "tags": ["ledger"],
        "bursts": [
            [
                "ledger retries Stripe webhooks with exponential backoff, at most 5 attempts; "
                "after the fifth failure the event is parked in the dead_letter table.",
                "ledger stores every amount as an int64 count of minor units (cents); never "
                "use float64 for money in ledger.",
                "Invoices in ledger are numbered per tenant with a gapless sequence kept in "
                "the invoice_counters table, locked with SELECT ... FOR UPDATE.",
                "ledger's idempotency keys live in Redis for 24 hours; a repeated POST with "
                "the same Idempotency-Key header returns the first response.",
            ],
            [
                "The nightly reconciliation job in ledger compares our payouts with the "
                "Stripe balance report at 03:30 UTC and opens a Jira ticket on any mismatch.",
                "ledger talks to Postgres through pgx with a pool of 40 connections; "
                "raising it past 60 starved the analytics replica.",
                "VAT for EU customers is computed by ledger from the billing address country, "
                "using the rates table refreshed on the first of each month.",
                "Refunds in ledger are only allowed within 180 days of the charge; older "
                "ones go through the finance team by hand.",
            ],
            [
                "ledger's gRPC API is versioned in the package name (ledger.v2); v1 is frozen "
                "and only gets security fixes until December 2026.",
                "Currency conversion in ledger uses the ECB reference rates fetched at 16:00 "
                "CET; weekend charges use Friday's rate.",
                "Dunning in ledger: a failed card is retried on days 1, 3 and 7, then the "
                "subscription is paused and the customer emailed.",
                "ledger's audit log is append-only: a Postgres trigger rejects UPDATE and "
                "DELETE on the audit_events table.",
            ],
            [
                "Proration in ledger is computed to the second, not to the day, since the "
                "April incident where upgrades on the 31st were charged twice.",
                "ledger signs outgoing partner callbacks with HMAC-SHA256 over the raw body; "
                "the header is X-Ledger-Signature.",
                "Coupons in ledger stack only if both are marked combinable; otherwise the "
                "larger discount wins.",
                "ledger's p99 budget for the charge endpoint is 300 ms; the Grafana alert "
                "fires after five minutes above it.",
            ],
        ],
        "questions": [
            (1, "What happens to a payment provider callback that keeps failing?"),
            (2, "What numeric type should hold prices in the billing code?"),
            (3, "How do we make sure bill numbers have no holes in them?"),
            (4, "If a client sends the same request twice, how does billing avoid doing it twice?"),
            (5, "When do we check that what we paid out matches what the processor says?"),
            (
                6,
                "How many simultaneous database links does billing keep open, and why not more?",
            ),
            (8, "Can a customer get their money back for a purchase made a year ago?"),
            (9, "Is the older version of the billing RPC interface still maintained?"),
            (10, "How is a foreign price converted for a purchase made on a Saturday?"),
            (11, "What is the schedule for charging a declined payment method again?"),
            (12, "Can anyone change or remove entries in the billing history of actions?"),
            (13, "Why are plan switches billed by the exact moment rather than daily?"),
            (14, "How can integrators confirm that a message we send them is genuine?"),
            (15, "What if a shopper applies two promo codes at once?"),
        ],
    },
    {
        "key": "at",
        "room": "Frontend",
        "tags": ["atlas"],
        "bursts": [
            [
                "atlas uses TanStack Query for server state; Redux is only kept for the "
                "editor's undo history.",
                "atlas lazy-loads the map view with React.lazy and Suspense; it was 40% of "
                "the initial bundle.",
                "Design tokens for atlas come from the figma-tokens export and are compiled "
                "to CSS custom properties by Style Dictionary.",
            ],
            [
                "atlas supports dark mode through prefers-color-scheme plus a manual toggle "
                "stored in localStorage under atlas.theme.",
                "All atlas dates are rendered with date-fns-tz in the user's profile time "
                "zone, not the browser's.",
                "atlas's end-to-end tests run in Playwright against a seeded staging tenant "
                "every night at 02:00.",
                "Translations in atlas are managed in Crowdin; the German and Japanese "
                "strings are reviewed by native speakers before release.",
                "atlas forms are validated with zod schemas shared with the backend through "
                "the @acme/contracts package.",
            ],
            [
                "atlas's Lighthouse performance score must stay above 90 on the dashboard; "
                "CI fails the pull request otherwise.",
                "Feature flags in atlas come from LaunchDarkly and are read once at boot; a "
                "change needs a page reload.",
                "atlas keeps WCAG 2.1 AA: every icon-only button needs an aria-label, checked "
                "by eslint-plugin-jsx-a11y.",
                "The atlas table component virtualises rows with react-window once a table "
                "has more than 200 rows.",
            ],
            [
                "atlas is deployed to Cloudflare Pages; preview URLs are created for every "
                "pull request.",
                "Sentry in atlas samples 10% of sessions for performance traces but keeps "
                "every error.",
                "Uploads in atlas go straight to S3 with presigned URLs valid for 15 minutes; "
                "files over 100 MB use multipart.",
                "atlas supports the last two versions of each major browser; Safari 15 was "
                "dropped in March.",
            ],
        ],
        "questions": [
            (1, "What library handles data fetched from the API in the web app?"),
            (2, "How did we shrink the first download of the web app?"),
            (3, "Where do colours and spacing values for the UI come from?"),
            (4, "Where does the web app remember whether the user wants the night look?"),
            (5, "Which clock are times shown in on the web app?"),
            (6, "When do the browser automation checks happen, and on what data?"),
            (7, "Who checks the translated text before we ship?"),
            (9, "What rating must the main page hold in automated page-speed audits?"),
            (10, "Does toggling an experiment take effect immediately for a user?"),
            (11, "What accessibility rule applies to controls that only show a symbol?"),
            (12, "How does the UI stay fast with very long lists of records?"),
            (14, "How much of the user activity do we record to investigate slowness?"),
            (15, "How do users send big attachments from the browser?"),
            (16, "Which older Apple web clients did the front end stop working with?"),
        ],
    },
    {
        "key": "rl",
        "room": "Research",
        "tags": ["relay"],
        "bursts": [
            [
                "relay consumes the orders topic from Kafka with a consumer group per "
                "environment; offsets are committed only after the batch is written to "
                "BigQuery.",
                "relay's Airflow DAGs run on Cloud Composer 2; the daily_rollup DAG starts "
                "at 04:00 UTC and must finish before 07:00.",
                "relay writes Parquet partitioned by event_date and country to the "
                "gs://relay-lake bucket.",
                "PII in relay is hashed with a salted SHA-256 before it reaches the lake; the "
                "salt lives in Secret Manager.",
            ],
            [
                "relay's schema registry enforces BACKWARD compatibility; adding a field needs "
                "a default.",
                "Late events in relay are accepted up to 72 hours; anything older goes to the "
                "quarantine table for review.",
                "relay deduplicates events on (event_id, source) with a 7-day window in "
                "BigQuery MERGE statements.",
                "The relay team owns the pipeline; on-call rotates weekly on Mondays via "
                "PagerDuty.",
            ],
            [
                "relay's Great Expectations suite blocks a load when more than 1% of rows "
                "fail validation.",
                "relay backfills run with --max-active-runs 2 so they do not starve the "
                "daily schedule.",
                "BigQuery costs for relay are capped by a per-project quota of 50 TB scanned "
                "per day.",
                "relay's dbt models are tested with unique and not_null on every primary key.",
            ],
            [
                "relay exports the weekly revenue report as CSV to the finance SFTP server "
                "every Monday at 06:00.",
                "relay uses Python 3.11 and Poetry; the lock file is updated by Renovate once "
                "a week.",
                "Streaming in relay is done with Dataflow; autoscaling is capped at 20 workers.",
                "relay retains raw events for 400 days, then a lifecycle rule deletes them.",
            ],
        ],
        "questions": [
            (1, "When does the pipeline record how far it has read in the message stream?"),
            (2, "By what hour must the once-a-day aggregation workflow be done?"),
            (3, "How are the analytics files organised in cloud storage?"),
            (4, "How do we protect personal data before it is stored for analytics?"),
            (5, "What do I need when I introduce a new column in an event format?"),
            (6, "What happens to events that arrive several days after they happened?"),
            (7, "How does the pipeline avoid counting the same event twice?"),
            (9, "When does a data quality check halt an import?"),
            (10, "How do we keep re-running history from holding up the routine jobs?"),
            (11, "Is there a limit on how much the warehouse queries can read in 24 hours?"),
            (13, "How does the accounting team get the income numbers each week?"),
            (14, "What keeps the pinned package versions of the pipeline fresh?"),
            (15, "What is the maximum number of machines for the real-time processing?"),
            (16, "How long do we keep the unprocessed data?"),
        ],
    },
    {
        "key": "hb",
        "room": "Configuration",
        "tags": ["harbor"],
        "bursts": [
            [
                "harbor's clusters run GKE 1.29 with release channel REGULAR; node pools "
                "auto-upgrade on Sundays between 01:00 and 05:00.",
                "All harbor infrastructure is in Terraform 1.7 with state in a GCS bucket "
                "and state locking on.",
                "harbor's ingress is the GKE Gateway API with Google-managed certificates; "
                "nginx-ingress was removed in January.",
            ],
            [
                "Secrets for harbor workloads come from External Secrets Operator syncing "
                "Google Secret Manager every hour.",
                "harbor uses Argo CD for deploys; the apps-of-apps root lives in the "
                "harbor-deploy repository.",
                "harbor's Prometheus keeps 15 days of metrics; older data is in Thanos on "
                "object storage for a year.",
                "Pod disruption budgets in harbor require minAvailable 2 for every "
                "customer-facing service.",
            ],
            [
                "harbor's egress goes through Cloud NAT with two static IPs that partners "
                "allow-list.",
                "Backups of harbor's Cloud SQL instances are taken daily and kept 30 days; "
                "point-in-time recovery covers 7 days.",
                "harbor's staging cluster scales to zero nodes at 20:00 on weekdays to save cost.",
                "Container images for harbor are built by Cloud Build and signed with "
                "cosign; unsigned images are rejected by Binary Authorization.",
                "harbor's DNS zone is managed by external-dns with a TXT owner record so it "
                "never touches hand-made entries.",
            ],
            [
                "harbor alerts route through Alertmanager to the #ops-alerts Slack channel, "
                "and critical ones page on-call.",
                "Resource requests in harbor are enforced by a Kyverno policy: a pod without "
                "CPU and memory requests is denied.",
                "harbor's VPN for engineers is Tailscale with SSO through Okta.",
                "harbor's disaster recovery drill runs every quarter by restoring production "
                "into the europe-west4 region.",
            ],
        ],
        "questions": [
            (1, "When can the Kubernetes machines patch themselves?"),
            (2, "Where is the record of what cloud resources exist kept?"),
            (3, "What routes outside web traffic into the clusters now?"),
            (4, "How do passwords and keys get into the running containers?"),
            (5, "What tool rolls out new versions of the services?"),
            (6, "How long can we look back at monitoring history?"),
            (8, "Which fixed addresses do our outgoing calls come from?"),
            (9, "How far back can we restore the managed database?"),
            (10, "Why is the test environment empty in the evening?"),
            (11, "How do we make sure only vetted artifacts get deployed to production?"),
            (
                12,
                "How do we stop automation clobbering domain settings people created manually?",
            ),
            (14, "What happens to a workload that does not declare how much it needs?"),
            (15, "How do staff get onto the private network?"),
            (16, "How often do we practise recovering from losing the main data centre?"),
        ],
    },
    {
        "key": "ql",
        "room": "Planning",
        "tags": ["quill"],
        "bursts": [
            [
                "quill parses its arguments with clap 4 derive macros; subcommands are "
                "enums in src/cli.rs.",
                "quill's config file is TOML at ~/.config/quill/config.toml; environment "
                "variables prefixed QUILL_ override it.",
                "quill is released with cargo-dist: a tag v* builds binaries for Linux, "
                "macOS and Windows and a Homebrew formula.",
                "quill's minimum supported Rust version is 1.74; CI checks it with cargo-msrv.",
            ],
            [
                "quill renders Markdown with pulldown-cmark and highlights code with syntect "
                "using the base16-ocean theme.",
                "quill caches rendered pages under ~/.cache/quill keyed by the BLAKE3 hash "
                "of the source.",
                "quill's error messages use miette so a bad front matter shows the line and "
                "a caret.",
                "quill watches files with the notify crate and debounces changes for 200 ms "
                "before rebuilding.",
            ],
            [
                "quill is dual-licensed MIT or Apache-2.0; contributors sign off commits with DCO.",
                "quill's plugins are WebAssembly modules run in wasmtime with no file system "
                "access by default.",
                "quill's serve command listens on 127.0.0.1:4173 and reloads the browser "
                "through a WebSocket.",
                "Snapshot tests in quill use insta; update them with cargo insta review.",
            ],
            [
                "quill's search index is built with tantivy at build time and shipped as a "
                "static file.",
                "quill telemetry is opt-in only and sends nothing unless QUILL_TELEMETRY=1.",
                "quill's 1.0 is planned for when the plugin interface is declared stable; "
                "until then minor versions may break plugins.",
                "Fuzzing of quill's front matter parser runs with cargo-fuzz for an hour "
                "each night on OSS-Fuzz.",
            ],
        ],
        "questions": [
            (1, "How does the command-line tool read its flags and options?"),
            (
                2,
                "Where do the docs tool's user settings live, and what takes precedence?",
            ),
            (3, "How are the installable programs for each operating system produced?"),
            (4, "What is the oldest compiler release the tool must compile with?"),
            (5, "What colours the snippets in generated pages?"),
            (6, "Where is already-generated output kept to avoid redoing work?"),
            (7, "How does the tool point at the exact spot of a broken header block?"),
            (8, "How long does the tool wait after an edit before regenerating?"),
            (10, "Can extensions read my disk?"),
            (11, "On what address does the local preview run?"),
            (13, "How does finding text on the generated site work without a backend?"),
            (14, "Does the tool report usage data?"),
            (15, "What has to happen before the first major release?"),
            (16, "How is the header-block reader exercised with random input?"),
        ],
    },
]


def generate(seed: int = SEED) -> dict:
    """The drawers in writing order and the questions with their gold note ids. Projects
    interleave by burst, as work moves between them: a burst of one, then of another."""
    rng = random.Random(seed)
    drawers: list[dict] = []
    questions: list[dict] = []
    when = START
    rounds = max(len(p["bursts"]) for p in PROJECTS)
    numbers = {p["key"]: 0 for p in PROJECTS}
    for r in range(rounds):
        order = list(PROJECTS)
        rng.shuffle(order)
        for project in order:
            if r >= len(project["bursts"]):
                continue
            when += timedelta(hours=rng.choice((1, 2, 4, 19, 22, 44)),
                              minutes=rng.randint(0, 59))  # fmt: skip
            for i, text in enumerate(project["bursts"][r]):
                if i:
                    when += timedelta(seconds=rng.randint(10, 120))
                numbers[project["key"]] += 1
                drawers.append(
                    {
                        "id": f"{project['key']}{numbers[project['key']]:02d}",
                        "text": text,
                        "room": project["room"],
                        "tags": list(project["tags"]),
                        "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "burst": f"{project['key']}{r}",
                    }
                )
    ids = {d["id"] for d in drawers}
    for project in PROJECTS:
        for n, question in project["questions"]:
            gold = f"{project['key']}{n:02d}"
            if gold not in ids:
                raise SystemExit(f"{project['key']}: no note {n} for {question!r}")
            questions.append({"id": f"p{len(questions):03d}", "question": question,
                              "category": "paraphrase", "gold": [gold]})  # fmt: skip
    return {"name": "paraphrase-notes", "seed": seed, "drawers": drawers, "questions": questions}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    args = parser.parse_args(argv)
    return write_or_check(dumps(generate()), args.out, args.check)


if __name__ == "__main__":
    sys.exit(main())
