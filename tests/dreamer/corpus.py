"""Distinct sentences and their near-duplicates, for tests that need many of both.

Sentence ``i`` takes its words from lists of coprime lengths by ``i`` modulo each length,
so two sentences rarely share more than one word slot (MiniLM cosine well below 0.95),
while a sentence and its twin (lower case, no final period) sit above 0.95.
"""

from __future__ import annotations

PEOPLE = [
    "Alice",
    "Bob",
    "Carol",
    "Dmitri",
    "Erin",
    "Farah",
    "Gustav",
    "Hana",
    "Ivan",
    "Julia",
    "Kenji",
    "Lena",
    "Marco",
    "Nadia",
    "Omar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sven",
    "Tara",
]
ACTIONS = [
    "repaired",
    "painted",
    "archived",
    "benchmarked",
    "deployed",
    "rewrote",
    "audited",
    "migrated",
    "documented",
    "profiled",
    "refactored",
    "tested",
    "packaged",
    "monitored",
    "translated",
    "simplified",
    "encrypted",
    "indexed",
    "cached",
]
THINGS = [
    "printer",
    "fence",
    "invoice",
    "parser",
    "dashboard",
    "firewall",
    "kernel",
    "playlist",
    "garden",
    "telescope",
    "compiler",
    "budget",
    "recipe",
    "bicycle",
    "thermostat",
    "newsletter",
    "database",
    "spreadsheet",
]
PLACES = [
    "Berlin",
    "Tokyo",
    "Lagos",
    "Lima",
    "Oslo",
    "Perth",
    "Quito",
    "Seoul",
    "Tunis",
    "Dakar",
    "Hanoi",
    "Porto",
    "Riga",
]


def sentence(i: int) -> str:
    return (
        f"{PEOPLE[i % len(PEOPLE)]} {ACTIONS[i % len(ACTIONS)]} the"
        f" {THINGS[i % len(THINGS)]} in {PLACES[i % len(PLACES)]}."
    )


def twin(text: str) -> str:
    """A near-duplicate: same words, lower case, no final period."""
    return text.lower().rstrip(".")
