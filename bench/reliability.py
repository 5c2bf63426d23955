"""Reliability: process kills, hostile input, storage faults and a soak, against the real daemon.

    .venv/bin/python -m bench.reliability {kill,fuzz,storage,soak,all} [--quick] [--seed N]
                                          [--out bench/out/reliability-PART.json]

- ``kill``: ``kill -9`` of the palace worker, the embedder, the dreamer, the broker and one
  ``serve`` process, each while 16 sessions write. Every acknowledged drawer id is checked
  afterwards in the palace's SQLite file and by a recall of its exact text through
  ``serve`` (the index agrees with SQLite); also errors seen, hangs, and the seconds from
  the kill until a write sent after it was acknowledged.
- ``fuzz``: 10,000 hostile stdin lines for ``serve`` and 10,000 malformed messages for the
  broker's front socket (``bench/fuzz_cases.py``): crashes, hangs (no answer in 10 s),
  answers that are not JSON-RPC 2.0, and whether everything still serves afterwards.
- ``storage``: the vector index deleted, truncated or garbled while stopped; a palace's
  SQLite file corrupted (header, then pages) beside a healthy palace; the disk filling up
  under a palace (a tmpfs mounted on its directory; needs root, skipped otherwise).
- ``soak``: 50 sessions calling a mix of tools for 10 minutes (after a minute of warm-up):
  calls/s, latency percentiles per tool, errors by message, and the RSS of every process
  at the start and the end.

Each part runs a real ``trusty-memory daemon`` in a throw-away home under /tmp and drives
real ``trusty-memory serve`` processes over stdio, one JSON-RPC message per line, as agents
do. ``--quick`` shrinks every size for CI (``tests/reliability/``). The JSON goes to
``--out``; a summary is printed; the exit status is 1 when a hard property failed (an
acknowledged write lost or not found, a crash, a hang, an unanswered request).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import queue
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from bench import fuzz_cases as fc
from bench.harness import pct, rss_mb
from bench.mcp_stdio import INIT, SERVE
from trusty_memory.client.autostart import daemon_pid, ping
from trusty_memory.client.sync import Client
from trusty_memory.common import protocol as p
from trusty_memory.common.config import load_config

CALL_TIMEOUT_S = 60.0  # one tool call; the broker answers its own 30 s deadline before this
HANG_S = 10.0  # fuzz: a request with no answer after this long is a hang
MAX_HANGS = 20  # fuzz: a session or socket is given up after this many (bounds the run's time)
RECALL_TOP_K = 10
WORDS = (  # noqa: SIM905 - a word list reads better as words
    "amber basil cobalt delta ember falcon garnet harbor indigo juniper kettle lantern "
    "marble nectar orbit pepper quartz raven saffron timber umber velvet willow xenon "
    "yarrow zephyr anchor bramble canyon dune estuary fjord glacier heath island jetty "
    "knoll lagoon mesa nebula oasis prairie quarry ridge savanna tundra upland valley wadi "
    "yard zenith copper silver tin zinc iron nickel cedar maple oak pine birch alder rowan "
    "hazel spruce larch"
).split()


def note(tag: str, session: int, i: int, rng: random.Random) -> str:
    """A text no other note repeats, so a recall of it exactly has one right answer."""
    return f"{tag} session {session} note {i}: " + " ".join(rng.choices(WORDS, k=8))


# --------------------------------------------------------------------------------------
# A home with a daemon, and serve sessions.


class Home:
    """A throw-away ``TRUSTY_MEMORY_HOME`` under /tmp (short: ipc socket paths must stay
    under ~100 bytes) and the daemon running in it, whoever started it."""

    def __init__(self, **settings: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="tmr-", dir="/tmp"))
        self._saved_home = os.environ.get("TRUSTY_MEMORY_HOME")
        os.environ["TRUSTY_MEMORY_HOME"] = str(self.path)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # settings: TRUSTY_MEMORY_* variables for this home's processes only
        self.env = {**os.environ, **settings}
        self.config = load_config()

    def __enter__(self) -> Home:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.path, ignore_errors=True)
        if self._saved_home is None:
            os.environ.pop("TRUSTY_MEMORY_HOME", None)
        else:
            os.environ["TRUSTY_MEMORY_HOME"] = self._saved_home

    def start(self, timeout: float = 90.0) -> float:
        """Start the daemon; returns the seconds until it answered."""
        t0 = time.monotonic()
        with open(self.path / "daemon.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "trusty_memory.broker"], stderr=log, env=self.env
            )
        threading.Thread(target=proc.wait, daemon=True).start()  # reap it whenever it ends
        if not wait_until(lambda: ping(self.config, 0.5), timeout):
            raise RuntimeError(f"daemon did not answer within {timeout}s; see {self.path}")
        return time.monotonic() - t0

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the daemon (workers save their index on the way down); SIGKILL if stuck."""
        pid = daemon_pid(self.config)
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        if not wait_until(lambda: daemon_pid(self.config) is None, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            wait_until(lambda: daemon_pid(self.config) is None, 5)

    def client(self) -> Client:
        return Client(self.config, autostart=False)

    def status(self) -> dict:
        with self.client() as c:
            return c.status()

    def pids(self) -> dict[str, int]:
        """The daemon's processes by role: broker, dreamer, embedder, palace:<name>."""
        status = self.status()
        out = {"broker": status["pid"]}
        if status.get("dreamer_pid"):
            out["dreamer"] = status["dreamer_pid"]
        for service in status["services"]:
            for worker in service["workers"]:
                out[service["name"]] = worker["pid"]
        return out

    def log_events(self, event: str) -> list[dict]:
        """The daemon's JSON log lines (from either log file) whose event is ``event``."""
        found = []
        for path in (self.path / "daemon.log", self.path / "logs" / "daemon.log"):
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    with contextlib.suppress(ValueError):
                        entry = json.loads(line)
                        if isinstance(entry, dict) and entry.get("event") == event:
                            found.append(entry)
        return found


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


class SessionDead(Exception):
    """The serve process closed its stdout (it exited)."""


class Hang(Exception):
    """No answer in time."""


class Session:
    """One ``trusty-memory serve`` process; a thread reads its answers, so every wait for
    one is bounded."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [*SERVE, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.answers: queue.Queue[bytes | None] = queue.Queue()
        self.ids = itertools.count(1)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def start(self) -> Session:
        self.call("initialize", INIT)
        self.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        # ping is answered by serve itself; a tool call goes through the daemon's MCP host,
        # which may still be starting when the daemon first answers: then the session is up.
        self.call("tools/call", {"name": "palace_list", "arguments": {}})
        return self

    def write(self, line: bytes) -> None:
        try:
            self.proc.stdin.write(line + b"\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise SessionDead(f"serve stdin closed: {exc}") from None

    def read(self, timeout: float) -> bytes:
        try:
            line = self.answers.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            raise Hang(f"no answer within {timeout:.0f}s") from None
        if line is None:
            self.answers.put(None)
            raise SessionDead(f"serve exited ({self.proc.poll()})")
        return line

    def call(self, method: str, params: Any, timeout: float = CALL_TIMEOUT_S) -> dict:
        rid = next(self.ids)
        self.write(
            json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()
        )
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.read(deadline - time.monotonic()))
            if msg.get("id") == rid:
                return msg

    def tool(
        self, tool: str, /, *, timeout: float = CALL_TIMEOUT_S, **arguments: Any
    ) -> tuple[bool, Any]:
        """``(True, result object)`` or ``(False, error message)``."""
        msg = self.call("tools/call", {"name": tool, "arguments": arguments}, timeout)
        if "error" in msg:
            return False, msg["error"]["message"]
        return True, json.loads(msg["result"]["content"][0]["text"])

    def close(self, timeout: float = 10.0) -> int | None:
        """Close stdin (the contract's way to end a session); the exit code, None if it hung."""
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def start_sessions(home: Home, n: int) -> list[Session]:
    sessions = [Session(home.env) for _ in range(n)]
    return [s.start() for s in sessions]


def close_sessions(sessions: list[Session]) -> list[int | None]:
    return [s.close() for s in sessions]


def parallel(n: int, fn: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# --------------------------------------------------------------------------------------
# Writes that were acknowledged, and checking them afterwards.


@dataclass
class Ack:
    drawer_id: str
    text: str
    session: int
    sent: float
    acked: float


@dataclass
class WriteLoad:
    """Sessions writing unique notes to one palace, each as fast as it gets answers. A
    session that dies or hangs is replaced, as an agent host restarts its server."""

    home: Home
    sessions: list[Session]
    palace: str
    tag: str
    acks: list[Ack] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    hangs: int = 0
    replaced: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._writer, args=(k,)) for k in range(len(self.sessions))
        ]

    def start(self) -> WriteLoad:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def _writer(self, k: int) -> None:
        rng = random.Random(f"{self.tag}-{k}")
        for i in itertools.count():
            if self._stop.is_set():
                return
            text = note(self.tag, k, i, rng)
            sent = time.monotonic()
            try:
                ok, data = self.sessions[k].tool("memory_remember", palace=self.palace, text=text)
            except (Hang, SessionDead) as exc:
                with self._lock:
                    self.errors.append((time.monotonic(), f"serve: {exc}"))
                    self.hangs += isinstance(exc, Hang)
                    self.replaced += 1
                self.sessions[k].kill()
                self.sessions[k] = Session(self.home.env).start()
                continue
            with self._lock:
                if ok:
                    self.acks.append(Ack(data["drawer_id"], text, k, sent, time.monotonic()))
                else:
                    self.errors.append((time.monotonic(), data))


def write_notes(home: Home, sessions: list[Session], palace: str, n: int, tag: str) -> list[Ack]:
    """``n`` notes written by the sessions together; every one must be acknowledged."""
    acks: list[Ack] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        rng = random.Random(f"{tag}-{k}")
        for i in range(k, n, len(sessions)):
            text = note(tag, k, i, rng)
            ok, data = sessions[k].tool("memory_remember", palace=palace, text=text)
            if not ok:
                raise RuntimeError(f"setup write failed: {data}")
            with lock:
                acks.append(Ack(data["drawer_id"], text, k, 0.0, 0.0))

    parallel(len(sessions), work)
    return acks


def write_one(session: Session, palace: str, acks: list[Ack], text: str) -> str | None:
    """One remember; its ack is kept. Returns the error message, None when stored."""
    ok, data = session.tool("memory_remember", palace=palace, text=text)
    if ok:
        acks.append(Ack(data["drawer_id"], text, 0, 0.0, 0.0))
    return None if ok else data


def stored_ids(home: Home, palace: str) -> set[str]:
    """Every drawer id in the palace's SQLite file, read directly (no daemon involved)."""
    db = sqlite3.connect(home.config.palace_dir(palace) / "palace.sqlite3", timeout=30)
    try:
        return {row[0] for row in db.execute("SELECT id FROM drawers")}
    finally:
        db.close()


def not_recalled(sessions: list[Session], palace: str, acks: list[Ack]) -> list[str]:
    """Ids of acknowledged notes that a ``memory_recall`` of their exact text misses."""
    missed: list[str] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        for ack in acks[k :: len(sessions)]:
            try:
                ok, data = sessions[k].tool(
                    "memory_recall", palace=palace, query=ack.text, top_k=RECALL_TOP_K
                )
            except (Hang, SessionDead):
                ok, data = False, None
            if not ok or ack.drawer_id not in {hit["drawer_id"] for hit in data["results"]}:
                with lock:
                    missed.append(ack.drawer_id)

    parallel(len(sessions), work)
    return missed


def verify(home: Home, sessions: list[Session], palace: str, acks: list[Ack]) -> dict:
    """Acknowledged writes against SQLite, the index and an exact recall of each."""
    stored = stored_ids(home, palace)
    missing = [a.drawer_id for a in acks if a.drawer_id not in stored]
    missed = not_recalled(sessions, palace, acks)
    with home.client() as c:
        info = c.palace_info(palace)
    return {
        "acknowledged": len(acks),
        "missing_in_sqlite": len(missing),
        "not_found_by_exact_recall": len(missed),
        "drawers_in_sqlite": len(stored),
        "drawer_count": info.drawer_count,
        "index_count": info.index_count,
        "examples": (missing + missed)[:5],
        "checks": {
            "nothing_acknowledged_lost": not missing,
            "every_acknowledged_text_recalled": not missed,
            "index_agrees_with_sqlite": info.index_count == info.drawer_count == len(stored),
        },
    }


# --------------------------------------------------------------------------------------
# kill -9 during writes


VICTIMS = ("palace", "embedder", "dreamer", "broker", "serve")


def kill_part(quick: bool, victims: list[str], sessions_n: int = 16) -> dict:
    before_s, after_s = (1.5, 8.0) if quick else (5.0, 20.0)
    out: dict[str, Any] = {
        "sessions": sessions_n,
        "before_kill_s": before_s,
        "after_kill_s": after_s,
    }
    with Home() as home:
        home.start()
        sessions = start_sessions(home, sessions_n)
        out["victims"] = {v: kill_one(home, sessions, v, before_s, after_s) for v in victims}
        close_sessions(sessions)
    return out


def kill_one(
    home: Home, sessions: list[Session], victim: str, before_s: float, after_s: float
) -> dict:
    palace = f"kill-{victim}"
    ok, data = sessions[0].tool("palace_create", name=palace)
    assert ok, data
    sessions[0].tool("memory_remember", palace=palace, text="warm up the worker")
    load = WriteLoad(home, sessions, palace, tag=f"kill {victim}").start()
    time.sleep(before_s)
    pids = home.pids()
    role = {"palace": f"palace:{palace}", "serve": "serve"}.get(victim, victim)
    pid = sessions[0].proc.pid if victim == "serve" else pids[role]
    adopted_before = _adopted(home)
    t_kill = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    time.sleep(after_s)
    load.stop()
    serving = wait_until(lambda: ping(home.config, 1.0), 60)
    after = [a for a in load.acks if a.sent >= t_kill and (victim != "serve" or a.session == 0)]
    replacement = sessions[0].proc.pid if victim == "serve" else home.pids().get(role)
    orphans = []
    if victim == "broker":  # the old broker's children must notice and exit
        children = [p for role, p in pids.items() if role != "broker"]
        wait_until(lambda: not any(_alive(p) for p in children), 15)
        orphans = [p for p in children if _alive(p)]
    return {
        "killed_pid": pid,
        "writes_acknowledged": len(load.acks),
        "errors_seen": len(load.errors),
        "error_messages": dict(Counter(msg for _, msg in load.errors).most_common(5)),
        "hangs": load.hangs,
        "sessions_replaced": load.replaced,
        "seconds_until_writes_succeed": round(min(a.acked for a in after) - t_kill, 3)
        if after
        else None,
        "orphans": orphans,
        "replacement_pid": replacement,
        "foreign_writes_adopted": _adopted(home) - adopted_before,
        "verified": verify(home, sessions, palace, load.acks),
        "checks": {
            "no_hangs": not load.hangs,
            "process_replaced": replacement not in (None, pid),
            "writes_succeed_again": bool(after),
            "daemon_serving_after": serving,
            "no_orphans": not orphans,
        },
    }


def _adopted(home: Home) -> int:
    """Drawers a palace worker found committed by another process (an orphan) so far."""
    return sum(e.get("added", 0) for e in home.log_events("adopted changes from another writer"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead, just not reaped yet.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    return False


# --------------------------------------------------------------------------------------
# fuzz


@dataclass
class FuzzTally:
    sent: int = 0
    expected: int = 0
    answered: int = 0
    hangs: int = 0
    invalid: int = 0
    unsolicited: int = 0
    crashes: int = 0
    examples: list[dict] = field(default_factory=list)

    def note(self, problem: str, kind: str, payload: bytes | str) -> None:
        if len(self.examples) < 20:
            self.examples.append({"problem": problem, "kind": kind, "payload": repr(payload[:160])})

    def checks(self) -> dict[str, bool]:
        return {
            "no_crashes": not self.crashes,
            "no_hangs": not self.hangs,
            "every_answer_valid_json_rpc": not self.invalid,
            "every_request_answered": self.answered == self.expected,
        }

    def add(self, other: FuzzTally) -> None:
        for name in ("sent", "expected", "answered", "hangs", "invalid", "unsolicited", "crashes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.examples += other.examples[: 20 - len(self.examples)]


def _id_key(rid: Any) -> str | None:
    return None if rid is None else json.dumps(rid)


def fuzz_session(session: Session, cases: list[fc.Case]) -> FuzzTally:
    """Send each case's lines, then wait (bounded) for exactly the answers they are owed."""
    tally = FuzzTally()
    tolerated: set[str | None] = set()  # ids of responses sent to serve: an answer may come
    for kind, lines in cases:
        if tally.hangs >= MAX_HANGS:
            break
        owed: Counter[str | None] = Counter()
        for line in lines:
            what, rid = fc.expected_answer(line)
            if what in ("id", "null"):
                owed[_id_key(rid)] += 1
            elif what == "maybe":
                tolerated.add(_id_key(rid))
        tally.sent += len(lines)
        tally.expected += sum(owed.values())
        try:
            for line in lines:
                session.write(line)
            deadline = time.monotonic() + HANG_S
            while +owed:
                raw = session.read(deadline - time.monotonic())
                try:
                    msg = json.loads(raw, parse_constant=fc.reject_constant)
                    problem = fc.answer_problem(msg)
                except ValueError:
                    msg, problem = None, "not JSON"
                if problem:
                    tally.invalid += 1
                    tally.note(problem, kind, raw)
                    continue
                key = _id_key(msg["id"])
                if owed[key] > 0:
                    owed[key] -= 1
                    tally.answered += 1
                elif key in tolerated:
                    tolerated.discard(key)
                else:
                    tally.unsolicited += 1
                    tally.note("unsolicited answer", kind, raw)
        except Hang:
            tally.hangs += sum(owed.values())
            tally.note(f"no answer within {HANG_S:.0f}s", kind, lines[0])
        except SessionDead:
            tally.crashes += 1
            tally.note("serve exited", kind, lines[0])
            return tally
    return tally


def fuzz_stdin(home: Home, n_lines: int, seed: int, sessions_n: int = 4) -> dict:
    cases = list(fc.stdin_cases(n_lines, seed))
    sessions = start_sessions(home, sessions_n)
    tallies = [FuzzTally() for _ in sessions]

    def work(k: int) -> None:
        tallies[k] = fuzz_session(sessions[k], cases[k::sessions_n])

    t0 = time.monotonic()
    parallel(sessions_n, work)
    elapsed = time.monotonic() - t0
    total = FuzzTally()
    for t in tallies:
        total.add(t)
    still = [s.proc.poll() is None and _session_serves(s) for s in sessions]
    exits = close_sessions(sessions)
    return {
        **total.__dict__,
        "seconds": round(elapsed, 1),
        "kinds": dict(Counter(kind.split(":")[0] for kind, _ in cases)),
        "exit_codes_on_eof": exits,
        "checks": {
            **total.checks(),
            "still_serving_after": all(still),
            "exit_0_on_eof": set(exits) == {0},
        },
    }


def _session_serves(s: Session) -> bool:
    try:
        ok, _ = s.tool("memory_recall", palace=fc.PALACE, query="still serving?", top_k=1)
        return ok and s.call("ping", {})["result"] == {}
    except (Hang, SessionDead):
        return False


def fuzz_frames(home: Home, n_messages: int, seed: int) -> dict:
    """Malformed messages on the broker's front socket, one case at a time."""
    broker_pid = daemon_pid(home.config)
    restarts = home.status()["restarts"]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(home.config.frontend)
    tally = FuzzTally()
    kinds: Counter[str] = Counter()
    t0 = time.monotonic()
    for kind, messages in fc.frame_cases(n_messages, seed):
        if tally.hangs >= MAX_HANGS:
            break
        kinds[kind.split(":")[0]] += 1
        owed: list[str | None] = []
        for frames in messages:
            due, rid = fc.expected_reply(frames)
            sock.send_multipart(frames)
            owed += [rid] if due else []
        tally.sent += len(messages)
        tally.expected += len(owed)
        deadline = time.monotonic() + HANG_S
        while owed:
            if not sock.poll(max(int((deadline - time.monotonic()) * 1000), 0)):
                tally.hangs += len(owed)
                tally.note(f"no reply within {HANG_S:.0f}s", kind, messages[0][-1])
                break
            try:
                rid = p.decode_response(sock.recv()).id
            except p.TrustyError as exc:
                tally.invalid += 1
                tally.note(exc.message, kind, messages[0][-1])
                continue
            if rid in owed or None in owed:
                owed.remove(rid if rid in owed else None)
                tally.answered += 1
            else:
                tally.unsolicited += 1
        if daemon_pid(home.config) != broker_pid:
            tally.crashes += 1
            tally.note("broker gone", kind, messages[0][-1])
            break
    sock.close()
    restarted = {k: n - restarts.get(k, 0) for k, n in home.status()["restarts"].items()}
    return {
        **tally.__dict__,
        "seconds": round(time.monotonic() - t0, 1),
        "kinds": dict(kinds),
        "worker_restarts": restarted,
        "checks": {
            **tally.checks(),
            "broker_pid_unchanged": daemon_pid(home.config) == broker_pid,
            "no_worker_restarts": not any(restarted.values()),
        },
    }


def fuzz_part(quick: bool, seed: int) -> dict:
    n = 1_000 if quick else 10_000
    with Home() as home:
        home.start()
        with home.client() as c:
            c.palace_create(fc.PALACE)
            for i in range(20):
                c.remember(fc.PALACE, f"fuzz target note {i}")
        out = {"stdin": fuzz_stdin(home, n, seed), "broker_front": fuzz_frames(home, n, seed)}
        session = Session(home.env).start()
        out["checks"] = {"a_new_session_serves_after": _session_serves(session)}
        session.close()
    return out


# --------------------------------------------------------------------------------------
# storage faults


def storage_part(quick: bool) -> dict:
    n = 300 if quick else 3_000
    out: dict[str, Any] = {"drawers": n}
    with Home() as home:
        home.start()
        sessions = start_sessions(home, 8)
        with home.client() as c:
            c.palace_create("ix")
        acks = write_notes(home, sessions, "ix", n, "index fault")
        for fault in ("deleted", "truncated", "garbled"):
            out[f"index_{fault}"] = index_fault(home, sessions, acks, fault)
        out["sqlite_corrupt"] = sqlite_corrupt(home, sessions)
        close_sessions(sessions)
    out["disk_full"] = disk_full(quick)
    return out


def index_fault(home: Home, sessions: list[Session], acks: list[Ack], fault: str) -> dict:
    """Damage the index snapshot while the daemon is stopped; it must be rebuilt on open."""
    home.stop()
    palace_dir = home.config.palace_dir("ix")
    snapshots = sorted(palace_dir.glob("index-*.hnsw"))
    for path in palace_dir.glob("index-*"):
        if fault == "deleted":
            path.unlink()
        elif fault == "truncated" and path.suffix == ".hnsw":
            os.truncate(path, path.stat().st_size // 2)
        elif fault == "garbled" and path.suffix == ".hnsw":
            with path.open("r+b") as fh:
                fh.seek(path.stat().st_size // 2)
                fh.write(random.Random(7).randbytes(4096))
    rebuilt_before = len(home.log_events("index rebuilt"))
    home.start()
    t0 = time.monotonic()
    with home.client() as c:
        info = c.palace_info("ix")  # the first request opens the palace
    opened = time.monotonic() - t0
    rebuilt = len(home.log_events("index rebuilt")) > rebuilt_before
    return {
        "snapshot_files_before": len(snapshots),
        "open_s": round(opened, 3),
        "drawer_count": info.drawer_count,
        "verified": verify(home, sessions, "ix", acks),
        "checks": {"rebuilt_from_sqlite": rebuilt},
    }


def sqlite_corrupt(home: Home, sessions: list[Session]) -> dict:
    """Corrupt one palace's SQLite file beside a healthy one; then put the file back."""
    with home.client() as c:
        c.palace_create("victim")
        c.palace_create("bystander")
    write_notes(home, sessions, "victim", 40, "victim")
    by_acks = write_notes(home, sessions, "bystander", 40, "bystander")
    db = home.config.palace_dir("victim") / "palace.sqlite3"
    out: dict[str, Any] = {}
    for fault in ("header", "pages"):
        home.stop()
        backup = db.read_bytes()
        for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            extra.unlink(missing_ok=True)
        _corrupt(db, fault)
        home.start()
        s = sessions[0]
        t0 = time.monotonic()
        ok, message = s.tool("memory_recall", palace="victim", query="anything")
        first_s = time.monotonic() - t0
        ok_write, write_message = s.tool("memory_remember", palace="victim", text="new note")
        by_ok, _ = s.tool("memory_remember", palace="bystander", text=f"{fault} bystander")
        time.sleep(3.0)  # long enough for a restart loop to show in the counts
        restarts = home.status()["restarts"].get("palace:victim#0", 0)
        t1 = time.monotonic()
        again_ok, again = s.tool("memory_list", palace="victim")
        again_s = time.monotonic() - t1
        db.write_bytes(backup)  # the user restores the file from a backup
        wait_until(lambda s=s: s.tool("memory_list", palace="victim")[0], 30, interval=0.5)
        restored_ok, _ = s.tool("memory_recall", palace="victim", query="victim note")
        out[fault] = {
            "error": message if not ok else None,
            "seconds_to_error": round(first_s, 3),
            "remember_error": write_message if not ok_write else None,
            "later_call_error": again if not again_ok else None,
            "later_call_s": round(again_s, 3),
            "worker_restarts_in_3s": restarts,
            "checks": {
                "calls_fail": not ok and not ok_write and not again_ok,
                "error_names_the_file_and_a_fix": _clear_corruption_error(message, db),
                "error_within_5s": first_s < 5 and again_s < 5,
                "no_restart_loop": restarts <= 1,
                "other_palace_serves": by_ok,
                "serves_after_restore": restored_ok,
            },
        }
    out["bystander_intact"] = verify(home, sessions, "bystander", by_acks)
    return out


def _clear_corruption_error(message: Any, db: Path) -> bool:
    """Names the file, says it is damaged, and says how to get the palace back."""
    text = str(message).lower()
    return str(db) in str(message) and "corrupt" in text and "restore" in text


def _corrupt(db: Path, fault: str) -> None:
    rng = random.Random(fault)
    with db.open("r+b") as fh:
        if fault == "header":
            fh.write(rng.randbytes(100))  # the 100-byte header: "file is not a database"
            return
        size = db.stat().st_size
        for offset in range(8192, size - 4096, 16384):  # every 4th page from the third
            fh.seek(offset)
            fh.write(rng.randbytes(4096))


def disk_full(quick: bool) -> dict:
    """Writes into a palace whose directory is a small tmpfs that fills up, then frees."""
    # A snapshot every 10 writes, so index snapshots also meet the full disk.
    with Home(TRUSTY_MEMORY_PALACE_INDEX_SAVE_EVERY="10") as home:
        mount = home.config.palace_dir("full")
        mount.mkdir(parents=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            return {"skipped": f"cannot mount a tmpfs here: {done.stderr.strip()}"}
        try:
            return _fill_disk(home, mount, 10 if quick else 50)
        finally:
            home.stop()
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill_disk(home: Home, mount: Path, extra: int) -> dict:
    home.start()
    session = Session(home.env).start()
    try:
        assert session.tool("palace_create", name="full")[0]
        acks = write_notes(home, [session], "full", 20, "before full")
        free = os.statvfs(mount)
        ballast = mount / "ballast"
        ballast.write_bytes(b"\0" * max(free.f_bavail * free.f_frsize - 2**20, 0))  # 1 MiB left
        rng = random.Random("full")
        errors: Counter[str] = Counter()
        hangs = 0
        first_error = None
        for i in itertools.count():  # write until refused, then ``extra`` more
            if (first_error and sum(errors.values()) >= extra) or i >= 5_000:
                break
            try:
                error = write_one(session, "full", acks, note("filling", 0, i, rng))
            except Hang:
                hangs += 1
                continue
            if error:
                errors[error] += 1
                first_error = first_error or error
        filled = len(acks) - 20
        leftovers = sorted(p.name for p in mount.glob("*.tmp"))  # half-written files
        ballast.unlink()
        t0 = time.monotonic()
        back = f"space is back {time.time()}"
        resumed = wait_until(lambda: write_one(session, "full", acks, back) is None, 60, 0.5)
        resume_s = time.monotonic() - t0
        acks += write_notes(home, [session], "full", 20, "after full")
        restarts = home.status()["restarts"].get("palace:full#0", 0)
        home.stop()  # and reopen: what the full disk left must load (or rebuild) cleanly
        home.start()
        return {
            "filesystem": "tmpfs, 16 MiB",
            "acknowledged_while_filling": filled,
            "refused_writes": sum(errors.values()),
            "first_error": first_error,
            "error_messages": dict(errors.most_common(3)),
            "hangs": hangs,
            "seconds_until_writes_resume": round(resume_s, 3),
            "temp_files_left_while_full": leftovers,
            "index_snapshots_refused": len(home.log_events("index snapshot failed")),
            "worker_restarts": restarts,
            "verified": verify(home, [session], "full", acks),
            "checks": {
                "no_hangs": not hangs,
                "worker_kept_running": restarts == 0,
                "refused_as_disk_full": "disk full" in str(first_error).lower(),
                "writes_resume_once_space_returns": resumed,
            },
        }
    finally:
        session.close()


# --------------------------------------------------------------------------------------
# soak


SOAK_MIX = {
    "memory_remember": 30,
    "memory_recall": 25,
    "memory_recall_deep": 10,
    "memory_list": 10,
    "kg_assert": 8,
    "kg_query": 7,
    "palace_info": 5,
    "palace_list": 5,
}
SOAK_PALACES = 5
KEEP_PER_SESSION = 30  # each session forgets its oldest note beyond this: a steady palace size


def soak_args(tool: str, palace: str, k: int, i: int, rng: random.Random) -> dict:
    if tool == "memory_remember":
        return {"palace": palace, "text": note("soak", k, i, rng), "tags": [f"t{i % 4}"]}
    if tool in ("memory_recall", "memory_recall_deep"):
        return {"palace": palace, "query": " ".join(rng.choices(WORDS, k=4)), "top_k": 5}
    if tool == "memory_list":
        return {"palace": palace, "limit": 20}
    if tool == "kg_assert":
        return {"palace": palace, "subject": f"svc-{k}", "predicate": "version", "object": str(i)}
    if tool == "kg_query":
        return {"palace": palace, "subject": f"svc-{rng.randrange(50)}"}
    if tool == "palace_info":
        return {"palace": palace}
    return {}


@dataclass
class SoakRecord:
    measuring: bool = False
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, tool: str, ms: float, error: str | None) -> None:
        if not self.measuring:
            return
        with self.lock:
            self.latencies.setdefault(tool, []).append(ms)
            if error:
                self.errors[error] += 1


def soak_session(s: Session, k: int, record: SoakRecord, stop: threading.Event) -> None:
    rng = random.Random(f"soak-{k}")
    palace = f"soak{k % SOAK_PALACES}"
    mine: deque[str] = deque()
    tools, weights = list(SOAK_MIX), list(SOAK_MIX.values())
    for i in itertools.count():
        if stop.is_set():
            return
        tool = rng.choices(tools, weights)[0]
        calls = [(tool, soak_args(tool, palace, k, i, rng))]
        while calls:
            name, args = calls.pop()
            t0 = time.perf_counter()
            try:
                ok, data = s.tool(name, **args)
            except (Hang, SessionDead) as exc:
                record.add(name, (time.perf_counter() - t0) * 1000, f"serve: {exc}")
                if isinstance(exc, SessionDead):
                    return
                continue
            record.add(name, (time.perf_counter() - t0) * 1000, None if ok else data)
            if ok and name == "memory_remember":
                mine.append(data["drawer_id"])
                if len(mine) > KEEP_PER_SESSION:
                    calls.append(("memory_forget", {"palace": palace, "drawer_id": mine.popleft()}))


def process_rss(home: Home, sessions: list[Session]) -> dict[str, float]:
    out = {}
    for role, pid in home.pids().items():
        with contextlib.suppress(OSError):
            out[f"{role}#{pid}"] = round(rss_mb(pid), 1)
    for k, s in enumerate(sessions):
        with contextlib.suppress(OSError):
            out[f"serve{k}#{s.proc.pid}"] = round(rss_mb(s.proc.pid), 1)
    return out


def soak_part(quick: bool, sessions_n: int, seconds: float) -> dict:
    """Warm up (caches fill, palaces reach their steady size), then measure ``seconds``."""
    warmup_s, sample_s = (5.0, 5.0) if quick else (60.0, 30.0)
    with Home() as home:
        home.start()
        with home.client() as c:
            for i in range(SOAK_PALACES):
                c.palace_create(f"soak{i}")
        sessions = start_sessions(home, sessions_n)
        record, stop = SoakRecord(), threading.Event()
        threads = [
            threading.Thread(target=soak_session, args=(s, k, record, stop))
            for k, s in enumerate(sessions)
        ]
        for t in threads:
            t.start()
        time.sleep(warmup_s)
        restarts = home.status()["restarts"]
        rss_start = process_rss(home, sessions)
        record.measuring = True
        t0 = time.monotonic()
        timeline = []
        while (left := seconds - (time.monotonic() - t0)) > 0:
            time.sleep(min(sample_s, left))
            total = sum(process_rss(home, sessions).values())
            timeline.append({"t_s": round(time.monotonic() - t0), "rss_mb": round(total, 1)})
        record.measuring = False
        measured = time.monotonic() - t0
        rss_end = process_rss(home, sessions)
        restarted = {k: n - restarts.get(k, 0) for k, n in home.status()["restarts"].items()}
        stop.set()
        for t in threads:
            t.join()
        exits = close_sessions(sessions)
    out = {"sessions": sessions_n, "warmup_s": warmup_s, "seconds": round(measured, 1)}
    out |= soak_figures(record, measured)
    out |= rss_figures(rss_start, rss_end, timeline)
    out["worker_restarts"] = restarted
    out["checks"] = {
        "no_errors": not record.errors,
        "no_database_locked": not out["database_locked"],
        "no_timeouts": not out["timeouts"],
        "no_process_gone": not out["processes_gone"],
        "no_worker_restarts": not any(restarted.values()),
        "exit_0_on_eof": set(exits) == {0},
    }
    if not quick:  # 20 s is too short to tell growth from caches filling
        out["checks"]["rss_growth_under_10pct"] = (
            out["max_daemon_process_growth_pct"] < 10 and out["serve_growth_pct"]["mean"] < 10
        )
    return out


def soak_figures(record: SoakRecord, seconds: float) -> dict:
    every = [ms for values in record.latencies.values() for ms in values]
    return {
        "calls": len(every),
        "calls_per_s": round(len(every) / seconds, 1),
        "p50_ms": round(pct(every, 0.5), 1) if every else None,
        "p99_ms": round(pct(every, 0.99), 1) if every else None,
        "by_tool": {
            tool: {
                "calls": len(ms),
                "p50_ms": round(pct(ms, 0.5), 1),
                "p99_ms": round(pct(ms, 0.99), 1),
            }
            for tool, ms in sorted(record.latencies.items())
        },
        "errors": sum(record.errors.values()),
        "error_messages": dict(record.errors.most_common(10)),
        "database_locked": sum(n for m, n in record.errors.items() if "database is locked" in m),
        "timeouts": sum(
            n for m, n in record.errors.items() if "timed out" in m or "no answer" in m
        ),
    }


def rss_figures(start: dict[str, float], end: dict[str, float], timeline: list[dict]) -> dict:
    growth = {
        name: round(100 * (end[name] - mb) / mb, 1) for name, mb in start.items() if name in end
    }
    daemon_side = [g for name, g in growth.items() if not name.startswith("serve")]
    serve = [g for name, g in growth.items() if name.startswith("serve")]
    return {
        "rss_start_mb": start,
        "rss_end_mb": end,
        "rss_growth_pct": growth,
        "max_daemon_process_growth_pct": max(daemon_side, default=0.0),
        "serve_growth_pct": {
            "mean": round(statistics.fmean(serve), 1) if serve else 0.0,
            "max": max(serve, default=0.0),
        },
        "processes_gone": sorted(set(start) - set(end)),
        "rss_timeline": timeline,
    }


# --------------------------------------------------------------------------------------
# verdicts and the command line


def failures(result: Any, where: str = "") -> list[str]:
    """Every hard check a run failed, by its path in the result (empty: all held)."""
    if isinstance(result, list):
        return [f for i, item in enumerate(result) for f in failures(item, f"{where}[{i}]")]
    if not isinstance(result, dict):
        return []
    bad = [f"{where}.{name}" for name, ok in result.get("checks", {}).items() if not ok]
    for key, value in result.items():
        if key != "checks":
            bad += failures(value, f"{where}.{key}" if where else key)
    return bad


def run(part: str, args: argparse.Namespace) -> list[str]:
    t0 = time.monotonic()
    if part == "kill":
        result = kill_part(args.quick, args.victims.split(","))
    elif part == "fuzz":
        result = fuzz_part(args.quick, args.seed)
    elif part == "storage":
        result = storage_part(args.quick)
    else:
        sessions = args.sessions or (10 if args.quick else 50)
        seconds = args.seconds or (20.0 if args.quick else 600.0)
        result = soak_part(args.quick, sessions, seconds)
    bad = failures(result)
    result = {"part": part, "quick": args.quick, "seconds_total": round(time.monotonic() - t0, 1),
              **result, "failures": bad}  # fmt: skip
    out = Path(args.out or f"bench/out/reliability-{part}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str)[:20000])
    print(f"{part}: {'OK' if not bad else 'FAILED: ' + '; '.join(bad)} -> {out}")
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["kill", "fuzz", "storage", "soak", "all"])
    parser.add_argument("--quick", action="store_true", help="CI sizes")
    parser.add_argument("--seed", type=int, default=0, help="fuzz: the random cases' seed")
    parser.add_argument("--victims", default=",".join(VICTIMS), help="kill: which processes")
    parser.add_argument("--sessions", type=int, help="soak: sessions (default 50; quick 10)")
    parser.add_argument("--seconds", type=float, help="soak: measured seconds (600; quick 20)")
    parser.add_argument("--out", help="the JSON (default bench/out/reliability-PART.json)")
    args = parser.parse_args()
    parts = ["kill", "fuzz", "storage", "soak"] if args.part == "all" else [args.part]
    if args.out and len(parts) > 1:
        parser.error("--out names one part's file")
    bad = [b for part in parts for b in run(part, args)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
