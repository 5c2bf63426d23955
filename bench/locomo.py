"""LoCoMo retrieval benchmark through the product's own recall path.

    .venv/bin/python bench/locomo.py [--data ../shared/data/locomo10.json]
        [--limit-conversations N] [--questions-per-conversation N] [--smoke]
        [--context-vectors on|off] [--window N] [--out bench/out/locomo.json]

What it does, in one run (so every figure compares like with like):

1. starts a real daemon in a throw-away home (as ``bench/engine.py`` does);
2. one palace per conversation; every dialog turn stored as a drawer through the Python
   client, in order, by one session per conversation (as an agent writes): the content is
   ``"<speaker>: <text>"`` (plus the BLIP caption of a shared photo, part of the dialog as
   the dataset gives it), tags ``[speaker, session-N]``, the session date as ``created_at``
   and everything in ``metadata``; by default nothing else, so the vector is the one the
   palace computes (``workers/store/context.py``). ``--window N`` is client help no MCP client
   gives: it sends ``embed_text``, the turn with N neighbours each side in the session;
3. every question recalled with ``memory_recall`` and ``memory_recall_deep``: top_k 10,
   and again top_k 50 to rank sessions (a session ranks where its best turn does);
4. baselines computed here: exact MiniLM cosine and SQLite FTS5 BM25 (OR of the terms)
   over the raw turn text, and MiniLM over one document per session (MemPalace's raw
   session setting); vectors come from the daemon's own embedder, so the same model;
5. R@5 / R@10 overall and per category, to a JSON file and a markdown table on stdout, at
   three levels: gold turns in the top-k turns; gold sessions among the sessions of the
   top-k turns; gold sessions among the top-k sessions (sessions as the documents, as
   published session-level figures count them).

The dataset is read in place (CC BY-NC: never copied into the repository). See
``locomo_data.py`` for evidence-id normalisation and the metrics.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo_data import (
    METRICS,
    Conversation,
    LoadReport,
    Question,
    Turn,
    aggregate,
    load,
    recall_curve,
    score,
)

from trusty_memory.client.autostart import daemon_pid, ping
from trusty_memory.client.sync import Client
from trusty_memory.common.config import load_config
from trusty_memory.common.protocol import ErrorCode, TrustyError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo10.json"
TOP_K = 10
SESSION_POOL = 50  # turns ranked to find each question's top-10 distinct sessions
INGEST_THREADS = 32  # many requests in flight: the embedder batches them
RECALL_THREADS = 4
INGEST_RETRIES = 5
EMBED_BATCH = 128
DRAWER_NS = uuid.UUID("6c0c5d8e-1f0c-4b55-9d36-7f0cbe6d5a10")
METHODS = ("memory_recall", "memory_recall_deep", "baseline_vector", "baseline_bm25")

Ranker = Callable[[Question], list[str]]


# -- what gets stored ----------------------------------------------------------------------


def turn_line(turn: Turn, captions: bool) -> str:
    """A turn as a line of dialog: who said it, what, and the photo they shared, if any."""
    line = f"{turn.speaker}: {turn.text}"
    if captions and turn.caption:
        line += f" [shares a photo: {turn.caption}]"
    return line


def embed_text(turns: Sequence[Turn], i: int, window: int, captions: bool) -> str | None:
    """The turn with up to ``window`` neighbours each side, within its session.

    A reply like "Yes, last Tuesday!" means nothing alone; embedded with the question it
    answers it lands near queries about that topic. None when no window is asked for.
    """
    if window <= 0:
        return None
    session = turns[i].session
    lines = [
        turn_line(turns[j], captions)
        for j in range(max(0, i - window), min(len(turns), i + window + 1))
        if turns[j].session == session
    ]
    return "\n".join(lines)


def drawer_id(turn: Turn) -> str:
    return str(uuid.uuid5(DRAWER_NS, f"{turn.conv}/{turn.dia_id}"))


def created_at(turn: Turn) -> str | None:
    when = turn.when
    if when is None:
        return None
    # One second per turn keeps the dialog's order in the timestamps.
    return (when.replace(tzinfo=UTC) + timedelta(seconds=turn.index)).isoformat()


def palace_name(conv: Conversation) -> str:
    return f"locomo-{conv.sample_id}"


def remember_params(conv: Conversation, i: int, args: argparse.Namespace) -> dict:
    turn = conv.turns[i]
    params = {
        "text": turn_line(turn, args.captions),
        "tags": [turn.speaker, f"session-{turn.session}"],
        "drawer_id": drawer_id(turn),
        "created_at": created_at(turn),
        "metadata": {
            "dia_id": turn.dia_id,
            "session": turn.session,
            "date": turn.date,
            "speaker": turn.speaker,
        },
    }
    text = embed_text(conv.turns, i, args.window, args.captions)
    if text is not None:
        params["embed_text"] = text
    return params


# -- the daemon ----------------------------------------------------------------------------


class Daemon:
    """A daemon in its own home, started and stopped by this process."""

    def __init__(self, home: Path) -> None:
        self.home = home
        os.environ["TRUSTY_MEMORY_HOME"] = str(home)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        self.config = load_config()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Daemon:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trusty_memory.broker"], stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while not ping(self.config, 0.5):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("daemon did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        pid = daemon_pid(self.config)
        if pid:
            os.kill(pid, signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def run_threads(n: int, items: Sequence, work: Callable[[Client, object], None], config) -> None:
    """Run ``work(client, item)`` over ``items`` on ``n`` threads, one client each."""
    lock = threading.Lock()
    pending = list(reversed(items))
    errors: list[BaseException] = []

    def loop() -> None:
        with Client(config, autostart=False) as client:
            while True:
                with lock:
                    if not pending or errors:
                        return
                    item = pending.pop()
                try:
                    work(client, item)
                except BaseException as exc:
                    with lock:
                        errors.append(exc)
                    return

    # Daemon threads, joined with a timeout: Ctrl-C stops the run (and its daemon).
    threads = [threading.Thread(target=loop, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    if errors:
        raise errors[0]


def ingest(config, convs: list[Conversation], args: argparse.Namespace) -> dict:
    """Store every turn of every conversation through the client; returns timings."""
    started = time.monotonic()
    with Client(config, autostart=False) as client:
        existing = set(client.palace_list())
        todo = []
        for conv in convs:
            name = palace_name(conv)
            if name not in existing:
                client.palace_create(name, description=f"LoCoMo {conv.sample_id}")
            elif client.palace_info(name).drawer_count == len(conv.turns):
                continue  # a reused home: already loaded
            todo.append([(conv, i) for i in range(len(conv.turns))])

    def store(client: Client, conv: Conversation, i: int) -> None:
        params = remember_params(conv, i, args)
        for attempt in range(INGEST_RETRIES):
            try:
                client.call("memory_remember", params, palace=palace_name(conv))
                return
            except TrustyError as exc:
                # A shared, loaded machine can starve the embedder past the deadline; the
                # drawer id makes the retry idempotent.
                if exc.code != ErrorCode.TIMEOUT or attempt == INGEST_RETRIES - 1:
                    raise

    if args.ordered:
        # One session per conversation, writing its turns in order and each after the
        # previous one was acknowledged, as an agent does: the palace sees the dialog's
        # order, which its episodes (and context vectors) follow.
        def work(client: Client, item: object) -> None:
            for conv, i in item:
                store(client, conv, i)

        run_threads(len(todo), todo, work, config)
        stored = sum(len(row) for row in todo)
    else:
        # Round-robin over the conversations: every palace worker has work at once.
        flat = [item for row in itertools.zip_longest(*todo) for item in row if item is not None]
        run_threads(INGEST_THREADS, flat, lambda client, item: store(client, *item), config)
        stored = len(flat)
    seconds = time.monotonic() - started
    return {"turns_stored": stored, "seconds": round(seconds, 1)}


def product_rankings(
    config, convs: list[Conversation], method: str, top_k: int
) -> tuple[dict[tuple[str, int], list[str]], list[float]]:
    """Every question through ``method``; returns dia_ids ranked, and latencies in ms."""
    by_id = {drawer_id(t): t.dia_id for conv in convs for t in conv.turns}
    items = [(conv, q) for conv in convs for q in conv.questions]
    ranked: dict[tuple[str, int], list[str]] = {}
    latencies: list[float] = []

    def work(client: Client, item: object) -> None:
        conv, q = item
        t0 = time.perf_counter()
        data = client.call(method, {"query": q.question, "top_k": top_k}, palace=palace_name(conv))
        latencies.append((time.perf_counter() - t0) * 1000)
        ranked[(q.conv, q.index)] = [by_id[h["drawer_id"]] for h in data["results"]]

    run_threads(RECALL_THREADS, items, work, config)
    return ranked, latencies


# -- baselines -----------------------------------------------------------------------------


def embed(client: Client, texts: list[str]) -> np.ndarray:
    """Vectors from the daemon's embedder: the very model the product uses."""
    blocks = []
    for start in range(0, len(texts), EMBED_BATCH):
        data = client.call("embed", {"texts": texts[start : start + EMBED_BATCH]}, timeout=300)
        vecs = np.frombuffer(data["vectors"], dtype=np.float32)
        blocks.append(vecs.reshape(-1, data["dim"]))
    return np.vstack(blocks) if blocks else np.zeros((0, 384), dtype=np.float32)


def baseline_vector(client: Client, conv: Conversation) -> dict[tuple[str, int], list[str]]:
    """Exact cosine between the question and each raw turn text (no speaker, no context)."""
    turns = embed(client, [t.text for t in conv.turns])
    queries = embed(client, [q.question for q in conv.questions])
    ids = [t.dia_id for t in conv.turns]
    out = {}
    for q, vec in zip(conv.questions, queries, strict=True):
        scores = turns @ vec
        top = np.argsort(-scores, kind="stable")[:SESSION_POOL]
        out[(q.conv, q.index)] = [ids[i] for i in top]
    return out


def baseline_session_documents(
    client: Client, conv: Conversation
) -> dict[tuple[str, int], list[str]]:
    """MemPalace's raw session setting: one document per session (its ``speaker: text``
    lines; the model reads the first 256 tokens), ranked by exact MiniLM cosine. Each
    session is named by the dia_id of its first turn, so only session metrics apply."""
    sessions: dict[int, list[Turn]] = {}
    for turn in conv.turns:
        sessions.setdefault(turn.session, []).append(turn)
    firsts = [turns[0].dia_id for turns in sessions.values()]
    docs = embed(
        client, ["\n".join(f"{t.speaker}: {t.text}" for t in ts) for ts in sessions.values()]
    )
    queries = embed(client, [q.question for q in conv.questions])
    return {
        (q.conv, q.index): [firsts[i] for i in np.argsort(-(docs @ vec), kind="stable")]
        for q, vec in zip(conv.questions, queries, strict=True)
    }


def baseline_bm25(conv: Conversation) -> dict[tuple[str, int], list[str]]:
    """SQLite FTS5 BM25 over the raw turn text; the query is the OR of its terms."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='porter unicode61')")
    db.executemany(
        "INSERT INTO t(rowid, text) VALUES (?, ?)",
        [(i, t.text) for i, t in enumerate(conv.turns)],
    )
    out = {}
    for q in conv.questions:
        terms = list(dict.fromkeys(w.lower() for w in re.findall(r"\w+", q.question)))
        match = " OR ".join(f'"{w}"' for w in terms)
        rows = (
            db.execute(
                "SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (match, SESSION_POOL)
            ).fetchall()
            if terms
            else []
        )
        out[(q.conv, q.index)] = [conv.turns[r[0]].dia_id for r in rows]
    db.close()
    return out


# -- reporting -----------------------------------------------------------------------------


def evaluate(
    convs: list[Conversation],
    ranked: dict[tuple[str, int], list[str]] | None,
    pooled: dict[tuple[str, int], list[str]],
) -> dict:
    """Metrics of one method: ``ranked`` holds each question's top-10 turns (``None`` for
    a method that ranks sessions), ``pooled`` its deeper ranking (``SESSION_POOL``)."""
    rows = [
        (
            q,
            None if ranked is None else ranked.get((q.conv, q.index), []),
            pooled.get((q.conv, q.index), []),
        )
        for conv in convs
        for q in conv.questions
    ]
    return {
        **aggregate((q.category, score(q, r, p)) for q, r, p in rows),
        "curve": recall_curve(rows),
    }


def markdown(results: dict[str, dict]) -> str:
    head = (
        "| method | category | n | turn R@5 | turn R@10 | session R@5 | session R@10"
        " | top sessions R@5 | top sessions R@10 |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for method, res in results.items():
        groups = [("all", res["overall"]), *list(res["by_category"].items())]
        for cat, m in groups:
            cells = " | ".join(f"{m[k]:.1f}" if k in m else "-" for k in METRICS)
            label = f"**{cat}**" if cat == "all" else cat
            lines.append(f"| {method} | {label} | {m['n']} | {cells} |")
    return "\n".join(lines)


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 2) if values else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out" / "locomo.json")
    parser.add_argument("--limit-conversations", type=int, default=None)
    parser.add_argument(
        "--smoke", action="store_true", help="one conversation, 40 questions: a CI-sized run"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=0,
        help="client help: send embed_text with N turns each side (0: off, as agents call it)",
    )
    parser.add_argument("--no-captions", dest="captions", action="store_false")
    parser.add_argument(
        "--unordered",
        dest="ordered",
        action="store_false",
        help="32 writers round-robin over the conversations (turns of one palace may arrive"
        " out of order) instead of one in-order writer per conversation",
    )
    parser.add_argument(
        "--context-vectors",
        choices=("on", "off"),
        default=None,
        help="the daemon's [palace] context_vectors (default: its config)",
    )
    parser.add_argument(
        "--questions-per-conversation",
        type=int,
        default=None,
        help="evaluate only the first N questions of each conversation (a quicker run)",
    )
    parser.add_argument(
        "--home", type=Path, default=None, help="keep the daemon home here (reused if loaded)"
    )
    args = parser.parse_args(argv)

    raw = args.data.read_bytes()
    report = LoadReport()
    convs = load(json.loads(raw), report)
    if args.smoke:
        convs = convs[:1]
        convs[0].questions = convs[0].questions[:40]
    elif args.limit_conversations:
        convs = convs[: args.limit_conversations]
    if args.questions_per_conversation:
        for conv in convs:
            conv.questions = conv.questions[: args.questions_per_conversation]
    if args.context_vectors is not None:
        os.environ["TRUSTY_MEMORY_PALACE_CONTEXT_VECTORS"] = (
            "1" if args.context_vectors == "on" else "0"
        )

    home = args.home or Path(tempfile.mkdtemp(prefix="tml-", dir="/tmp"))
    home.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    latency: dict[str, dict] = {}
    try:
        with Daemon(home) as daemon:
            timings = ingest(daemon.config, convs, args)
            print(f"ingest: {timings}", file=sys.stderr)
            for method in METHODS[:2]:
                ranked, ms = product_rankings(daemon.config, convs, method, TOP_K)
                pooled, _ = product_rankings(daemon.config, convs, method, SESSION_POOL)
                results[method] = evaluate(convs, ranked, pooled)
                latency[method] = {"p50_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99)}
            vec: dict = {}
            bm25: dict = {}
            docs: dict = {}
            with Client(daemon.config, autostart=False) as client:
                for conv in convs:
                    vec.update(baseline_vector(client, conv))
                    bm25.update(baseline_bm25(conv))
                    docs.update(baseline_session_documents(client, conv))
            for name, pool in (("baseline_vector", vec), ("baseline_bm25", bm25)):
                top = {key: ids[:TOP_K] for key, ids in pool.items()}  # exact: a prefix
                results[name] = evaluate(convs, top, pool)
            results["baseline_session_documents"] = evaluate(convs, None, docs)
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)

    out = {
        "benchmark": "LoCoMo retrieval (locomo10.json)",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "command": " ".join(["bench/locomo.py", *(argv if argv is not None else sys.argv[1:])]),
        "data_sha256": hashlib.sha256(raw).hexdigest(),
        "conversations": len(convs),
        "turns": sum(len(c.turns) for c in convs),
        "questions_evaluated": sum(len(c.questions) for c in convs),
        "settings": {
            "top_k": TOP_K,
            "window": args.window,
            "captions": args.captions,
            "ordered": args.ordered,
            "context_vectors": load_config().palace.context_vectors,
        },
        "evidence": report.as_dict(),
        "ingest": timings,
        "recall_latency_ms": latency,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    ev = report.as_dict()
    print(
        f"LoCoMo: {out['conversations']} conversations, {out['turns']} turns, "
        f"{out['questions_evaluated']} questions evaluated "
        f"({ev['questions_total']} in the file; skipped: {ev['questions_skipped']}); "
        f"{ev['malformed_normalised']} malformed evidence strings normalised, "
        f"{len(ev['unparsable_tokens'])} unparsable tokens, "
        f"{len(ev['gold_ids_not_in_dialog'])} gold ids not in the dialog "
        f"({', '.join(ev['gold_ids_not_in_dialog'])})\n"
    )
    print(markdown(results))
    print(f"\nrecall latency through the client: {json.dumps(latency)}")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
