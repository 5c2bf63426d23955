"""Capture: memories that get into a palace without an agent deciding to save them.

Transcripts and notes are mined into drawers (``trusty-memory mine``), agent hooks run
that in the background as a session goes on (``hooks.py``), and a session starts with
the palace's identity and its most important notes (``wake_up.py``). Every write goes
through the daemon and the protocol like any other: capture is a client, not a store.
"""
