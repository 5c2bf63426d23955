"""The plots beside BENCHMARKS.md, drawn from the committed results in ``bench/results/``.

    .venv/bin/pip install matplotlib        # the ``bench`` extra; not needed to run the product
    .venv/bin/python bench/plots.py [--results bench/results] [--out .]

Four PNGs:

* ``bench-latency-vs-size.png`` - ``memory_recall`` p50/p99 through the Python client against
  the number of drawers in the palace (engine run at 10k, scale runs above), new queries
  (each one embedded) and repeated ones (the embedder's cache answers: search path only);
* ``bench-throughput-vs-sessions.png`` - ``memory_remember`` calls per second against the
  number of concurrent MCP stdio sessions on one palace;
* ``bench-recall-at-k.png`` - LoCoMo turn- and session-level recall@k (k = 1..10) of
  ``memory_recall`` and ``memory_recall_deep`` against the plain-vector and BM25 baselines;
* ``bench-readers.png`` - one hot palace, 16 sessions of ``memory_recall_deep``: calls per
  second and p50/p99 against the number of readers beside the writer (``bench/readers.py``).

Figures are only as good as the runs behind them: each JSON in ``bench/results/`` names
the command that made it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]


def save(fig, out: Path, name: str) -> Path:
    target = out / name
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def load(results: Path, name: str) -> dict | None:
    path = results / name
    return json.loads(path.read_text()) if path.exists() else None


def latency_vs_size(results: Path, out: Path) -> Path:
    points: list[tuple[int, str, dict]] = []
    engine = load(results, "engine.json")
    if engine:
        points.append((engine["drawers"], "new", engine["recall"]))
    for path in sorted(results.glob("scale-*.json")):
        r = json.loads(path.read_text())
        points.append((r["drawers"], "new", r["recall_new_queries"]))
        points.append((r["drawers"], "repeated", r["recall_repeated_queries"]))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, marker in (("new", "o"), ("repeated", "s")):
        rows = sorted((n, lat) for n, k, lat in points if k == kind)
        if not rows:
            continue
        xs = [n for n, _ in rows]
        ax.plot(xs, [lat["p50_ms"] for _, lat in rows], marker=marker, label=f"p50, {kind} queries")
        ax.plot(
            xs,
            [lat["p99_ms"] for _, lat in rows],
            marker=marker,
            linestyle="--",
            label=f"p99, {kind} queries",
        )
    ax.set_xscale("log")
    ax.set_xlabel("drawers in the palace")
    ax.set_ylabel("memory_recall latency (ms)")
    ax.set_title("memory_recall latency vs palace size (Python client, 2-core CPU)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out, "bench-latency-vs-size.png")


def throughput_vs_sessions(results: Path, out: Path) -> Path | None:
    mcp = load(results, "mcp.json")
    if not mcp:
        return None
    rows = sorted((int(n), rate) for n, rate in mcp["remember_per_s_by_sessions"].items())
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot([n for n, _ in rows], [r for _, r in rows], marker="o", label="measured")
    one = rows[0][1]
    ax.plot(
        [n for n, _ in rows],
        [one * n for n, _ in rows],
        linestyle=":",
        color="grey",
        label="linear in sessions (from 1)",
    )
    ax.axhline(250, color="red", alpha=0.4, linestyle="--", label="goal at 16 sessions (250/s)")
    ax.set_xscale("log", base=2)
    ax.set_xticks([n for n, _ in rows], [str(n) for n, _ in rows])
    ax.set_ylim(0, max(max(r for _, r in rows) * 1.3, 300))
    ax.set_xlabel("concurrent MCP stdio sessions on one palace")
    ax.set_ylabel("memory_remember calls / s")
    ax.set_title("remember throughput vs sessions (cross-request batching)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save(fig, out, "bench-throughput-vs-sessions.png")


def recall_at_k(results: Path, out: Path) -> Path | None:
    locomo = load(results, "locomo.json")
    if not locomo:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), sharey=True)
    titles = {
        "turn": "turns in the top k",
        "session": "sessions of the top-k turns",
        "sessions": "top-k sessions",
    }
    for ax, (level, title) in zip(axes, titles.items(), strict=True):
        for method, res in locomo["results"].items():
            curve = res.get("curve") or {}
            if curve.get(level):
                ax.plot(curve["k"], curve[level], marker=".", label=method)
        ax.set_title(f"LoCoMo recall@k: {title}")
        ax.set_xlabel("k")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("recall (%)")
    axes[2].legend(fontsize=8)  # the one panel every method is drawn in
    return save(fig, out, "bench-recall-at-k.png")


def readers(results: Path, out: Path) -> Path | None:
    runs = [json.loads(p.read_text()) for p in sorted(results.glob("readers-*.json"))]
    if not runs:
        return None
    fig, (rate_ax, lat_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in sorted(runs, key=lambda r: r["drawers"]):
        rows = sorted((int(n), x) for n, x in run["recall_deep"].items())
        counts = [n for n, _ in rows]
        label = f"{run['drawers']:,} drawers"
        rate_ax.plot(counts, [x["calls_per_s"] for _, x in rows], marker="o", label=label)
        line = lat_ax.plot(counts, [x["p50_ms"] for _, x in rows], marker="o", label=f"{label} p50")
        lat_ax.plot(counts, [x["p99_ms"] for _, x in rows], marker="s", linestyle="--",
                    color=line[0].get_color(), label=f"{label} p99")  # fmt: skip
        base = rows[0][1]["calls_per_s"]
        rate_ax.axhline(1.6 * base, color=line[0].get_color(), alpha=0.3, linestyle=":",
                        label=f"goal at 2 readers (1.6x), {label}")  # fmt: skip
    rate_ax.set_xlabel("readers beside the writer")
    rate_ax.set_ylabel("memory_recall_deep calls / s (16 sessions)")
    rate_ax.set_title("one hot palace: calls/s vs readers (2 cores)")
    lat_ax.set_xlabel("readers beside the writer")
    lat_ax.set_ylabel("latency (ms)")
    lat_ax.set_title("p50 / p99 per call")
    for ax in (rate_ax, lat_ax):
        ax.set_xticks(counts)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return save(fig, out, "bench-readers.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--out", type=Path, default=ROOT)
    args = parser.parse_args()
    for made in (
        latency_vs_size(args.results, args.out),
        throughput_vs_sessions(args.results, args.out),
        recall_at_k(args.results, args.out),
        readers(args.results, args.out),
    ):
        if made is not None:
            print(f"wrote {made}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
