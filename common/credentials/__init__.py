"""Credentials in what agents write: found, and replaced by a marker before anything keeps them.

Agents write what they see: ``.env`` files, logs, shell history, stack traces with
connection strings. A token kept in a drawer is in SQLite, its full-text index, the
archive, every export and every vector made of it; so a palace worker redacts each write
on receipt (``workers/secrets_guard.py``), before the store and before the embedder.

* ``rules.py`` - what is a credential, as data: each format with the source that defines
  it. Most patterns are detect-secrets' own (its plugins' regexes, used as they are); the
  formats it lacks carry the URL of their documentation.
* ``detector.py`` - ``find(text)``: the spans of ``text`` that are credentials, each with
  its kind. A cheap prefilter (a lowercase substring per rule) keeps a note with nothing
  key-like to a few microseconds.
* ``markers.py`` - the marker that takes a secret's place, ``[secret:aws-access-key
  #3f9a1c]``, and how to find markers in a text (the web page shows them). Imports nothing
  heavy: the web page and the command line use it.
* ``redactor.py`` - ``Redactor``: a text with every secret replaced by its marker; the
  fingerprint is a keyed hash (the home's ``redaction.key``, 0600), so the same secret
  always gives the same marker and the secret itself is never stored.

Run by: palace workers (redaction, scrub, export); the web page and the CLI (markers).
May import: the standard library, detect-secrets and ``common``; no actor.
"""
