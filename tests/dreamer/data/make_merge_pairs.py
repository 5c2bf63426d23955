"""Writes ``merge_pairs.jsonl``: the labelled pairs the dreamer's merge rule is tuned on.

    .venv/bin/python tests/dreamer/data/make_merge_pairs.py

Each base note is a coding agent's note (configs, incidents, decisions, people, deploys).
Every base gets two mechanical true duplicates (punctuation, casing, whitespace or a
filler prefix, in rotation) and its hand-written variants: paraphrases and reorderings
that state the same thing (label ``same``), and the same template with one fact changed
(label ``different``; ``kind`` names what changed: a number, a version, a date, a time,
an identifier, a path, a URL, an email, a name, a quoted string, a polarity flip, or an
ordinary word). ``merge_pairs_heldout.jsonl`` beside it is written by hand from other
templates and never used to tune the rule.
"""

from __future__ import annotations

import json
from pathlib import Path

S, D = "same", "different"

# (base note, [(variant, label, kind), ...])
NOTES: list[tuple[str, list[tuple[str, str, str]]]] = [
    # -- configs ---------------------------------------------------------------------
    (
        "The API rate limit is 100 requests per minute.",
        [
            ("The API rate limit is 1000 requests per minute.", D, "number"),
            ("The API rate limit is 100 requests per second.", D, "word"),
            ("The API rate limit is 100 requests per minute per token.", D, "word"),
            ("The API rate limit is 100 requests a minute.", S, "paraphrase"),
            ("Per minute, the API rate limit is 100 requests.", S, "reorder"),
        ],
    ),
    (
        "The API rate limit is 1,000 requests per minute.",
        [
            ("The API rate limit is 1000 requests per minute.", S, "number-format"),
            ("The API rate limit is 1k requests per minute.", S, "number-format"),
            ("The API rate limit is 10,000 requests per minute.", D, "number"),
        ],
    ),
    (
        "The staging DB is on port 5433.",
        [
            ("The production DB is on port 5432.", D, "number"),
            ("The production DB is on port 5433.", D, "word"),
            ("The staging DB is on port 5432.", D, "number"),
            ("The staging database is on port 5433.", S, "paraphrase"),
            ("Staging DB: port 5433.", S, "paraphrase"),
        ],
    ),
    (
        "Postgres max_connections is set to 200 on the primary.",
        [
            ("Postgres max_connections is set to 500 on the primary.", D, "number"),
            ("Postgres max_connections is set to 200 on the replica.", D, "word"),
            ("Postgres shared_buffers is set to 200 on the primary.", D, "identifier"),
            ("On the primary, Postgres max_connections is set to 200.", S, "reorder"),
        ],
    ),
    (
        "The Redis cache TTL is 300 seconds for session keys.",
        [
            ("The Redis cache TTL is 30 seconds for session keys.", D, "number"),
            ("The Redis cache TTL is 300 minutes for session keys.", D, "word"),
            ("The Redis cache TTL is 300 seconds for user keys.", D, "word"),
            ("For session keys the Redis cache TTL is 300 seconds.", S, "reorder"),
            ("Session keys have a Redis cache TTL of 300 seconds.", S, "paraphrase"),
        ],
    ),
    (
        "The service reads its settings from /etc/payments/config.yaml.",
        [
            ("The service reads its settings from /etc/payments/config.yml.", D, "path"),
            ("The service reads its settings from /etc/billing/config.yaml.", D, "path"),
            ("The service reads its settings from /etc/payments/config.yaml", S, "punctuation"),
            ("Settings are read by the service from /etc/payments/config.yaml.", S, "reorder"),
        ],
    ),
    (
        "Set DATABASE_URL in .env.local before running the dev server.",
        [
            ("Set REDIS_URL in .env.local before running the dev server.", D, "identifier"),
            ("Set DATABASE_URL in .env.test before running the dev server.", D, "path"),
            ("Set DATABASE_URL in .env.local after running the dev server.", D, "polarity"),
            ("Before running the dev server, set DATABASE_URL in .env.local.", S, "reorder"),
        ],
    ),
    (
        "The upload limit is 25 MB per file.",
        [
            ("The upload limit is 25 GB per file.", D, "word"),
            ("The upload limit is 52 MB per file.", D, "number"),
            ("The upload limit is 25 MB per request.", D, "word"),
            ("Upload limit: 25 MB per file.", S, "paraphrase"),
            ("The upload limit is 25 MB for each file.", S, "paraphrase"),
        ],
    ),
    (
        "Request timeouts are 30s for the public API.",
        [
            ("Request timeouts are 60s for the public API.", D, "number"),
            ("Request timeouts are 30s for the internal API.", D, "word"),
            ("Request timeouts are 30s for the private API.", D, "polarity"),
            ("For the public API, request timeouts are 30s.", S, "reorder"),
        ],
    ),
    (
        "The feature flag dark_mode is enabled in staging.",
        [
            ("The feature flag dark_mode is disabled in staging.", D, "polarity"),
            ("The feature flag dark_mode is enabled in production.", D, "word"),
            ("The feature flag new_nav is enabled in staging.", D, "identifier"),
            ("The feature flag dark_mode is not enabled in staging.", D, "negation"),
            ("In staging, the feature flag dark_mode is enabled.", S, "reorder"),
        ],
    ),
    (
        "Debug logging is on for the worker pods.",
        [
            ("Debug logging is off for the worker pods.", D, "polarity"),
            ("Debug logging is on for the web pods.", D, "word"),
            ("Debug logging is on for all worker pods.", S, "filler"),
        ],
    ),
    (
        "STRICT_MODE=true in the CI environment.",
        [
            ("STRICT_MODE=false in the CI environment.", D, "polarity"),
            ("STRICT_MODE=true in the dev environment.", D, "word"),
            ("In the CI environment, STRICT_MODE=true.", S, "reorder"),
        ],
    ),
    (
        "Anonymous uploads are allowed on the demo instance.",
        [
            ("Anonymous uploads are forbidden on the demo instance.", D, "polarity"),
            ("Anonymous uploads are denied on the demo instance.", D, "polarity"),
            ("Anonymous downloads are allowed on the demo instance.", D, "word"),
            ("On the demo instance, anonymous uploads are allowed.", S, "reorder"),
        ],
    ),
    (
        "The minimum password length is 12 characters.",
        [
            ("The maximum password length is 12 characters.", D, "polarity"),
            ("The minimum password length is 16 characters.", D, "number"),
            ("The minimum password length is twelve characters.", S, "number-format"),
            ("Minimum password length: 12 characters.", S, "paraphrase"),
        ],
    ),
    (
        "Webhook retries back off exponentially up to 5 attempts.",
        [
            ("Webhook retries back off exponentially up to 3 attempts.", D, "number"),
            ("Webhook retries back off linearly up to 5 attempts.", D, "word"),
            ("webhook retries back off exponentially up to 5 attempts", S, "casing"),
        ],
    ),
    (
        "The docs site is served from https://docs.acme.dev/v2/.",
        [
            ("The docs site is served from https://docs.acme.dev/v3/.", D, "url"),
            ("The docs site is served from https://docs.acme.io/v2/.", D, "url"),
            ("The docs site is served from https://docs.acme.dev/v2/", S, "punctuation"),
        ],
    ),
    (
        "The S3 bucket for build artifacts is acme-ci-artifacts in us-east-1.",
        [
            ("The S3 bucket for build artifacts is acme-ci-cache in us-east-1.", D, "identifier"),
            (
                "The S3 bucket for build artifacts is acme-ci-artifacts in us-west-2.",
                D,
                "identifier",
            ),
            (
                "The S3 bucket for build artifacts is acme-ci-artifacts, in us-east-1.",
                S,
                "punctuation",
            ),
        ],
    ),
    (
        "The JSON config key is 'retryPolicy', not 'retry_policy'.",
        [
            ("The JSON config key is 'retry_policy', not 'retryPolicy'.", D, "reorder-meaning"),
            ("The JSON config key is 'retryPolicy', not 'retryPolicies'.", D, "quoted"),
            ("The JSON config key is 'retryPolicy' , not 'retry_policy'.", S, "whitespace"),
        ],
    ),
    (
        "Uploads are processed synchronously in the API process.",
        [
            ("Uploads are processed asynchronously in the API process.", D, "polarity"),
            ("Uploads are processed synchronously in the worker process.", D, "word"),
            ("In the API process, uploads are processed synchronously.", S, "reorder"),
        ],
    ),
    # -- incidents -------------------------------------------------------------------
    (
        "The checkout outage started at 14:05 UTC on 2024-11-02.",
        [
            ("The checkout outage started at 14:50 UTC on 2024-11-02.", D, "time"),
            ("The checkout outage started at 14:05 UTC on 2024-11-03.", D, "date"),
            ("The checkout outage ended at 14:05 UTC on 2024-11-02.", D, "polarity"),
            ("The checkout outage started at 14:05 UTC on 2024-11-02", S, "punctuation"),
            ("On 2024-11-02 the checkout outage started at 14:05 UTC.", S, "reorder"),
        ],
    ),
    (
        "The search cluster went down after the 3am reindex.",
        [
            ("The search cluster went down before the 3am reindex.", D, "polarity"),
            ("The search cluster went down after the 4am reindex.", D, "time"),
            ("The search cluster came up after the 3am reindex.", D, "polarity"),
            ("After the 3am reindex, the search cluster went down.", S, "reorder"),
        ],
    ),
    (
        "Error rate increased to 4% after the cache change.",
        [
            ("Error rate decreased to 4% after the cache change.", D, "polarity"),
            ("Error rate increased to 14% after the cache change.", D, "number"),
            ("Error rate increased to 4% after the CDN change.", D, "word"),
            ("Error rate increased to 4 % after the cache change.", S, "whitespace"),
        ],
    ),
    (
        "The root cause of INC-2041 was an expired TLS certificate.",
        [
            ("The root cause of INC-2042 was an expired TLS certificate.", D, "identifier"),
            ("The root cause of INC-2041 was a revoked TLS certificate.", D, "word"),
            ("The root cause of INC-2041 was not an expired TLS certificate.", D, "negation"),
            ("INC-2041 root cause: an expired TLS certificate.", S, "paraphrase"),
        ],
    ),
    (
        "Disk usage on db-primary-1 hit 95% on Monday.",
        [
            ("Disk usage on db-primary-2 hit 95% on Monday.", D, "identifier"),
            ("Disk usage on db-primary-1 hit 85% on Monday.", D, "number"),
            ("Disk usage on db-primary-1 hit 95% on Tuesday.", D, "date"),
            ("On Monday, disk usage on db-primary-1 hit 95%.", S, "reorder"),
        ],
    ),
    (
        "The memory leak was traced to commit 3fa9c1e in the parser.",
        [
            ("The memory leak was traced to commit 3fa9c2e in the parser.", D, "identifier"),
            ("The memory leak was traced to commit 3fa9c1e in the scheduler.", D, "word"),
            ("The memory leak was traced to commit 3fa9c1e in the parser", S, "punctuation"),
        ],
    ),
    (
        "Alerts for the billing queue page Priya first.",
        [
            ("Alerts for the billing queue page Marco first.", D, "name"),
            ("Alerts for the billing queue page Priya last.", D, "polarity"),
            ("Alerts for the email queue page Priya first.", D, "word"),
            ("alerts for the billing queue page priya first", S, "casing"),
        ],
    ),
    (
        "The nightly backup job failed on 2025-01-14.",
        [
            ("The nightly backup job succeeded on 2025-01-14.", D, "polarity"),
            ("The nightly backup job failed on 2025-01-15.", D, "date"),
            ("The weekly backup job failed on 2025-01-14.", D, "word"),
            ("On 2025-01-14 the nightly backup job failed.", S, "reorder"),
            ("The nightly backup job failed on 14 January 2025.", S, "paraphrase"),
        ],
    ),
    (
        "Latency p95 was above 800 ms during the incident.",
        [
            ("Latency p95 was below 800 ms during the incident.", D, "polarity"),
            ("Latency p99 was above 800 ms during the incident.", D, "identifier"),
            ("Latency p95 was above 300 ms during the incident.", D, "number"),
            ("During the incident, latency p95 was above 800 ms.", S, "reorder"),
        ],
    ),
    (
        "The incident review for the DNS outage is on March 4.",
        [
            ("The incident review for the DNS outage is on March 14.", D, "date"),
            ("The incident review for the DNS outage is on April 4.", D, "date"),
            ("The incident review for the DNS outage is on March 4", S, "punctuation"),
        ],
    ),
    (
        "Traffic from 203.0.113.7 was blocked at the edge.",
        [
            ("Traffic from 203.0.113.8 was blocked at the edge.", D, "identifier"),
            ("Traffic from 203.0.113.7 was unblocked at the edge.", D, "polarity"),
            ("Traffic from 203.0.113.7 was blocked at the edge", S, "punctuation"),
            ("The edge blocked traffic from 203.0.113.7.", S, "reorder"),
        ],
    ),
    (
        "Replication lag grew to 40 seconds during the migration.",
        [
            ("Replication lag grew to 4 seconds during the migration.", D, "number"),
            ("Replication lag shrank to 40 seconds during the migration.", D, "polarity"),
            ("During the migration, replication lag grew to 40 seconds.", S, "reorder"),
        ],
    ),
    # -- decisions -------------------------------------------------------------------
    (
        "Use Node 18 for the frontend build.",
        [
            ("Use Node 20 for the frontend build.", D, "number"),
            ("Use Node 18 for the backend build.", D, "word"),
            ("Do not use Node 18 for the frontend build.", D, "negation"),
            ("For the frontend build, use Node 18.", S, "reorder"),
            ("The frontend build uses Node 18.", S, "paraphrase"),
        ],
    ),
    (
        "We decided to use PostgreSQL instead of MySQL for the ledger.",
        [
            ("We decided to use MySQL instead of PostgreSQL for the ledger.", D, "reorder-meaning"),
            ("We decided to use PostgreSQL instead of MySQL for the catalog.", D, "word"),
            ("We decided to use PostgreSQL instead of MongoDB for the ledger.", D, "name"),
            ("We decided to use PostgreSQL instead of MySQL for the ledger!", S, "punctuation"),
        ],
    ),
    (
        "Decision: all new services must be written in Go.",
        [
            ("Decision: all new services must be written in Rust.", D, "name"),
            ("Decision: all new services should be written in Go.", D, "word"),
            ("Decision: no new services must be written in Go.", D, "negation"),
            ("Decision: all new services must be written in Go", S, "punctuation"),
        ],
    ),
    (
        "We use ruff instead of flake8 for linting.",
        [
            ("We use flake8 instead of ruff for linting.", D, "reorder-meaning"),
            ("We use ruff instead of pylint for linting.", D, "identifier"),
            ("We use ruff instead of flake8 for formatting.", D, "word"),
            ("For linting, we use ruff instead of flake8.", S, "reorder"),
        ],
    ),
    (
        "The team accepted ADR-007 about event sourcing.",
        [
            ("The team rejected ADR-007 about event sourcing.", D, "polarity"),
            ("The team accepted ADR-008 about event sourcing.", D, "identifier"),
            ("The team accepted ADR-007 about event sourcing", S, "punctuation"),
        ],
    ),
    (
        "Feature branches are deleted after merge.",
        [
            ("Feature branches are deleted before merge.", D, "polarity"),
            ("Feature branches are kept after merge.", D, "word"),
            ("Feature branches are never deleted after merge.", D, "negation"),
            ("After merge, feature branches are deleted.", S, "reorder"),
            ("Feature branches get deleted after merging.", S, "paraphrase"),
        ],
    ),
    (
        "Public endpoints always require an API key.",
        [
            ("Public endpoints never require an API key.", D, "polarity"),
            ("Private endpoints always require an API key.", D, "polarity"),
            ("Public endpoints always require an OAuth token.", D, "word"),
            ("Public endpoints always require an API key!", S, "punctuation"),
        ],
    ),
    (
        "The retry queue is required for the payment worker.",
        [
            ("The retry queue is optional for the payment worker.", D, "polarity"),
            ("The retry queue is required for the email worker.", D, "word"),
            ("the retry queue is required for the payment worker", S, "casing"),
        ],
    ),
    (
        "We add a CHANGELOG entry for every user-facing change.",
        [
            ("We remove a CHANGELOG entry for every user-facing change.", D, "polarity"),
            ("We add a CHANGELOG entry for every internal change.", D, "word"),
            ("For every user-facing change we add a CHANGELOG entry.", S, "reorder"),
        ],
    ),
    (
        "Integration tests run with more than 4 workers in CI.",
        [
            ("Integration tests run with less than 4 workers in CI.", D, "polarity"),
            ("Integration tests run with more than 8 workers in CI.", D, "number"),
            ("Unit tests run with more than 4 workers in CI.", D, "word"),
            ("In CI, integration tests run with more than 4 workers.", S, "reorder"),
        ],
    ),
    (
        "Scale the API tier up when CPU stays above 70% for 5 minutes.",
        [
            ("Scale the API tier down when CPU stays above 70% for 5 minutes.", D, "polarity"),
            ("Scale the API tier up when CPU stays above 80% for 5 minutes.", D, "number"),
            ("Scale the API tier up when CPU stays above 70% for 15 minutes.", D, "number"),
            ("Scale the API tier up when CPU stays above 70% for 5 minutes", S, "punctuation"),
        ],
    ),
    (
        "Open a new incident channel for every SEV1.",
        [
            ("Close the incident channel for every SEV1.", D, "polarity"),
            ("Open a new incident channel for every SEV2.", D, "identifier"),
            ("For every SEV1, open a new incident channel.", S, "reorder"),
        ],
    ),
    (
        "Start the canary before the full rollout.",
        [
            ("Stop the canary before the full rollout.", D, "polarity"),
            ("Start the canary after the full rollout.", D, "polarity"),
            ("Before the full rollout, start the canary.", S, "reorder"),
        ],
    ),
    # -- people ----------------------------------------------------------------------
    (
        "Alice owns the billing service.",
        [
            ("Bob owns the billing service.", D, "name"),
            ("Alice owns the search service.", D, "word"),
            ("The billing service is owned by Alice.", S, "reorder"),
            ("Alice is the owner of the billing service.", S, "paraphrase"),
        ],
    ),
    (
        "Ask Dmitri Ivanov about the Kafka consumer groups.",
        [
            ("Ask Dmitri Petrov about the Kafka consumer groups.", D, "name"),
            ("Ask Dmitri Ivanov about the Kafka producer groups.", D, "word"),
            ("ask Dmitri Ivanov about the Kafka consumer groups", S, "casing"),
        ],
    ),
    (
        "The security contact is security@acme.dev.",
        [
            ("The security contact is secops@acme.dev.", D, "email"),
            ("The security contact is security@acme.io.", D, "email"),
            ("Security contact: security@acme.dev.", S, "paraphrase"),
            ("Reach the security team at security@acme.dev.", S, "paraphrase"),
        ],
    ),
    (
        "Lena is on call for the data platform this week.",
        [
            ("Lena is on call for the data platform next week.", D, "word"),
            ("Omar is on call for the data platform this week.", D, "name"),
            ("Lena is not on call for the data platform this week.", D, "negation"),
            ("This week, Lena is on call for the data platform.", S, "reorder"),
            ("Lena is the on-call engineer for the data platform this week.", S, "paraphrase"),
        ],
    ),
    (
        "Kenji approved the schema change for the orders table.",
        [
            ("Kenji rejected the schema change for the orders table.", D, "polarity"),
            ("Kenji approved the schema change for the users table.", D, "word"),
            ("Sven approved the schema change for the orders table.", D, "name"),
            ("The schema change for the orders table was approved by Kenji.", S, "reorder"),
            ("Kenji signed off on the schema change for the orders table.", S, "paraphrase"),
        ],
    ),
    (
        "Farah prefers tabs over spaces in the Makefile.",
        [
            ("Farah prefers spaces over tabs in the Makefile.", D, "reorder-meaning"),
            ("Farah prefers tabs over spaces in the Dockerfile.", D, "name"),
            ("Farah prefers tabs over spaces in the Makefile", S, "punctuation"),
        ],
    ),
    (
        "The frontend guild meets on Thursdays at 4pm.",
        [
            ("The frontend guild meets on Tuesdays at 4pm.", D, "date"),
            ("The frontend guild meets on Thursdays at 5pm.", D, "time"),
            ("The backend guild meets on Thursdays at 4pm.", D, "word"),
            ("On Thursdays at 4pm the frontend guild meets.", S, "reorder"),
        ],
    ),
    (
        "Rosa has admin access to the Grafana org.",
        [
            ("Rosa has no admin access to the Grafana org.", D, "negation"),
            ("Rosa has viewer access to the Grafana org.", D, "word"),
            ("Rosa has admin access to the Kibana org.", D, "name"),
            ("Rosa has admin access to the Grafana org!", S, "punctuation"),
        ],
    ),
    (
        "Julia's pull requests need one approval from the platform team.",
        [
            ("Julia's pull requests need two approvals from the platform team.", D, "number"),
            ("Julia's pull requests need one approval from the security team.", D, "word"),
            ("Julia's pull requests need one approval from the platform team", S, "punctuation"),
        ],
    ),
    # -- deploys ---------------------------------------------------------------------
    (
        "auth-service deployed version is 2.4.1.",
        [
            ("auth-service deployed version is 2.5.0.", D, "version"),
            ("user-service deployed version is 2.4.1.", D, "identifier"),
            ("auth-service deployed version is v2.4.1.", S, "number-format"),
            ("The deployed version of auth-service is 2.4.1.", S, "reorder"),
        ],
    ),
    (
        "Deployed web-frontend v1.12.0 to production on 2025-02-10 at 16:20.",
        [
            ("Deployed web-frontend v1.12.1 to production on 2025-02-10 at 16:20.", D, "version"),
            ("Deployed web-frontend v1.12.0 to staging on 2025-02-10 at 16:20.", D, "word"),
            ("Deployed web-frontend v1.12.0 to production on 2025-02-11 at 16:20.", D, "date"),
            ("Deployed web-frontend v1.12.0 to production on 2025-02-10 at 18:20.", D, "time"),
            ("Rolled back web-frontend v1.12.0 in production on 2025-02-10 at 16:20.", D, "word"),
        ],
    ),
    (
        "Build 1042 passed on runner 7.",
        [
            ("Build 1043 passed on runner 7.", D, "number"),
            ("Build 1042 passed on runner 8.", D, "number"),
            ("Build 1042 failed on runner 7.", D, "polarity"),
            ("build 1042 passed on runner 7", S, "casing"),
        ],
    ),
    (
        "The release pipeline pushes images to ghcr.io/acme/api.",
        [
            ("The release pipeline pushes images to ghcr.io/acme/web.", D, "path"),
            ("The release pipeline pulls images from ghcr.io/acme/api.", D, "word"),
            ("The release pipeline pushes images to ghcr.io/acme/api", S, "punctuation"),
        ],
    ),
    (
        "Deploys to production are frozen from December 20 to January 3.",
        [
            ("Deploys to production are frozen from December 18 to January 3.", D, "date"),
            ("Deploys to production are allowed from December 20 to January 3.", D, "polarity"),
            ("Deploys to staging are frozen from December 20 to January 3.", D, "word"),
        ],
    ),
    (
        "The Helm chart sets replicas: 3 for the gateway.",
        [
            ("The Helm chart sets replicas: 5 for the gateway.", D, "number"),
            ("The Helm chart sets replicas: 3 for the scheduler.", D, "word"),
            ("The Helm chart sets  replicas: 3  for the gateway.", S, "whitespace"),
        ],
    ),
    (
        "Migrations run before the new pods start.",
        [
            ("Migrations run after the new pods start.", D, "polarity"),
            ("Migrations run before the old pods stop.", D, "polarity"),
            ("Before the new pods start, migrations run.", S, "reorder"),
        ],
    ),
    (
        "The health check at /api/health must return 200 within 2 seconds.",
        [
            ("The health check at /api/ready must return 200 within 2 seconds.", D, "path"),
            ("The health check at /api/health must return 204 within 2 seconds.", D, "number"),
            ("The health check at /api/health must return 200 within 5 seconds.", D, "number"),
            (
                "The health check at /api/health must return 200 within two seconds.",
                S,
                "number-format",
            ),
        ],
    ),
    (
        "The canary deploy of checkout 3.8.0 succeeded in eu-west-1.",
        [
            ("The canary deploy of checkout 3.8.0 failed in eu-west-1.", D, "polarity"),
            ("The canary deploy of checkout 3.9.0 succeeded in eu-west-1.", D, "version"),
            ("The canary deploy of checkout 3.8.0 succeeded in ap-south-1.", D, "identifier"),
            ("In eu-west-1, the canary deploy of checkout 3.8.0 succeeded.", S, "reorder"),
        ],
    ),
    (
        "Blue-green cutover for the search API is scheduled for 22:00 on Friday.",
        [
            ("Blue-green cutover for the search API is scheduled for 23:00 on Friday.", D, "time"),
            (
                "Blue-green cutover for the search API is scheduled for 22:00 on Saturday.",
                D,
                "date",
            ),
            (
                "Blue-green cutover for the search API is scheduled for 22:00 on Friday",
                S,
                "punctuation",
            ),
        ],
    ),
    (
        "Smoke tests pass against the new load balancer.",
        [
            ("Smoke tests fail against the new load balancer.", D, "polarity"),
            ("Smoke tests pass against the old load balancer.", D, "word"),
            ("smoke tests pass against the new load balancer", S, "casing"),
            ("The smoke tests are passing against the new load balancer.", S, "paraphrase"),
        ],
    ),
    (
        "The rollback script lives in scripts/rollback.sh.",
        [
            ("The rollback script lives in scripts/deploy.sh.", D, "path"),
            ("The rollback script lives in tools/rollback.sh.", D, "path"),
            ("The rollback script lives in scripts/rollback.sh", S, "punctuation"),
            ("The rollback script is in scripts/rollback.sh.", S, "paraphrase"),
        ],
    ),
    (
        "Deploy notifications go to #deploys in Slack.",
        [
            ("Deploy notifications go to #incidents in Slack.", D, "identifier"),
            ("Deploy notifications go to #deploys in Teams.", D, "name"),
            ("Deploy notifications go to #deploys in Slack", S, "punctuation"),
        ],
    ),
    (
        "The mobile app release 5.2 is the first to support Android 14.",
        [
            ("The mobile app release 5.3 is the first to support Android 14.", D, "number"),
            ("The mobile app release 5.2 is the last to support Android 14.", D, "polarity"),
            ("The mobile app release 5.2 is the first to support Android 15.", D, "number"),
            ("The mobile app release 5.2 is the first to support iOS 14.", D, "name"),
        ],
    ),
    (
        "The cron job cleanup-tmp runs every day at 04:30.",
        [
            ("The cron job cleanup-logs runs every day at 04:30.", D, "identifier"),
            ("The cron job cleanup-tmp runs every day at 05:30.", D, "time"),
            ("The cron job cleanup-tmp runs every day at 04:30", S, "punctuation"),
            ("Every day at 04:30, the cron job cleanup-tmp runs.", S, "reorder"),
        ],
    ),
    (
        "Port 8080 is open on the staging firewall.",
        [
            ("Port 8080 is closed on the staging firewall.", D, "polarity"),
            ("Port 8443 is open on the staging firewall.", D, "number"),
            ("On the staging firewall, port 8080 is open.", S, "reorder"),
            ("The staging firewall has port 8080 open.", S, "paraphrase"),
        ],
    ),
    (
        "The CDN cache is purged after every frontend deploy.",
        [
            ("The CDN cache is not purged after every frontend deploy.", D, "negation"),
            ("The CDN cache is purged after every backend deploy.", D, "word"),
            ("After every frontend deploy the CDN cache is purged.", S, "reorder"),
        ],
    ),
    (
        "Pin terraform to 1.6.4 and the AWS provider to 5.31.0.",
        [
            ("Pin terraform to 1.6.5 and the AWS provider to 5.31.0.", D, "version"),
            ("Pin terraform to 1.6.4 and the AWS provider to 5.30.0.", D, "version"),
            ("Terraform is pinned to 1.6.4 and the AWS provider to 5.31.0.", S, "paraphrase"),
        ],
    ),
    (
        "The status page is https://status.acme.dev.",
        [
            ("The status page is https://status.acme.com.", D, "url"),
            ("The status page is http://status.acme.dev.", D, "url"),
            ("Status page: https://status.acme.dev", S, "paraphrase"),
        ],
    ),
    (
        'The commit message prefix for fixes is "fix:".',
        [
            ('The commit message prefix for fixes is "feat:".', D, "quoted"),
            ('The commit message prefix for fixes is "fix(scope):".', D, "quoted"),
            ('For fixes, the commit message prefix is "fix:".', S, "reorder"),
        ],
    ),
    # -- units (issue 29: a unit written as /, per or a, short or long, is one fact) ------
    (
        "The search API allows 100 queries per second per client.",
        [
            ("The search API allows 100 queries/second per client.", S, "unit"),
            ("The search API allows 100 queries a second per client.", S, "unit"),
            ("The search API allows 100 queries/sec per client.", S, "unit"),
            ("The search API allows 100 queries/minute per client.", D, "word"),
            ("The search API allows 100 queries per hour per client.", D, "word"),
            ("The search API allows 10 queries/second per client.", D, "number"),
        ],
    ),
    (
        "Requests to the payment gateway time out after 250 ms.",
        [
            ("Requests to the payment gateway time out after 250 milliseconds.", S, "unit"),
            ("Requests to the payment gateway time out after 250ms.", S, "unit"),
            ("Requests to the payment gateway time out after 250 msec.", S, "unit"),
            ("Requests to the payment gateway time out after 250 seconds.", D, "word"),
            ("Requests to the payment gateway time out after 250 s.", D, "word"),
        ],
    ),
    (
        "Each CI runner has 32 GB of memory.",
        [
            ("Each CI runner has 32 gigabytes of memory.", S, "unit"),
            ("Each CI runner has 32GB of memory.", S, "unit"),
            ("Each CI runner has 32 MB of memory.", D, "word"),
            ("Each CI runner has 32 GB of disk.", D, "word"),
        ],
    ),
    (
        "The artifact upload streams at 40 MB/s.",
        [
            ("The artifact upload streams at 40 MB per second.", S, "unit"),
            ("The artifact upload streams at 40 megabytes a second.", S, "unit"),
            ("The artifact upload streams at 40 MB/min.", D, "word"),
            ("The artifact upload streams at 40 GB/s.", D, "word"),
            ("The artifact upload streams at 4 MB/s.", D, "number"),
        ],
    ),
    (
        "The health check polls every 5 minutes.",
        [
            ("The health check polls every 5 min.", S, "unit"),
            ("The health check polls every 5 mins.", S, "unit"),
            ("The health check polls every 5min.", S, "unit"),
            ("The health check polls every 5 seconds.", D, "word"),
            ("The health check polls every 5 hours.", D, "word"),
        ],
    ),
    (
        "Autoscaling keeps min 3 replicas per zone.",
        [
            ("Autoscaling keeps max 3 replicas per zone.", D, "polarity"),
            ("Autoscaling keeps min 3 replicas per region.", D, "word"),
            ("Autoscaling keeps a minimum of 3 replicas per zone.", S, "paraphrase"),
        ],
    ),
]

FILLERS = ["Note: ", "FYI, ", "Reminder: ", "Heads up: "]


def mechanical(i: int, text: str) -> list[tuple[str, str, str]]:
    """Two true duplicates of ``text`` by rewrites that change no fact."""
    bare = text.rstrip(".")
    rewrites = [
        (bare, "punctuation"),
        (text.lower(), "casing"),
        (text.replace(" ", "  ", 2) + "\n", "whitespace"),
        (FILLERS[i % len(FILLERS)] + text[0].lower() + text[1:], "filler"),
        (bare + "!", "punctuation"),
        (bare.upper() if len(text) < 40 else text.lower().rstrip("."), "casing"),
    ]
    picked = [rewrites[i % 4], rewrites[4 + i % 2]]
    if picked[0][0] == text:  # a note already in lower case has no casing twin
        picked[0] = rewrites[(i + 1) % 4]
    return [(b, S, kind) for b, kind in picked]


def pairs() -> list[dict[str, str]]:
    out = []
    for i, (base, variants) in enumerate(NOTES):
        for b, label, kind in mechanical(i, base) + variants:
            out.append({"a": base, "b": b, "label": label, "kind": kind})
    return out


def main() -> None:
    path = Path(__file__).with_name("merge_pairs.jsonl")
    rows = pairs()
    with path.open("w") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
    same = sum(r["label"] == S for r in rows)
    print(f"{path}: {len(rows)} pairs, {same} same, {len(rows) - same} different")


if __name__ == "__main__":
    main()
