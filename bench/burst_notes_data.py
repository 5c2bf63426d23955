"""A fourth retrieval set: self-contained notes written in bursts, from public sources.

    .venv/bin/python bench/burst_notes_data.py [--out bench/data/burst_notes.json] [--check]

How a coding agent writes notes at the end of a task: several in a row, each standing
alone (a decision, a version, a setting, a date, a cause), about one project or one
incident, a few seconds to two minutes apart in one room. The other notes sets were not
written this way (the generated engineering notes mix topics within a session, the project
history is one commit at a time), and deep recall's episode rules (a note written within
30 minutes after another in the same room borrows its context) meet this shape at every
note: every pair of neighbours is an episode, and no note needs its neighbour to be
understood.

Source. Each burst is the facts of one public document (a changelog, release notes, an
architecture decision record, an incident write-up; ``SOURCES`` names them), kept as facts
and written as an agent would note them, never the document's own sentences. The
questions were written with the notes, as a user asks (paraphrased: the note's rare
words are avoided where a user would not know them), each with the one note that answers
it, before any ranking rule was measured on this set; it is for judging rules, never for
choosing them (``bench/replay.py --sets bursts``).

Deterministic: timestamps come from a fixed seed (seconds to two minutes within a burst,
hours to days between bursts), and ``--check`` says whether the committed file is current.
Every note of this set is an independent note: ``bench/probe_relatedness.py`` labels every
neighbouring pair of it "not a conversation".
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eng_notes_data import dumps, write_or_check

SEED = 20261130
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "burst_notes.json"
START = datetime(2026, 2, 2, 9, 5, tzinfo=UTC)

# Each burst: the prefix of its note ids, the room an agent would use, tags, where the
# facts came from, the notes in writing order, and questions as (note number, question,
# category). Categories: what (a fact), how (what to do), version (which release),
# when (a date or time), why (a cause or reason), number (a figure).
BURSTS: list[dict] = [
    {
        "key": "hx",
        "room": "Backend",
        "tags": ["httpx", "dependencies"],
        "sources": ["https://github.com/encode/httpx/blob/master/CHANGELOG.md"],
        "notes": [
            "httpx 0.20.0 (October 2021) stopped following redirects on its own; pass "
            "follow_redirects=True on the Client or on a single request to get it back.",
            "httpx renamed its redirect flag in 0.20.0: allow_redirects is now "
            "follow_redirects, and its default is False.",
            "Since httpx 0.20.0 raise_for_status() raises for anything that is not a 2xx, "
            "informational and redirect responses included, not only 4xx and 5xx.",
            "httpx has shipped its own command-line client (the `httpx` command) since 0.20.0.",
            "httpx responses have is_informational, is_success, is_redirect, "
            "is_client_error and is_server_error properties (added in 0.20.0).",
            "httpx transport API since 0.20.0: handle_request(request) returns a Response; "
            "the timeout of a request sits in request.extensions['timeout'] and "
            "client.send() no longer accepts timeout=.",
            "httpx 0.21.0 runs on the redesigned httpcore backend: keep httpx 0.21.* with "
            "httpcore 0.14.*.",
            "Curio is no longer supported by httpx, dropped in 0.21.0.",
            "httpx 0.22.0 can go through SOCKS5 proxies using the socksio package.",
            "httpx 0.23.0 dropped Python 3.6 and decodes text as utf-8 by default instead "
            "of guessing with charset-normalizer.",
            "httpx 0.23.1 broke API for a point release: RawURL was dropped and upload files "
            "must be opened in binary mode.",
            "httpx 0.24.0 logs the standard way: no custom TRACE level, no HTTPX_LOG_LEVEL "
            "variable, network-level detail at DEBUG.",
            "httpx 0.24.0 encodes a space in query parameters as %20 and leaves forward "
            "slashes alone, like browsers and unlike requests.",
            "httpx 0.24.0 no longer picks up .netrc by itself; add auth=httpx.NetRCAuth() "
            "where we want it.",
            "httpx 0.24.0 removed its rfc3986 dependency.",
            "httpx 0.25.0 (September 2023) dropped Python 3.7 and can talk to HTTPS proxies.",
            "httpx 0.25.0 makes raise_for_status() return the response, so "
            "client.get(url).raise_for_status().json() works in one line.",
            "httpx 0.25.0 added socket_options= on HTTPTransport and AsyncHTTPTransport, for "
            "keepalive and similar TCP flags.",
            "httpx 0.26.0 added the single proxy= argument and deprecated proxies=; mounts= "
            "is the way for per-scheme routing.",
            "httpx 0.27.0 deprecated the app= shortcut; tests should build "
            "transport=httpx.ASGITransport(app=app) or WSGITransport instead.",
            "httpx 0.27.1 decodes zstd-compressed bodies if the zstandard package is "
            "installed: pip install httpx[zstd].",
            "The next httpx release after 0.27.2 adds ssl_context= and drops cert= and "
            "verify=, along with the deprecated proxies= and app= arguments.",
        ],
        "questions": [
            (1, "What do I have to pass so the async HTTP client chases 301s again?", "how"),
            (2, "What was the redirect option called before it was renamed?", "what"),
            (3, "After the 0.20 change, which responses make the status check throw?", "what"),
            (4, "Does httpx come with a terminal tool for making requests?", "what"),
            (5, "Which response attribute tells me the server returned a 5xx?", "what"),
            (6, "Where is the per-request timeout kept in the new transport interface?", "what"),
            (7, "Which httpcore series should be paired with httpx 0.21?", "version"),
            (9, "How can httpx send traffic through a SOCKS proxy?", "how"),
            (10, "What text encoding does httpx assume since 0.23?", "what"),
            (13, "How are spaces in URL query strings encoded by newer httpx?", "what"),
            (14, "How do we still read credentials from the netrc file with httpx?", "how"),
            (17, "Can I chain .json() right after checking the status?", "how"),
            (18, "Where do I set TCP keepalive options for the httpx transport?", "how"),
            (20, "What replaces passing app= when testing an ASGI application?", "how"),
            (21, "Which extra do I install to read zstandard-compressed responses?", "how"),
        ],
    },
    {
        "key": "fl",
        "room": "Backend",
        "tags": ["flask", "dependencies"],
        "sources": ["https://github.com/pallets/flask/blob/main/CHANGES.rst"],
        "notes": [
            "Flask 2.2.0 came out on 2022-08-01 and needs Werkzeug 2.2 or newer.",
            "Flask 2.2 keeps the app and request contexts in Python contextvars instead of "
            "Werkzeug's LocalStack; _app_ctx_stack.top and _request_ctx_stack.top are "
            "deprecated, extensions should store data on g under a unique prefix.",
            "FLASK_ENV and app.env are deprecated as of Flask 2.2: turn debug mode on with "
            "--debug or app.run(debug=True).",
            "Flask 2.2 moved the JSON settings onto the app.json provider; JSON_AS_ASCII, "
            "JSON_SORT_KEYS, JSONIFY_MIMETYPE and JSONIFY_PRETTYPRINT_REGULAR are deprecated.",
            "To use another JSON library with Flask 2.2+, install a different JSONProvider "
            "as app.json; custom json_encoder and json_decoder classes are deprecated.",
            "before_first_request is deprecated in Flask 2.2: run that setup code when the "
            "application is created.",
            "Flask 2.2 views may return a list (sent as JSON like a dict) or a generator directly.",
            "Flask 2.2 added stream_template and stream_template_string to render a template "
            "piece by piece.",
            "The flask command gained --app and --debug options in 2.2, and --env-file to "
            "load one more dotenv file.",
            "Custom commands on app.cli no longer need @with_appcontext since Flask 2.2: an "
            "app context is already active.",
            "flask run lost --eager-loading/--lazy-loading in 2.2; the app loads eagerly "
            "once, then lazily in the reloader.",
            "Setting View.init_every_request = False (Flask 2.2) stops a class-based view "
            "from being instantiated on every request.",
            "Flask 2.1.0 dropped Python 3.6 and requires Click 8.",
            "config.from_json is gone since Flask 2.1; use "
            "config.from_file('settings.json', load=json.load).",
            "safe_join was removed from Flask in 2.1; import it from werkzeug.utils.",
            "Flask 2.1 added Config.from_prefixed_env(): it reads FLASK_-prefixed environment "
            "variables and parses their values as JSON.",
            "flask run has --exclude-patterns (since 2.1) to keep matching files from "
            "restarting the reloader.",
            "Flask 2.0.0 dropped Python 2 and 3.5 and moved to Werkzeug, Jinja2, MarkupSafe "
            "and ItsDangerous 2.x and Click 8.",
            "Since Flask 2.0 a view returning (response, headers) replaces those headers "
            "instead of adding to them; call response.headers.extend() to add.",
            "Flask 2.0.1 registers nested blueprints under their dotted name, and "
            "register_blueprint(name=...) lets one blueprint be registered twice.",
            "send_file renames are final in Flask 2.2: download_name, max_age, etag and path "
            "replace attachment_filename, cache_timeout, add_etags and filename.",
        ],
        "questions": [
            (1, "Which Werkzeug version does Flask 2.2 depend on?", "version"),
            (
                2,
                "What does the web framework use now instead of LocalStack to track the "
                "current request?",
                "what",
            ),
            (
                3,
                "How do we switch debug mode on now that the environment setting is deprecated?",
                "how",
            ),
            (5, "How do I plug orjson into the framework's JSON handling?", "how"),
            (6, "Where should code that used to run before the first request go?", "how"),
            (7, "Can a Flask view just return a Python list and get JSON back?", "what"),
            (9, "How do I load an extra .env file when starting the app from the CLI?", "how"),
            (17, "Which flag stops some files from triggering the dev server restart?", "how"),
            (14, "What replaces loading settings with config.from_json?", "how"),
            (15, "Where is safe_join imported from now?", "what"),
            (
                16,
                "How can the app read its configuration from prefixed environment variables?",
                "how",
            ),
            (21, "What is the new name of the attachment_filename argument?", "what"),
            (
                19,
                "Why did headers from a returned tuple stop being merged into the response?",
                "why",
            ),
            (13, "Which Click version does Flask 2.1 require?", "version"),
        ],
    },
    {
        "key": "tk",
        "room": "Backend",
        "tags": ["tokio", "rust", "dependencies"],
        "sources": ["https://github.com/tokio-rs/tokio/blob/master/tokio/CHANGELOG.md"],
        "notes": [
            "tokio 1.17.0 (February 2022) raised the minimum Rust to 1.49 and moved to mio "
            "0.8 and parking_lot 0.12.",
            "tokio 1.17 fixed a panic in time::sleep when it was given a huge duration.",
            "JoinSet, for managing a group of spawned tasks, arrived in tokio 1.17 but only "
            "with --cfg tokio_unstable.",
            "tokio 1.16.0 fixed a soundness hole in io::Take that could expose uninitialized "
            "memory.",
            "tokio 1.16 reduced false wakeups in the multi-threaded scheduler, up to 20% "
            "more throughput in some workloads.",
            "tokio 1.16 added oneshot::Receiver::blocking_recv and blocking methods on "
            "RwLock, for use from synchronous code.",
            "watch::Receiver::has_changed() exists since tokio 1.16.",
            "TcpSocket::linger and set_linger were added in tokio 1.16.",
            "tokio 1.15 added Interval::reset() and raised the minimum Rust to 1.46.",
            "tokio 1.14 fixed a data race between oneshot::Sender::send and awaiting a "
            "closed oneshot receiver; 1.13.1 carries the same fix.",
            "tokio 1.14 sized the io::copy buffer like std::io::copy.",
            "Mutex::blocking_lock was added in tokio 1.13.",
            "tokio 1.13 added watch::Sender::send_replace.",
            "tokio 1.12 implemented try_recv for mpsc channels.",
            "tokio 1.12 added AsyncSeekExt::rewind and POSIX AIO on FreeBSD.",
            "tokio 1.11 added watch::Sender::subscribe and the first runtime stats.",
            "tokio 1.10.1 fixed a memory leak in UnownedTask.",
            "tokio 1.9 fixed leaks in LocalSet and when a future's output panics on drop; "
            "1.8.3 backports both.",
        ],
        "questions": [
            (
                1,
                "What is the minimum compiler version for the async runtime as of 1.17?",
                "version",
            ),
            (3, "How do I manage a whole group of spawned tasks, and is that stable yet?", "how"),
            (4, "Which release closed the uninitialized memory problem in Take?", "version"),
            (5, "How much faster did the work-stealing scheduler get in 1.16?", "number"),
            (6, "Can I wait for a oneshot value from non-async code?", "how"),
            (7, "How do I check if a watch value changed without awaiting?", "how"),
            (9, "Which version brought a way to restart an interval's timer?", "version"),
            (12, "How do I lock an async mutex from a blocking thread?", "how"),
            (14, "Since when can I poll an mpsc channel without waiting?", "version"),
            (16, "How do I get a new receiver straight from a watch sender?", "how"),
            (17, "Which patch release fixed the UnownedTask leak?", "version"),
        ],
    },
    {
        "key": "gl",
        "room": "incidents",
        "tags": ["gitlab", "postgresql", "postmortem"],
        "sources": [
            "https://about.gitlab.com/blog/2017/02/10/postmortem-of-database-outage-of-january-31/",
            "https://engineering-playbook.vercel.app/dbms/gitlab-2017-database-outage",
            "https://centerconsulting.com/code-library/stories/gitlab-database-deletion-2017",
        ],
        "notes": [
            "GitLab.com outage of 31 January 2017: an engineer ran rm -rf on the PostgreSQL "
            "data directory of db1, the primary, believing he was on db2, the secondary.",
            "The GitLab wipe was stopped a second or two in, but of roughly 300 GB only "
            "about 4.5 GB was left.",
            "That evening started with spam: abusive accounts loaded the GitLab database and "
            "replication to the secondary fell behind; resyncing it led to the wipe.",
            "While fighting the replication lag, GitLab raised max_wal_senders to 32 and cut "
            "max_connections from 8000 to 2000.",
            "GitLab's nightly pg_dump backups had been writing nothing: the tool's PostgreSQL "
            "version did not match the 9.6 server, and the failure emails were rejected.",
            "Azure disk snapshots were not enabled for GitLab's database servers.",
            "GitLab restored from an LVM snapshot about six hours old that an engineer had "
            "happened to take for staging.",
            "Lost in the GitLab outage: about 5,000 projects, 5,000 comments and 700 new "
            "user accounts from the six-hour window.",
            "Git repositories and wikis live on file servers and were not touched; only the "
            "database (issues, merge requests, users, comments) was lost.",
            "GitLab.com was down for about 18 hours; the database was back at 00:14 UTC on "
            "2 February 2017.",
            "GitLab live-streamed its recovery on YouTube and kept a public notes document "
            "while it worked.",
            "Lesson from GitLab: five backup and replication mechanisms existed and none "
            "worked reliably, because restores had never been tested.",
            "Two terminals with near-identical prompts, one on db1 and one on db2, set up "
            "the wrong-host command.",
            "The S3 bucket meant to hold GitLab's database backups turned out to be empty.",
            "GitLab.com ran PostgreSQL 9.6 then, one primary and one streaming replica.",
            "GitLab's follow-ups: test restores regularly, and make the shell prompt say "
            "which database host is the primary.",
        ],
        "questions": [
            (1, "Which database host got wiped in the 2017 code-hosting disaster?", "what"),
            (2, "How much data was left after the accidental delete was interrupted?", "number"),
            (3, "What set off the replication trouble that night?", "why"),
            (4, "What was the connection limit lowered to during the lag fight?", "number"),
            (5, "Why were the nightly database dumps empty?", "why"),
            (7, "Which copy did they finally recover the database from?", "what"),
            (8, "How many user sign-ups were lost in the outage?", "number"),
            (9, "Were the git repositories themselves affected?", "what"),
            (10, "When was the GitLab database back online?", "when"),
            (11, "How did they keep people informed while recovering?", "what"),
            (14, "What was found in the cloud storage bucket for backups?", "what"),
            (13, "Why did the engineer run the command on the wrong machine?", "why"),
        ],
    },
    {
        "key": "cf",
        "room": "incidents",
        "tags": ["cloudflare", "waf", "postmortem"],
        "sources": [
            "https://blog.cloudflare.com/details-of-the-cloudflare-outage-on-july-2-2019/",
            "https://byu-se.github.io/idb/incidents/12.html",
            "https://failure-modes.dev/library/fm-001",
        ],
        "notes": [
            "Cloudflare's outage of 2 July 2019 lasted 27 minutes, 13:42 to 14:09 UTC; "
            "visitors of proxied sites got 502 errors.",
            "Cause of the Cloudflare outage: a new WAF managed rule held a regular "
            "expression that backtracked without bound and drove CPU to nearly 100% on "
            "every edge server.",
            "The offending WAF pattern contained .*(?:.*=.*): nested unbounded wildcards "
            "that explode when the engine backtracks.",
            "The new WAF rules were meant to catch JavaScript-based cross-site scripting attacks.",
            "Cloudflare pushed WAF rules worldwide within seconds through Quicksilver, with "
            "no staged rollout, while code releases first go to a dogfooding location.",
            "The bad rule was in simulate mode: it still runs on real traffic but blocks "
            "nothing, so it could still burn CPU.",
            "A guard that limits how much CPU a regular expression may use had been removed "
            "by mistake weeks earlier, in a WAF refactor.",
            "Cloudflare responders used a global kill switch to turn the WAF off, reverted "
            "the rule, and turned the WAF back on.",
            "Cloudflare's own dashboard and API were hit by the outage too, which slowed "
            "the response.",
            "The WAF's regex engine had no time limit per evaluation; Cloudflare planned to "
            "move to engines with linear-time guarantees such as re2 or Rust's regex.",
            "The rule passed CI: the tests checked what it matches, not what it costs in CPU.",
            "Cloudflare's follow-up: roll out WAF rule changes in stages, like software releases.",
        ],
        "questions": [
            (1, "How long did the CDN's regex outage last?", "number"),
            (3, "Which pattern in the firewall rule caused the runaway backtracking?", "what"),
            (5, "How did firewall rules reach every data center so fast?", "why"),
            (6, "Did running the rule in test-only mode keep traffic safe?", "why"),
            (7, "What protection had been taken out by accident before July 2019?", "what"),
            (8, "How did the responders stop the CPU exhaustion?", "how"),
            (10, "Which regex engines avoid catastrophic backtracking?", "what"),
            (4, "What kind of attack was the new managed rule written for?", "what"),
            (12, "What change to rule deployment came out of the review?", "what"),
        ],
    },
    {
        "key": "gh",
        "room": "incidents",
        "tags": ["github", "mysql", "postmortem"],
        "sources": [
            "https://github.blog/2018-10-30-oct21-post-incident-analysis/",
            "https://byu-se.github.io/idb/incidents/13.html",
            "https://www.postmortems.app/postmortem/4da4ac8a-fb93-426e-9ae7-eb088f115959",
        ],
        "notes": [
            "GitHub incident of 21 October 2018 began at 22:52 UTC: replacing failing 100G "
            "optical gear cut the US East Coast hub off from the primary East Coast data "
            "center for 43 seconds.",
            "Those 43 seconds of partition turned into 24 hours and 11 minutes of degraded "
            "GitHub service.",
            "GitHub's MySQL failover was run by Orchestrator, which reaches agreement with Raft.",
            "During the partition Orchestrator promoted West Coast replicas to primary, so "
            "writes began crossing the country.",
            "East Coast primaries held a few seconds of writes that never reached the West "
            "Coast, so failing back was not safe.",
            "At 23:13 UTC GitHub chose data integrity over a quick recovery, accepting a "
            "long degradation.",
            "GitHub paused webhook delivery and Pages builds at 23:19 UTC to keep the data "
            "from diverging further.",
            "GitHub's recovery meant restoring MySQL clusters from backups in remote cloud "
            "storage: several terabytes, many hours.",
            "By 11:12 UTC on 22 October all GitHub primaries were back on the East Coast, but "
            "replicas lagged for hours and showed stale data.",
            "Writes from the conflicting window were logged and reconciled by hand; GitHub "
            "reported that no user data was lost in the end.",
            "Git repositories were not affected in October 2018; the damage was to metadata "
            "kept in MySQL: issues, pull requests, notifications.",
            "Follow-up: Orchestrator was configured not to promote primaries across regions.",
            "Latency rose because East Coast application servers had to write to West Coast "
            "primaries across the continent.",
            "GitHub's MySQL metadata is spread over several clusters, each with one primary "
            "and many read replicas.",
        ],
        "questions": [
            (1, "How long was the network link down in the 2018 partition incident?", "number"),
            (2, "How long was the site degraded in total?", "number"),
            (3, "Which tool decided the MySQL failover?", "what"),
            (5, "Why couldn't they simply switch back to the east coast databases?", "why"),
            (7, "Which features were paused to stop the data diverging?", "what"),
            (8, "Why did restoring the database backups take so long?", "why"),
            (9, "When were all the primaries back in the east?", "when"),
            (10, "Was any user data lost for good in the October 2018 incident?", "what"),
            (12, "How was failover configuration changed afterwards?", "what"),
            (13, "Why did requests get slow after the west coast took over?", "why"),
        ],
    },
    {
        "key": "s3",
        "room": "incidents",
        "tags": ["aws", "s3", "postmortem"],
        "sources": ["https://aws.amazon.com/message/41926/"],
        "notes": [
            "AWS S3 outage in us-east-1, 28 February 2017: at 9:37 AM PST an engineer "
            "debugging slow S3 billing ran a playbook command to take a few servers out.",
            "One argument of that S3 command was typed wrong, and far more servers were "
            "removed than intended.",
            "The removed servers backed two S3 subsystems: index (metadata and location of "
            "every object, needed by GET, LIST, PUT and DELETE) and placement (allocates "
            "storage for new objects).",
            "Both S3 subsystems needed a full restart, something not done in the big regions "
            "for many years, so it took longer than expected.",
            "The S3 console, new EC2 launches, EBS volumes restored from snapshots and Lambda "
            "in us-east-1 failed along with S3.",
            "The AWS service health dashboard itself depended on S3 and could not show the "
            "outage at first.",
            "After the S3 outage the capacity tool removes servers more slowly and refuses "
            "to take a subsystem below its minimum capacity.",
            "AWS moved up work to split the S3 index subsystem into smaller cells so a "
            "restart is quicker.",
            "S3 in us-east-1 was fully back around 1:54 PM PST, about four hours after the "
            "command.",
            "PUT requests came back last, because placement needs a working index.",
        ],
        "questions": [
            (1, "What was the engineer investigating when the storage outage began?", "why"),
            (3, "Which subsystem keeps track of where every object lives?", "what"),
            (4, "Why did restarting the storage subsystems take so long?", "why"),
            (6, "Why couldn't the status page report the outage?", "why"),
            (7, "What safety check was added to the server removal tool?", "what"),
            (9, "When had the object store fully recovered?", "when"),
            (10, "Which kind of request was the last to work again?", "what"),
        ],
    },
    {
        "key": "bs",
        "room": "Planning",
        "tags": ["backstage", "adr"],
        "sources": [
            "https://github.com/backstage/backstage/tree/master/docs/architecture-decisions",
            *(
                f"backstage/backstage docs/architecture-decisions/adr{name}.md"
                for name in (
                    "002-default-catalog-file-format",
                    "003-avoid-default-exports",
                    "006-avoid-react-fc",
                    "007-use-msw-to-mock-service-requests",
                    "008-default-catalog-file-name",
                    "009-entity-references",
                    "010-luxon-date-library",
                    "013-use-node-fetch",
                )
            ),
        ],
        "notes": [
            "Backstage ADR002: catalog descriptor files are YAML, several documents per file "
            "separated by ---, one entity each, shaped like Kubernetes objects.",
            "A Backstage entity has apiVersion, kind, metadata and spec; Backstage's own "
            "kinds use apiVersion backstage.io/v1alpha1 until the format is stable.",
            "Backstage entity names are 1 to 63 characters of letters and digits separated by "
            "-, _ or ., and are compared after stripping other characters and lowercasing, so "
            "my-component and MyComponent collide.",
            "Backstage ADR008: call the catalog descriptor catalog-info.yaml; it is a "
            "default, not a requirement.",
            "Backstage ADR003: use named exports, not default exports, except where a tool "
            "needs one (React.lazy modules).",
            "Backstage ADR006: avoid React.FC and React.SFC; type props directly and declare "
            "children?: React.ReactNode when a component takes children.",
            "Backstage ADR007: every fetch or XMLHttpRequest in tests is mocked with msw, "
            "Mock Service Worker.",
            "Backstage ADR009: an entity reference is written [kind:][namespace/]name; in "
            "frontend URLs it is :namespace/:kind/:name with all three parts.",
            'The default Backstage catalog namespace is the string "default".',
            "Backstage ADR010: Luxon is the standard date library, replacing Moment.js, which "
            "is large, mutable and being sunset.",
            "Backstage ADR013: backend packages use node-fetch for HTTP, frontend plugins use "
            "fetchApiRef (cross-fetch underneath); axios and got are being phased out.",
            "Isomorphic Backstage packages take a fetch implementation as an argument, so "
            "callers can add auth headers and metrics.",
            "Backstage label and annotation keys: an optional DNS prefix of up to 253 "
            "characters and a name of up to 63; the backstage.io/ prefix is reserved.",
        ],
        "questions": [
            (4, "What should the catalog descriptor file in each repo be named?", "what"),
            (10, "Which date library did the developer portal standardise on?", "what"),
            (7, "How should tests stub out network calls in the portal code?", "how"),
            (3, "How long may an entity's name be?", "number"),
            (8, "What does a link to an entity look like in the frontend?", "what"),
            (11, "Which HTTP library should backend plugins use?", "what"),
            (5, "When are default exports still acceptable?", "what"),
            (6, "How do we type component children instead of using FC?", "how"),
            (13, "Which key prefix is reserved for the portal's own annotations?", "what"),
            (9, "What namespace does an entity get when it names none?", "what"),
        ],
    },
    {
        "key": "pg",
        "room": "Configuration",
        "tags": ["postgresql", "upgrade"],
        "sources": ["https://www.postgresql.org/docs/16/release-16.html"],
        "notes": [
            "PostgreSQL 16 was released on 2023-09-14.",
            "PostgreSQL 16 can run FULL and internal right OUTER hash joins in parallel.",
            "PostgreSQL 16 allows logical replication from a standby server.",
            "Logical replication subscribers in PostgreSQL 16 can apply large transactions "
            "in parallel.",
            "PostgreSQL 16 adds the pg_stat_io view for I/O statistics.",
            "PostgreSQL 16 adds SQL/JSON constructors and identity functions such as "
            "JSON_ARRAY(), JSON_OBJECT() and IS JSON.",
            "Vacuum freezing got faster in PostgreSQL 16.",
            "pg_hba.conf in PostgreSQL 16 accepts regular expressions for user and database "
            "names, and pg_ident.conf for user names.",
            "Moving to PostgreSQL 16 takes pg_dumpall and restore, pg_upgrade, or logical "
            "replication.",
            "PostgreSQL 16 PL/pgSQL: a bound cursor variable's portal name is set at OPEN "
            "rather than matching the variable name; assign the name before OPEN to keep "
            "the old behaviour.",
            "PostgreSQL 16 refuses NULLS NOT DISTINCT indexes for primary keys.",
            "REINDEX DATABASE and reindexdb skip system catalog indexes in PostgreSQL 16; "
            "use REINDEX SYSTEM or reindexdb --system for those.",
            "PostgreSQL 16 renamed the server setting force_parallel_mode to debug_parallel_query.",
            "PostgreSQL 16 no longer lets you create views through ON SELECT rules.",
            "PostgreSQL 16 removed pg_walinspect's pg_get_wal_records_info_till_end_of_wal() "
            "and pg_get_wal_stats_till_end_of_wal().",
            "PostgreSQL 16 is stricter about GENERATED columns on inheritance and partitioned "
            "tables: parent and child columns must agree on being generated.",
            "promote_trigger_file is gone in PostgreSQL 16; promote a standby with pg_ctl "
            "promote or pg_promote().",
            "PostgreSQL 16 removed the vacuum_defer_cleanup_age setting.",
        ],
        "questions": [
            (3, "Can I take logical replication from a standby in Postgres now?", "what"),
            (5, "Which new system view reports I/O statistics?", "what"),
            (13, "What is the parallel mode debugging setting called now?", "what"),
            (12, "How do I rebuild the catalog indexes after the reindex change?", "how"),
            (9, "Which ways of upgrading to 16 are supported?", "how"),
            (10, "What changed about cursor names in PL/pgSQL?", "what"),
            (8, "Can the host-based auth file match user names by pattern?", "what"),
            (17, "What replaces the trigger file for promoting a replica?", "how"),
            (1, "When did Postgres 16 come out?", "when"),
            (2, "Which kinds of hash join can run in parallel now?", "what"),
            (11, "Are NULLS NOT DISTINCT indexes allowed on a primary key?", "what"),
            (18, "Which vacuum setting was removed in 16?", "what"),
        ],
    },
    {
        "key": "py",
        "room": "Research",
        "tags": ["python", "upgrade"],
        "sources": ["https://docs.python.org/3/whatsnew/3.12.html"],
        "notes": [
            "Python 3.12 (October 2023) adds type parameter syntax from PEP 695: "
            "def first[T](items: list[T]) -> T and class Box[T].",
            "PEP 695 also brings the type statement for aliases in 3.12: "
            "type Point = tuple[float, float].",
            "PEP 701 in Python 3.12 puts f-strings into the grammar: the same quotes can be "
            "reused inside, and expressions may span lines and hold comments or backslashes.",
            "PEP 684 in Python 3.12 gives each subinterpreter its own GIL, reachable from the "
            "C API only for now.",
            "PEP 669 adds sys.monitoring in 3.12, low-overhead event hooks for debuggers and "
            "profilers.",
            "PEP 709 inlines list, dict and set comprehensions in 3.12, up to about twice as fast.",
            "PEP 692 in 3.12: **kwargs can be typed precisely with Unpack and a TypedDict.",
            "Python 3.12 adds the typing.override decorator (PEP 698).",
            "PEP 688 exposes the buffer protocol to Python code through __buffer__ in 3.12.",
            "distutils is gone from the standard library in Python 3.12; use setuptools or "
            "another build backend.",
            "asynchat, asyncore and imp were removed in Python 3.12.",
            "Python 3.12 virtual environments no longer come with setuptools; ensurepip "
            "installs pip alone.",
            "Invalid backslash escapes in string literals raise SyntaxWarning in 3.12, not "
            "DeprecationWarning.",
            "Python 3.12 has itertools.batched(iterable, n) for cutting an iterable into "
            "tuples of n.",
            "pathlib in 3.12 has Path.walk(), and Path can be subclassed.",
            "Python 3.12 error messages suggest a missing standard library import, e.g. "
            "\"Did you forget to import 'sys'?\"",
            "asyncio got much faster in 3.12: faster socket writes and a C implementation of "
            "current_task().",
            "datetime.utcnow() and utcfromtimestamp() are deprecated in 3.12; use aware "
            "datetimes such as datetime.now(tz=UTC).",
            "sqlite3 has a command-line interface since 3.12: python -m sqlite3.",
            "Python 3.12 adds calendar.Month and calendar.Day enums.",
            "unittest has --durations in 3.12 to list the slowest tests.",
            "Python 3.12 drops the wstr field of str objects (PEP 623), saving 8 or 16 bytes "
            "per string.",
            "Immortal objects (PEP 683) arrive in 3.12: None, True and small ints keep a "
            "fixed reference count.",
            "Python 3.12 can let the Linux perf profiler see Python function names: -X perf "
            "or PYTHONPERFSUPPORT=1.",
        ],
        "questions": [
            (1, "How do I write a generic function without declaring a TypeVar?", "how"),
            (2, "How do I declare a type alias with the new keyword?", "how"),
            (3, "Can I reuse the same quote character inside an f-string now?", "what"),
            (4, "What lets subinterpreters run without sharing one lock?", "what"),
            (6, "Which change made comprehensions faster in 3.12?", "why"),
            (7, "How do I type keyword arguments with a TypedDict?", "how"),
            (8, "Is there a decorator that marks a method as overriding its parent's?", "what"),
            (10, "Our setup.py imports distutils and fails on the new interpreter; why?", "why"),
            (12, "Why is setuptools missing from a fresh virtual environment?", "why"),
            (14, "How do I split an iterator into chunks of a fixed size?", "how"),
            (15, "How do I walk a directory tree with pathlib?", "how"),
            (18, "What should we use instead of utcnow()?", "how"),
            (19, "Is there a shell for SQLite databases in the standard library?", "what"),
            (21, "How do I see which unit tests are the slowest?", "how"),
            (24, "How can the Linux profiler show Python function names?", "how"),
            (23, "Which objects never change their reference count in 3.12?", "what"),
        ],
    },
    {
        "key": "rq",
        "room": "Backend",
        "tags": ["requests", "dependencies", "security"],
        "sources": ["https://github.com/psf/requests/blob/main/HISTORY.md"],
        "notes": [
            "requests 2.32.0 (May 2024) fixed a security bug: verify=False on a Session's "
            "first request made later requests to the same origin skip certificate checks "
            "too.",
            "requests 2.32.0 made verify=True reuse one global SSLContext, which cut the "
            "first-request delay and certificate loading on Windows with OpenSSL 3.",
            "requests 2.32.2 turned the private _get_connection into the public "
            "get_connection_with_tls_context; custom HTTPAdapters must move to it "
            "(CVE-2024-35195).",
            "requests 2.32.5 reverted the SSLContext caching of 2.32.0, which had caused "
            "too many problems.",
            "requests 2.31.0 fixed CVE-2023-32681: Proxy-Authorization leaked to the "
            "destination on HTTPS redirects; rotate proxy credentials that were in the "
            "proxy URL.",
            "requests 2.30.0 supports urllib3 2.0; pin urllib3<2 to stay on 1.x.",
            "requests 2.28.0 dropped Python 2.7 and 3.6.",
            "requests 2.28.0 fixed an empty CURL_CA_BUNDLE turning off certificate verification.",
            "requests 2.27.0 added requests.exceptions.JSONDecodeError, raised by response.json().",
            "requests 2.26.0 uses the MIT-licensed charset_normalizer instead of chardet on "
            "Python 3; install requests[use_chardet_on_py3] to keep chardet.",
            "requests decodes Brotli since 2.26.0 when brotli or brotlicffi is installed.",
            "The requests[security] extra does nothing since 2.26.0; pyOpenSSL is no longer "
            "recommended.",
            "requests 2.32.4 fixed CVE-2024-47081: a crafted URL could pull netrc "
            "credentials for the wrong host.",
            "requests 2.25.0 reads the NETRC environment variable.",
            "requests 2.33.0 dropped Python 3.9 and builds with PEP 517 and setuptools.",
            "requests 2.32.0 treats chardet and charset_normalizer as optional when vendored; "
            "without either, text falls back to utf-8.",
            "requests 2.27.1 fixed the auth part being dropped from proxy URLs.",
        ],
        "questions": [
            (1, "Which release fixed disabled verification sticking across a session?", "version"),
            (3, "What must custom transport adapters implement after the TLS context CVE?", "how"),
            (4, "Why was the SSL context caching taken out again?", "why"),
            (5, "Which CVE leaked proxy credentials on redirects?", "what"),
            (6, "How do I keep the old urllib3 major version with requests?", "how"),
            (9, "Which exception does .json() raise on a bad body?", "what"),
            (10, "How do I keep using chardet for encoding detection?", "how"),
            (11, "What do I need installed to decode br-compressed responses?", "how"),
            (13, "Which version fixed credentials being read for the wrong machine?", "version"),
            (8, "Why could an empty CA bundle variable be dangerous before 2.28?", "why"),
        ],
    },
    {
        "key": "rd",
        "room": "Configuration",
        "tags": ["redis", "upgrade"],
        "sources": [
            "https://github.com/redis/redis/releases/tag/7.0-rc1",
            "https://raw.githubusercontent.com/redis/redis/7.0.1/00-RELEASENOTES",
        ],
        "notes": [
            "Redis 7.0 went GA on 27 April 2022.",
            "Redis 7.0 Functions: server-side libraries loaded with FUNCTION LOAD, persisted "
            "and replicated, unlike EVAL scripts.",
            "Redis 7 keeps the AOF as several files in a directory (Multi-Part AOF).",
            "Redis 7.0 writes RDB format 10, which older Redis versions cannot load.",
            "Redis 7 converts ziplist-encoded keys to listpacks while loading an older RDB, "
            "which makes loading a little slower.",
            "Redis 7.0 ACLs: per-key-pattern read and write permissions, and selectors for "
            "several rule sets on one user.",
            "Redis 7.0 adds sharded pub/sub for clusters: SSUBSCRIBE, SPUBLISH and SUNSUBSCRIBE.",
            "Redis 7.0.0 fixed CVE-2022-24736 (a crafted Lua script crashes the server) and "
            "CVE-2022-24735 (Lua code injected to run as another user).",
            "New Redis 7.0 commands include LMPOP/BLMPOP, ZMPOP/BZMPOP, SINTERCARD, "
            "ZINTERCARD, EXPIRETIME and LCS.",
            "EVAL_RO, EVALSHA_RO and FCALL_RO are read-only script variants in Redis 7.",
            "Redis 7.0.1 lets read-only scripts run during CLIENT PAUSE WRITE.",
            "Redis 7.0.1 added --check-system to warn about a slow system clocksource.",
            "Redis 7.0 emits a keyspace event when a new key is created.",
            "CLIENT NO-EVICT in Redis 7 exempts a connection from client eviction.",
            "redis-server 7.0.1 accepts one quoted string with spaces for configs that take "
            "several arguments.",
        ],
        "questions": [
            (2, "How do we keep server-side Lua code across restarts and replicas?", "how"),
            (3, "Why is the append-only file a folder after the upgrade?", "why"),
            (4, "Can an older Redis read a snapshot written by 7.0?", "what"),
            (6, "How do I give a user read-only access to some key patterns?", "how"),
            (7, "Which commands give cluster-local publish/subscribe?", "what"),
            (8, "Which Lua vulnerabilities were patched in the GA release?", "what"),
            (9, "Which command returns when a key will expire, as a timestamp?", "what"),
            (12, "What startup flag checks the clock source?", "what"),
            (1, "When did Redis 7.0 become generally available?", "when"),
            (14, "How do I keep our admin connection from being evicted?", "how"),
        ],
    },
    {
        "key": "dj",
        "room": "Backend",
        "tags": ["django", "upgrade"],
        "sources": ["https://docs.djangoproject.com/en/5.0/releases/5.0/"],
        "notes": [
            "Django 5.0 was released on 4 December 2023 and supports Python 3.10, 3.11 and 3.12.",
            "Django 4.2 is the last series that supports Python 3.8 and 3.9.",
            "Django 5.0's admin can show facet counts for applied filters, switched in the "
            "UI; ModelAdmin.show_facets sets the behaviour.",
            "Django 5.0 field groups: {{ form.name.as_field_group }} renders a field's "
            "label, widget, help text and errors together.",
            "Django 5.0 adds Field.db_default for defaults computed by the database.",
            "Django 5.0 adds GeneratedField, a column the database always computes from "
            "other columns.",
            "Field choices in Django 5.0 accept a mapping or a callable directly; "
            "enumeration types no longer need .choices.",
            "Django 5.0 drops pytz support: USE_DEPRECATED_PYTZ is gone and zoneinfo is used.",
            "USE_TZ defaults to True since Django 5.0.",
            "Django 5.0 removed the USE_L10N setting; localized formatting is always on.",
            "forms.URLField in Django 5.0 takes assume_scheme; its default will change from "
            "http to https in Django 6.0.",
            "Django 5.0 no longer supports PostgreSQL 11; 12 is the minimum.",
            "Passing positional arguments to Model.save() is deprecated in Django 5.0.",
            "Django 5.0 adds async auth helpers such as aauthenticate(), alogin() and alogout().",
        ],
        "questions": [
            (
                1,
                "Which Python versions does the 5.0 release of the web framework run on?",
                "version",
            ),
            (3, "How do we turn the filter counts in the admin on or off?", "how"),
            (4, "How do I render a field's label, help and errors in one tag?", "how"),
            (5, "How do I have the database itself fill in a column's default?", "how"),
            (6, "Which field type is always computed by the database from other columns?", "what"),
            (11, "What happens to the default scheme of URL form fields?", "what"),
            (9, "What is the default of the time zone support setting now?", "what"),
            (12, "Which Postgres version is the minimum for Django 5.0?", "version"),
            (13, "Which way of calling save() is deprecated?", "what"),
            (2, "Which Django series is the last for Python 3.9?", "version"),
        ],
    },
    {
        "key": "k8",
        "room": "Configuration",
        "tags": ["kubernetes", "upgrade"],
        "sources": [
            "https://kubernetes.io/blog/2022/05/03/kubernetes-1-24-release-announcement/",
            "https://github.com/kubernetes/enhancements/blob/master/keps/sig-node/2221-remove-dockershim/kep.yaml",
        ],
        "notes": [
            "Kubernetes 1.24 (May 2022) removed dockershim from the kubelet; nodes need "
            "containerd or CRI-O, or cri-dockerd to keep Docker Engine.",
            "dockershim had been deprecated since Kubernetes 1.20.",
            "Kubernetes 1.24 shipped 46 enhancements: 14 stable, 15 beta, 13 alpha.",
            "Kubelet image credential provider plugins are beta in 1.24: registry "
            "credentials come from exec plugins instead of files on the node.",
            "Contextual logging arrived as alpha in Kubernetes 1.24.",
            "From Kubernetes 1.24 on, new beta APIs are off by default.",
            "The dockershim removal is KEP-2221, owned by sig-node.",
            "Kubernetes 1.24 release artifacts are signed with cosign, an alpha feature.",
            "The kubelet flags --network-plugin and --image-pull-progress-deadline went "
            "away with dockershim in 1.24.",
        ],
        "questions": [
            (1, "What must the nodes run instead of Docker for the 1.24 cluster?", "how"),
            (2, "When was the docker shim first deprecated?", "version"),
            (4, "How can the kubelet get registry credentials without files on the node?", "how"),
            (6, "Are new beta APIs turned on by default from 1.24?", "what"),
            (9, "Which kubelet flags do we have to delete after the upgrade?", "what"),
            (8, "How are the release binaries signed?", "what"),
        ],
    },
    {
        "key": "fa",
        "room": "incidents",
        "tags": ["fastly", "cdn", "postmortem"],
        "sources": ["https://www.fastly.com/blog/summary-of-june-8-outage"],
        "notes": [
            "Fastly outage of 8 June 2021: a valid customer configuration change triggered "
            "a latent bug and 85% of the network returned errors.",
            "The Fastly bug shipped with a software deployment that began on 12 May 2021.",
            "Fastly saw the disruption within a minute: onset 09:47 UTC, detected 09:48.",
            "Fastly found the customer configuration at 10:27 UTC and disabled it; services "
            "began to recover at 10:36.",
            "Within 49 minutes 95% of Fastly's network was working normally again.",
            "Fastly's permanent fix for the bug started deploying at 17:25 UTC the same day.",
            "Fastly's follow-ups: find out why testing missed the bug and shorten the time "
            "to remediate.",
        ],
        "questions": [
            (1, "What set off the CDN's global outage in June 2021?", "why"),
            (2, "When was the latent bug shipped?", "when"),
            (5, "How much of the network was healthy after 49 minutes?", "number"),
            (6, "When did the permanent fix start rolling out?", "when"),
        ],
    },
    {
        "key": "at",
        "room": "incidents",
        "tags": ["atlassian", "postmortem"],
        "sources": [
            "https://www.atlassian.com/engineering/post-incident-review-april-2022-outage",
            "https://atlassian.reaktivdev.com/announcements/pir-update-august2022",
        ],
        "notes": [
            "Atlassian outage from 5 April 2022, 07:38 UTC: 775 customers lost access to "
            "their Atlassian cloud products.",
            "Some Atlassian customers were without their sites for about two weeks.",
            "The Atlassian cleanup script was meant to delete the legacy standalone Insight "
            "app, which had become a native part of Jira Service Management.",
            "The team running the deletion was handed site IDs instead of app IDs, and the "
            "script deleted whole sites.",
            "The deletion API did not check what kind of ID it got; review covered the "
            "endpoint being called, not the IDs.",
            "Atlassian's fix: soft deletes everywhere, with staged rollout and a tested rollback.",
            "Atlassian planned to automate disaster recovery for multi-site, multi-product "
            "deletions at scale.",
            "Atlassian committed to an incident communications playbook and a way to reach "
            "support without a valid site URL or Atlassian ID.",
        ],
        "questions": [
            (1, "How many customers lost access in the April 2022 deletion?", "number"),
            (3, "Which app was the cleanup script supposed to remove?", "what"),
            (4, "Why did the script delete entire sites?", "why"),
            (6, "What kind of deletion became the rule afterwards?", "what"),
            (8, "How can customers reach support when their site URL no longer works?", "how"),
        ],
    },
    {
        "key": "go",
        "room": "Research",
        "tags": ["go", "upgrade"],
        "sources": ["https://go.dev/doc/go1.22"],
        "notes": [
            "Go 1.22 (February 2024) creates new loop variables on every iteration, ending "
            "the closure-captures-the-loop-variable bug.",
            "Go 1.22 for loops can range over an integer: for i := range 10.",
            "Go 1.22 previews range-over-function iterators behind GOEXPERIMENT=rangefunc.",
            "net/http's ServeMux in Go 1.22 matches methods and wildcards, e.g. "
            '"GET /items/{id}", and Request.PathValue reads the wildcard.',
            "Go 1.22 adds math/rand/v2 with a cleaner API and faster generators.",
            "go work vendor in Go 1.22 vendors a workspace's dependencies.",
            "Profile-guided optimization in Go 1.22 devirtualizes more calls; typical gains "
            "of 2 to 14%.",
            "Go 1.22 adds slices.Concat for joining several slices.",
            "database/sql has a generic Null[T] type since Go 1.22.",
            "cmp.Or in Go 1.22 returns the first of its arguments that is not the zero value.",
            "The Go 1.22 runtime keeps GC metadata nearer each object, about 1 to 3% less "
            "CPU in typical programs.",
            "Go 1.21's transition tooling for the loop variable change still works in 1.22.",
        ],
        "questions": [
            (1, "Do goroutines started in a loop still share the loop variable?", "what"),
            (2, "How do I loop N times without a counter in Go?", "how"),
            (4, "How do I route by HTTP method and path parameter with the standard mux?", "how"),
            (5, "Which random number package should new code import?", "what"),
            (6, "How do I vendor dependencies for a multi-module workspace?", "how"),
            (7, "How much does profile-guided optimization gain in 1.22?", "number"),
            (9, "Is there a generic nullable type for SQL columns?", "what"),
            (10, "Which helper picks the first non-zero value?", "what"),
            (3, "How do I try iterator functions in range loops?", "how"),
        ],
    },
    {
        "key": "ts",
        "room": "Research",
        "tags": ["typescript", "upgrade"],
        "sources": [
            "https://devblogs.microsoft.com/typescript/announcing-typescript-5-0/",
            "https://devblogs.microsoft.com/typescript/announcing-typescript-5-0-rc/",
        ],
        "notes": [
            "TypeScript 5.0 (March 2023) implements the standard ECMAScript decorators; "
            "they differ from the old --experimentalDecorators ones.",
            "TypeScript 5.0 decorators may go before or after export and export default.",
            "TypeScript 5.0 adds const type parameters: <const T> infers literal types as if "
            "the caller wrote as const.",
            "TypeScript 5.0 adds --moduleResolution bundler, allowed only with --module "
            "esnext; library authors should stay on node16 or nodenext.",
            "The extends field of tsconfig in TypeScript 5.0 can list several base configs.",
            "All enums are union enums in TypeScript 5.0.",
            "--verbatimModuleSyntax in TypeScript 5.0 replaces importsNotUsedAsValues and "
            "preserveValueImports.",
            "TypeScript 5.0 supports export type * from a module.",
            "TypeScript 5.0 JSDoc gains @satisfies and @overload.",
            "tsc --build in TypeScript 5.0 accepts flags such as --declaration and --sourceMap.",
            "TypeScript 5.0 deprecates --target ES3, --out, --keyofStringsOnly and "
            '--suppressExcessPropertyErrors; ignoreDeprecations "5.0" silences that until '
            "5.5.",
            "The TypeScript 5.0 compiler itself moved to ES modules, making the package "
            "smaller and faster.",
        ],
        "questions": [
            (1, "Are the new decorators the same as the experimental ones?", "what"),
            (3, "How do I make a generic infer literal types without as const?", "how"),
            (4, "Which module resolution mode suits projects built by a bundler?", "what"),
            (5, "Can one tsconfig inherit from two base files?", "what"),
            (7, "What replaces importsNotUsedAsValues?", "what"),
            (9, "Which JSDoc tags arrived with 5.0?", "what"),
            (11, "How do we silence the deprecation errors for old compiler flags?", "how"),
            (2, "Where may a decorator go relative to export?", "what"),
        ],
    },
    {
        "key": "nd",
        "room": "Research",
        "tags": ["nodejs", "upgrade"],
        "sources": ["https://nodejs.org/en/blog/announcements/v20-release-announce"],
        "notes": [
            "Node.js 20 was released on 18 April 2023 and became LTS (codename Iron) in "
            "October 2023.",
            "Node.js 20 has an experimental Permission Model: --experimental-permission with "
            "--allow-fs-read, --allow-fs-write, --allow-child-process and --allow-worker.",
            "Custom ESM loader hooks run on a dedicated thread in Node.js 20, isolated from "
            "the main thread.",
            "import.meta.resolve() is synchronous in Node.js 20.",
            "Node.js 20 ships V8 11.3: String.prototype.isWellFormed, array methods that "
            "copy (toSorted, toReversed), resizable ArrayBuffer and the RegExp v flag.",
            "The node:test runner is stable in Node.js 20.",
            "Node.js 20 can build single executable applications (experimental) by injecting "
            "a prepared blob into the node binary.",
            "Node.js 20 uses the Ada 2.0 URL parser, which speeds up URL parsing.",
            "Node.js 20 added official binaries for Windows on ARM64.",
            "Node.js 20 marks url.parse() input validation stricter and points users to the "
            "WHATWG URL API.",
        ],
        "questions": [
            (1, "When did Node 20 become the long-term support line?", "when"),
            (2, "How do I stop a Node process from writing to the file system?", "how"),
            (3, "Where do custom ESM loaders run now?", "what"),
            (5, "Which JavaScript engine version does Node 20 bundle?", "version"),
            (6, "Is the built-in test runner stable in Node 20?", "what"),
            (7, "How can we ship the CLI as one binary without installing Node?", "how"),
            (9, "Are there official Node builds for Windows on ARM?", "what"),
        ],
    },
    {
        "key": "tf",
        "room": "Configuration",
        "tags": ["terraform", "upgrade"],
        "sources": [
            "https://www.hashicorp.com/blog/terraform-1-5-brings-config-driven-import-and-checks"
        ],
        "notes": [
            "Terraform 1.5 (June 2023) adds import blocks: existing resources are imported "
            "through configuration and planned like any change.",
            "terraform plan -generate-config-out=generated.tf writes configuration for "
            "resources named in import blocks (Terraform 1.5).",
            "Terraform 1.5 check blocks hold assert conditions that are evaluated on every "
            "plan and apply for continuous validation.",
            "A failing Terraform check block only warns; it never blocks the run.",
            "Terraform 1.5 adds the strcontains() function.",
            "Terraform 1.5 adds plantimestamp(), the time the plan was made.",
            "Import blocks replace most uses of the terraform import command, which changed "
            "state with no plan to review.",
            "A Terraform check block may contain a scoped data source, read only for that check.",
        ],
        "questions": [
            (1, "How do we bring existing cloud resources under Terraform with a plan?", "how"),
            (2, "Can Terraform write the HCL for imported resources itself?", "how"),
            (3, "How do we validate infrastructure continuously from Terraform?", "how"),
            (4, "Does a failed assertion stop the apply?", "what"),
            (6, "Which function gives the time the plan was created?", "what"),
            (5, "Which function checks if a string holds a substring?", "what"),
        ],
    },
    {
        "key": "rs",
        "room": "Research",
        "tags": ["rust", "edition"],
        "sources": ["https://doc.rust-lang.org/edition-guide/rust-2021/index.html"],
        "notes": [
            "The Rust 2021 edition shipped with Rust 1.56 on 21 October 2021.",
            'Switch a crate to the new edition with edition = "2021" in Cargo.toml; '
            "cargo fix --edition does most of the migration.",
            "Rust 2021 closures capture only the fields they use (disjoint capture), not "
            "the whole variable.",
            "In Rust 2021 array.into_iter() yields values, not references: arrays implement "
            "IntoIterator by value.",
            "The Rust 2021 prelude adds TryFrom, TryInto and FromIterator.",
            "Rust 2021 makes Cargo's feature resolver version 2 the default.",
            "In Rust 2021 macro_rules $x:pat also matches or-patterns like A | B; use "
            "pat_param for the old meaning.",
            'Rust 2021 panic! always takes a format string, like println!; panic!("{}") '
            "with no argument no longer compiles.",
            "Rust 2021 reserves prefixes such as ident#, ident\"...\" and ident'...' for "
            "future syntax.",
            "Bare trait objects without dyn are a hard error in Rust 2021.",
            "The old ... range pattern syntax is a hard error in Rust 2021; write ..= instead.",
            "Editions are per crate: a 2018 crate and a 2021 crate link together fine.",
            "Rust 1.56 stabilised the rust-version field in Cargo.toml for a crate's "
            "minimum compiler.",
            "Disjoint capture in Rust 2021 can change when a captured value is dropped; "
            "cargo fix inserts let _ = &x; where it matters.",
        ],
        "questions": [
            (1, "Which compiler release brought the 2021 edition?", "version"),
            (2, "How do we migrate a crate to the new edition?", "how"),
            (3, "Why does a closure no longer borrow the whole struct?", "why"),
            (4, "What does calling into_iter on an array give now?", "what"),
            (6, "Which feature resolver is the default in the new edition?", "what"),
            (12, "Can a 2018 crate depend on a 2021 crate?", "what"),
            (13, "How do we declare the minimum compiler version a crate needs?", "how"),
            (11, "What replaces the three-dot range pattern?", "what"),
        ],
    },
    {
        "key": "le",
        "room": "incidents",
        "tags": ["letsencrypt", "tls"],
        "sources": ["https://letsencrypt.org/docs/dst-root-ca-x3-expiration-september-2021/"],
        "notes": [
            "Let's Encrypt's old root, DST Root CA X3, expired on 30 September 2021.",
            "Let's Encrypt chains now end at ISRG Root X1, its own root.",
            "Android before 7.1.1 kept accepting Let's Encrypt certificates thanks to a "
            "cross-signed ISRG Root X1 valid past the old root's expiry, because Android does "
            "not check a trust anchor's expiry.",
            "Clients on OpenSSL 1.0.2 failed against Let's Encrypt sites after 30 September "
            "2021: they built the chain to the expired root and gave up.",
            "Fix for old OpenSSL clients: remove DST Root CA X3 from the trust store, or "
            "serve the shorter chain that ends at ISRG Root X1.",
            "macOS before 10.12.1 does not trust ISRG Root X1, so those machines failed "
            "after the expiry.",
        ],
        "questions": [
            (1, "When did the certificate authority's old root expire?", "when"),
            (3, "Why did old Android phones keep working after the root expired?", "why"),
            (4, "Which TLS library version broke after the expiry?", "version"),
            (5, "How do we fix the old OpenSSL clients that fail the handshake?", "how"),
        ],
    },
]


def generate(seed: int = SEED) -> dict:
    """The drawers in writing order (bursts a few seconds apart inside, hours to days
    between) and the questions with their gold note ids."""
    rng = random.Random(seed)
    drawers: list[dict] = []
    questions: list[dict] = []
    when = START
    for number, burst in enumerate(BURSTS):
        if number:
            when += timedelta(hours=rng.choice((3, 5, 20, 26, 49, 73)),
                              minutes=rng.randint(0, 59))  # fmt: skip
        for i, text in enumerate(burst["notes"], start=1):
            if i > 1:
                when += timedelta(seconds=rng.randint(15, 120))
            drawers.append(
                {
                    "id": f"{burst['key']}{i:02d}",
                    "text": text,
                    "room": burst["room"],
                    "tags": list(burst["tags"]),
                    "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "burst": burst["key"],
                }
            )
        for i, question, category in burst["questions"]:
            if not 1 <= i <= len(burst["notes"]):
                raise SystemExit(f"{burst['key']}: no note {i} for {question!r}")
            questions.append(
                {
                    "id": f"b{len(questions):03d}",
                    "question": question,
                    "category": category,
                    "gold": [f"{burst['key']}{i:02d}"],
                }
            )
    sources = {b["key"]: b["sources"] for b in BURSTS}
    return {"name": "burst-notes", "seed": seed, "sources": sources, "drawers": drawers,
            "questions": questions}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    args = parser.parse_args(argv)
    return write_or_check(dumps(generate()), args.out, args.check)


if __name__ == "__main__":
    sys.exit(main())
