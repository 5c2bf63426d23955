"""A second retrieval set: engineering notes a coding agent would store, with gold drawers.

    .venv/bin/python bench/eng_notes_data.py [--out bench/data/eng_notes.json] [--check]
                                             [--seed N]

Deterministic (a fixed seed, hand-written facts and templates, no model): the same code
always writes the same file, and ``--check`` says whether the committed file is up to date.
The facts are data (``bench/data/sources/eng_notes.json``); the templates that turn them
into notes and questions are here, in ``generate()``.
Not LoCoMo's source or shape: no dialog, no speakers; notes about services (ports, library
versions and their upgrades, config values, owners, incidents and their follow-ups,
decisions, migrations), people (role, city, team) and a body of unrelated chatter, written
in work sessions (one room, a few minutes apart, topics mixed as an agent's notes are).

Every question is paraphrased (never a copy of a note's wording) and names its gold
drawer(s). Categories:

- ``single``: one note answers it (a port, a config value, a decision's reason);
- ``distractor``: a near-duplicate note differs only in a number, version or service
  (another service's value of the same key, an older value of the same setting);
- ``multi_hop``: two notes are needed (the owner of the service on port N; the city of
  the person who owns service S); both are gold;
- ``temporal``: the answer depends on when (the version before an upgrade, the version
  set in a given month, when a migration happened, the current value);
- ``follow_up``: a note written right after another in the same session that does not
  name its subject ("Follow-up: added an alert ..."), as agents write them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

SEED = 20261125
DEFAULT_OUT = Path(__file__).resolve().parent / "data" / "eng_notes.json"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

# The authored facts, as data (generate() writes the notes and questions around them).
SOURCE = Path(__file__).resolve().parent / "data" / "sources" / "eng_notes.json"
_AUTHORED = json.loads(SOURCE.read_text(encoding="utf-8"))


def _rows(section: str, *fields: str) -> list[tuple]:
    """A section of the source as tuples of the named fields, in that order."""
    return [tuple(row[field] for field in fields) for row in _AUTHORED[section]]


# name, how questions call it, room, language/runtime, main library
SERVICES = _rows("services", "name", "alias", "room", "language", "library")
# name, role, city, team
PEOPLE = _rows("people", "name", "role", "city", "team")
# key in the config file, how a question calls it, values to pick from, why it was set
CONFIG_KEYS = _rows("config_keys", "key", "spoken", "values", "why")
# what the service did, how a question calls it, root cause, fix
SYMPTOMS = _rows("symptoms", "symptom", "short", "cause", "fix")
# the metric an incident's follow-up alerts on, and its threshold
ALERTS = _rows("alerts", "metric", "threshold")
# what was chosen, over what, for what, why
DECISIONS = _rows("decisions", "choice", "alternative", "purpose", "reason")
MIGRATION_TARGETS: list[str] = _AUTHORED["migration_targets"]
# unrelated notes, none of them asked about: the chatter
CHATTER: list[str] = _AUTHORED["chatter"]


def _versions(rng: random.Random) -> list[str]:
    major = rng.randint(1, 5)
    minor = rng.randint(0, 9)
    steps = []
    for _ in range(3):
        minor += rng.randint(1, 3)
        steps.append(f"{major}.{minor}.{rng.randint(0, 9)}")
    return steps


def _month(day: datetime) -> str:
    return day.strftime("%B %Y")


def generate(seed: int = SEED) -> dict:
    """The set: ``drawers`` in write order (id, text, room, tags, created_at) and
    ``questions`` (id, question, category, gold drawer ids)."""
    rng = random.Random(seed)
    notes: list[dict] = []  # each: text, room, tags, day (the order is fixed later)
    questions: list[dict] = []

    def note(text: str, room: str, tags: list[str], day: int, key: str | None = None) -> str:
        nid = f"n{len(notes):03d}"
        notes.append({"id": nid, "text": text, "room": room, "tags": tags, "day": day, "key": key})
        return nid

    def ask(category: str, question: str, gold: list[str]) -> None:
        questions.append({"question": question, "category": category, "gold": gold})

    people = list(PEOPLE)
    person_note: dict[str, str] = {}
    for name, role, city, team in people:
        first = name.split()[0]
        person_note[name] = note(
            f"{name} is our {role} on the {team} team, working from {city}.",
            "team",
            ["people", first.lower()],
            rng.randint(0, 10),
        )
    ports = rng.sample(range(7000, 9900), len(SERVICES))
    owners = [people[i % len(people)] for i in range(len(SERVICES))]
    rng.shuffle(owners)
    keys = list(CONFIG_KEYS)
    for s, (svc, alias, room, lang, lib) in enumerate(SERVICES):
        day0 = rng.randint(0, 20)
        # Port, and a near-duplicate: the old port before a move (temporal + distractor).
        port = ports[s]
        old_port = port - rng.choice([1, 10, 100])
        n_old_port = note(
            f"{svc} ({lang}) serves HTTP on port {old_port}; health check at /healthz.",
            room,
            [svc, "ports"],
            day0,
        )
        n_port = note(
            f"Moved {svc} to port {port} so it no longer clashes with the sidecar; "
            f"{old_port} is free again.",
            room,
            [svc, "ports"],
            day0 + rng.randint(20, 40),
        )
        ask(
            "temporal",
            rng.choice(
                [
                    f"Which port does {alias} listen on now?",
                    f"What is the current port of {alias}?",
                ]
            ),
            [n_port],
        )
        ask(
            "temporal",
            rng.choice(
                [
                    f"What port did {alias} use before it was moved?",
                    f"Which port was {alias} on originally?",
                ]
            ),
            [n_old_port],
        )
        # Library versions: three upgrades in three different months.
        v1, v2, v3 = _versions(rng)
        d1 = day0 + rng.randint(3, 15)
        d2 = d1 + rng.randint(30, 45)
        d3 = d2 + rng.randint(30, 45)
        note(f"Pinned {lib} at {v1} in {svc}.", room, [svc, "deps"], d1)
        n_v2 = note(
            f"Upgraded {lib} in {svc} from {v1} to {v2} on "
            f"{(START + timedelta(days=d2)).strftime('%d %B')}; changelog had a fix we need.",
            room,
            [svc, "deps"],
            d2,
        )
        n_v3 = note(
            f"{svc}: bumped {lib} {v2} -> {v3} ({(START + timedelta(days=d3)).strftime('%d %B')}),"
            f" tests pass.",
            room,
            [svc, "deps"],
            d3,
        )
        ask(
            "temporal",
            rng.choice(
                [
                    f"Which {lib} release is {alias} running at the moment?",
                    f"What's the latest {lib} version we moved {alias} to?",
                ]
            ),
            [n_v3],
        )
        ask(
            "temporal",
            rng.choice(
                [
                    f"Which {lib} version did {alias} run before it went to {v3}?",
                    f"What {lib} version preceded {v3} in {alias}?",
                ]
            ),
            [n_v2],
        )
        ask(
            "temporal",
            rng.choice(
                [
                    f"What did we change {alias}'s {lib} dependency to in "
                    f"{(START + timedelta(days=d2)).strftime('%B')}?",
                    f"In {(START + timedelta(days=d2)).strftime('%B')}, which {lib} version"
                    f" did {alias} get?",
                ]
            ),
            [n_v2],
        )
        # Config: this service's value and another service's value of the same key.
        key, spoken, values, why = keys[s % len(keys)]
        value, other_value = rng.sample(values, 2)
        n_cfg = note(
            f"Set {key} = {value} in config/{svc}.toml because {why}.",
            room,
            [svc, "config"],
            day0 + rng.randint(5, 60),
        )
        ask(
            "distractor",
            rng.choice(
                [
                    f"What {spoken} did we configure for {alias}?",
                    f"How high is {alias}'s {spoken} set?",
                ]
            ),
            [n_cfg],
        )
        # the distractor: the same key for another service (no question of its own here)
        other = SERVICES[(s + 5) % len(SERVICES)]
        note(
            f"Set {key} = {other_value} in config/{other[0]}.toml, same reason as elsewhere.",
            other[2],
            [other[0], "config"],
            day0 + rng.randint(5, 60),
        )
        # Owner, and the person note: multi-hop questions.
        owner = owners[s]
        prev = people[(people.index(owner) + 3) % len(people)]
        n_owner = note(
            f"{owner[0].split()[0]} took over {svc} from {prev[0].split()[0]}; "
            f"page them for anything touching it.",
            "team",
            [svc, "ownership"],
            day0 + rng.randint(1, 50),
        )
        ask(
            "single",
            rng.choice(
                [
                    f"Who is responsible for {alias} these days?",
                    f"Whom should I page about {alias}?",
                ]
            ),
            [n_owner],
        )
        ask(
            "multi_hop",
            rng.choice(
                [
                    f"Who owns the service that listens on port {port}?",
                    f"Which person do I contact about whatever runs on port {port}?",
                ]
            ),
            [n_port, n_owner],
        )
        ask(
            "multi_hop",
            rng.choice(
                [
                    f"In which city is the person who maintains {alias} based?",
                    f"Where does the owner of {alias} work from?",
                ]
            ),
            [n_owner, person_note[owner[0]]],
        )
        # Incident, then its follow-up note written in the same session (no subject named).
        symptom, short, cause, fix = SYMPTOMS[s % len(SYMPTOMS)]
        metric, threshold = ALERTS[(s * 3) % len(ALERTS)]
        if s >= len(ALERTS):  # the second use of an alert: another threshold
            threshold = f"{threshold} for {rng.choice([5, 10, 15])} minutes"
        d_inc = day0 + rng.randint(10, 80)
        n_inc = note(
            f"Incident: {svc} {symptom}. Root cause: {cause}. Fix: {fix}.",
            "incidents",
            [svc, "incident"],
            d_inc,
            key=f"inc{s}",
        )
        n_follow = note(
            f"Follow-up from that one: new alert when {metric} goes above {threshold}, "
            f"routed to the on-call channel.",
            "incidents",
            ["incident", "alerting"],
            d_inc,
            key=f"inc{s}+",
        )
        ask(
            "single",
            rng.choice(
                [
                    f"What was behind the {short} in {alias}?",
                    f"Why did {alias} have {short}?",
                ]
            ),
            [n_inc],
        )
        ask(
            "follow_up",
            rng.choice(
                [
                    f"After {alias}'s {short} incident, what alert did we set up?",
                    f"Which alert threshold was added following the {short} in {alias}?",
                ]
            ),
            [n_follow],
        )
        # Decision (one per two services), migration.
        if s % 2 == 0:
            choice, alt, purpose, reason = DECISIONS[(s // 2) % len(DECISIONS)]
            n_dec = note(
                f"Decision for {svc}: {choice} rather than {alt} for {purpose}, since {reason}.",
                "decisions",
                [svc, "decision"],
                day0 + rng.randint(0, 30),
            )
            ask(
                "single",
                rng.choice(
                    [
                        f"Why did {alias} go with {choice}?",
                        f"What did {alias} pick for {purpose} and why not {alt}?",
                    ]
                ),
                [n_dec],
            )
        target = MIGRATION_TARGETS[s % len(MIGRATION_TARGETS)]
        d_mig = day0 + rng.randint(40, 120)
        when = (START + timedelta(days=d_mig)).strftime("%d %B %Y")
        n_mig = note(
            f"Migration of {svc} to {target} finished on {when}; rollback plan no longer needed.",
            "infra",
            [svc, "migration"],
            d_mig,
        )
        ask(
            "temporal",
            rng.choice(
                [
                    f"When did {alias} complete its move to {target}?",
                    f"On what date was {alias} migrated onto {target}?",
                ]
            ),
            [n_mig],
        )
    for line in CHATTER:
        note(line, rng.choice(["backend", "infra", "frontend", "tools"]), ["misc"],
             rng.randint(0, 150))  # fmt: skip

    # Sessions: the notes of one day and room, a few minutes apart; a follow-up is written
    # right after its incident note, the rest of a session in a shuffled order.
    order = sorted(
        range(len(notes)), key=lambda i: (notes[i]["day"], notes[i]["room"], rng.random())
    )
    placed: list[int] = []
    for i in order:
        key = notes[i]["key"]
        if key and key.endswith("+"):
            continue
        placed.append(i)
        if key:
            placed.append(next(j for j, n in enumerate(notes) if n["key"] == key + "+"))
    drawers = []
    clock: dict[tuple[int, str], datetime] = {}
    for i in placed:
        n = notes[i]
        slot = (n["day"], n["room"])
        at = clock.get(slot, START + timedelta(days=n["day"], minutes=rng.randint(0, 480)))
        at += timedelta(minutes=rng.randint(1, 6))
        clock[slot] = at
        drawers.append({
            "id": n["id"], "text": n["text"], "room": n["room"], "tags": n["tags"],
            "created_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        })  # fmt: skip
    drawers.sort(key=lambda d: (d["created_at"], d["id"]))
    for k, q in enumerate(questions):
        q["id"] = f"q{k:03d}"
    return {
        "name": "eng-notes",
        "seed": seed,
        "drawers": drawers,
        "questions": [
            {"id": q["id"], **{k: q[k] for k in ("question", "category", "gold")}}
            for q in questions
        ],
    }


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    parser.add_argument(
        "--seed",
        type=int,
        default=SEED,
        help="another seed writes another set from the same facts and templates (a check "
        "for ranking rules: the committed file is the one tuned on)",
    )
    args = parser.parse_args(argv)
    return write_or_check(dumps(generate(args.seed)), args.out, args.check)


def write_or_check(text: str, out: Path, check: bool) -> int:
    """Write a set's file, or with ``check`` say whether the one at ``out`` is ``text``
    (exit status 1 if not): what every set's generator does with what it made."""
    if check:
        current = out.read_text() if out.exists() else ""
        print("up to date" if current == text else f"stale: {out}")
        return 0 if current == text else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    data = json.loads(text)
    print(f"{len(data['drawers'])} drawers, {len(data['questions'])} questions -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
