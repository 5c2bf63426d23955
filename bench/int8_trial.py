"""Would an int8 MiniLM serve agents as well as fp32? A trial of ONNX Runtime's dynamic
quantization (issue 39, item 5), judged the way a model change must be: speed, how far the
vectors move, and recall on every retrieval set, in one run.

    .venv/bin/python bench/int8_trial.py --home DIR [--work DIR] [--out FILE]

``--home`` is a home that ``bench/replay.py --home DIR`` has loaded (every set stored
through a real daemon, the questions' vectors kept). For each model variant the trial
makes a copy of that home with every drawer's vector and every question's vector made
again by that variant, in the daemon's own way: a drawer that borrowed its episode
predecessor's meaning gets ``context.mix`` of its own new vector and its predecessor's new
one (the predecessor is found from the stored mix itself, so the trial writes exactly the
pairs the daemon wrote). It then asks every question as ``memory_recall`` and
``memory_recall_deep`` would (``replay.replay_notes`` / ``replay_locomo``, the product's
read path), every variant in this one process, so one ranking code judges them all.

Variants: ``fp32`` (the compiled model as served, embedded again here: it must reproduce
the stored figures, which checks the trial itself), ``int8-channel`` (dynamic int8, weights
per output channel), ``int8-tensor`` (one scale per weight tensor) and ``int8-ffn`` (per
channel, the fused attention left in fp32: a sensitive part kept exact). The decision rule is
the issue's: adopt a variant only if every set moves by less than 0.5 point at R@1 and
R@10, plain and deep; the dreamer's merge check comes after that, and a migration that
re-embeds palaces with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import locomo as lm
import replay
from locomo_data import LoadReport, load

from trusty_memory.common.config import load_config
from trusty_memory.common.palace_dir import DB_FILE
from trusty_memory.workers.embedder import compiled_model
from trusty_memory.workers.store import context
from trusty_memory.workers.store import schema as store_schema
from trusty_memory.workers.store.index import prune_snapshots

VARIANTS = ("fp32", "int8-channel", "int8-tensor", "int8-ffn")
QUERY = "which port does the billing service listen on in staging?"
MOVE_LIMIT = 0.5  # points, R@1 and R@10, plain and deep, on every set (the rule)


def served_model_dir() -> Path:
    """The compiled model the embedder serves on this machine (``trusty-memory setup``)."""
    directory = compiled_model.default_cache_root() / compiled_model.cache_key()
    if not (directory / "model.onnx").exists():
        raise SystemExit(f"no compiled model in {directory}: run trusty-memory setup first")
    return directory


def build_variants(source: Path, work: Path) -> dict[str, Path]:
    """Each variant as a model directory (the tokenizer and meta shared with fp32)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    dirs = {}
    for name in VARIANTS:
        target = work / "models" / name
        if not (target / "model.onnx").exists():
            target.mkdir(parents=True, exist_ok=True)
            for f in ("meta.json", "tokenizer.json"):
                shutil.copy2(source / f, target / f)
            if name == "fp32":
                shutil.copy2(source / "model.onnx", target / "model.onnx")
            else:
                quantize_dynamic(
                    str(source / "model.onnx"),
                    str(target / "model.onnx"),
                    per_channel=name != "int8-tensor",
                    # int8-ffn: only the plain MatMuls (feed-forward and projections); the
                    # fused attention stays fp32, the part most sensitive to rounding.
                    op_types_to_quantize=["MatMul"] if name == "int8-ffn" else None,
                    weight_type=QuantType.QInt8,
                    # The compiled graph's fused ops (Attention, SkipLayerNorm) are of
                    # Microsoft's domain, which shape inference cannot type: say float.
                    extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
                )
        dirs[name] = target
    return dirs


def speed(models: dict[str, compiled_model.CompiledModel], notes: list[str], rounds: int) -> dict:
    """One short query's latency (p50 / p99) and a batch's rate (texts/s), the variants
    alternating round by round so the machine's noise falls on each alike."""
    single: dict[str, list[float]] = {n: [] for n in models}
    batch: dict[str, list[float]] = {n: [] for n in models}
    for m in models.values():
        m.encode([QUERY])  # first-call costs out of the figures
    for _ in range(rounds):
        for name, m in models.items():
            for _ in range(10):
                t0 = time.perf_counter()
                m.encode([QUERY])
                single[name].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            m.encode(notes)
            batch[name].append(len(notes) / (time.perf_counter() - t0))
    out = {}
    for name in models:
        s = sorted(single[name])
        out[name] = {
            "query_p50_ms": round(statistics.median(s), 2),
            "query_p99_ms": round(s[int(0.99 * (len(s) - 1))], 2),
            "batch_texts_per_s": round(statistics.median(batch[name]), 1),
        }
    return out


def _predecessor(mixed: np.ndarray, own: np.ndarray, candidates: np.ndarray) -> int:
    """Which earlier drawer's own vector ``mixed`` was made with: ``mixed`` is
    ``(own + w * prev) / n``, so ``n * mixed - own`` points at ``prev``."""
    c = float(mixed @ own)
    w = context.CONTEXT_WEIGHT
    n = c + np.sqrt(max(c * c - (1 - w * w), 0.0))
    prev = (n * mixed - own) / w
    return int(np.argmax(candidates @ prev))


def remake_palace(source: Path, target: Path, model: compiled_model.CompiledModel) -> dict:
    """A copy of the palace at ``source`` with every vector made by ``model``; returns how
    the new own vectors compare with the stored ones (cosines)."""
    replay.copy_palace(source, target)
    db = store_schema.connect(target / DB_FILE)
    rows = db.execute(
        "SELECT label, room, content, vector, own_vector FROM drawers ORDER BY label"
    ).fetchall()
    new_own = model.encode([r[2] for r in rows]) if rows else np.empty((0, 384), np.float32)
    stored_own = np.stack(
        [np.frombuffer(r[4] if r[4] is not None else r[3], np.float32) for r in rows]
    ) if rows else np.empty((0, 384), np.float32)  # fmt: skip
    updates, matched = [], []
    for i, (label, room, _text, vector, own) in enumerate(rows):
        vec, own_out = new_own[i], None
        if own is not None:  # it borrowed: find whose meaning, as the daemon mixed it
            earlier = [j for j in range(i) if rows[j][1] == room]
            mixed = np.frombuffer(vector, np.float32)
            j = earlier[_predecessor(mixed, stored_own[i], stored_own[earlier])]
            check = context.mix(stored_own[i], stored_own[j])
            matched.append(float(check @ mixed))
            vec, own_out = context.mix(new_own[i], new_own[j]), new_own[i]
        updates.append(
            (
                np.asarray(vec, "<f4").tobytes(),
                None if own_out is None else np.asarray(own_out, "<f4").tobytes(),
                label,
            )
        )
    with db.atomic():
        db.conn.executemany(
            "UPDATE drawers SET vector = ?, own_vector = ? WHERE label = ?", updates
        )
    db.close()
    prune_snapshots(target, keep_seq=-1)
    cosines = (new_own * stored_own).sum(axis=1) if rows else np.empty(0)
    return {"cosines": cosines, "mix_matched": matched}


def questions_of(home: Path, name: str, convs) -> list[str]:
    if name == "locomo":
        return [q.question for c in convs for q in c.questions]
    return [q["question"] for q in json.loads((home / f"{name}.json").read_text())["questions"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="a home replay.py loaded")
    parser.add_argument("--work", type=Path, default=Path("/tmp/trusty-int8-trial"))
    parser.add_argument("--data", type=Path, default=lm.DEFAULT_DATA)
    parser.add_argument("--sets", default=",".join(replay.ALL_SETS))
    parser.add_argument("--rounds", type=int, default=20, help="speed rounds per variant")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    home = args.home.resolve()
    missing = [s for s in sets if not (home / f"{s}.json").exists()]
    if missing:
        raise SystemExit(f"{home} lacks {missing}: run bench/replay.py --home {home} first")
    os.environ["TRUSTY_MEMORY_HOME"] = str(home)
    convs = load(json.loads(args.data.read_bytes()), LoadReport()) if "locomo" in sets else []
    model_dirs = build_variants(served_model_dir(), args.work)
    threads = load_config().embedder.threads
    models = {n: compiled_model.CompiledModel.load(d, threads) for n, d in model_dirs.items()}
    palaces = sorted(p.name for p in (home / "palaces").iterdir() if (p / DB_FILE).exists())

    sample = [q for s in sets if s != "locomo" for q in questions_of(home, s, convs)][:64]
    report: dict = {"load": os.getloadavg(), "speed": speed(models, sample, args.rounds)}
    print(json.dumps(report["speed"]), file=sys.stderr, flush=True)

    base = dataclasses.replace(load_config().palace, context_vectors=True)
    results: dict[str, dict] = {}
    vectors: dict[str, dict] = {}
    for name, model in models.items():
        t0 = time.monotonic()
        vhome = args.work / "homes" / name
        (vhome / "palaces").mkdir(parents=True, exist_ok=True)
        cos: list[np.ndarray] = []
        matched: list[float] = []
        for palace in palaces:
            got = remake_palace(home / "palaces" / palace, vhome / "palaces" / palace, model)
            cos.append(got["cosines"])
            matched += got["mix_matched"]
        qcos = []
        for s in sets:
            shutil.copy2(home / f"{s}.json", vhome / f"{s}.json")
            new = model.encode(questions_of(home, s, convs))
            qcos.append((new * np.load(home / f"{s}-queries.npy")).sum(axis=1))
            np.save(vhome / f"{s}-queries.npy", new)
        every = np.concatenate(cos + qcos)
        vectors[name] = {
            "cosine_to_stored_min": round(float(every.min()), 4),
            "cosine_to_stored_p1": round(float(np.percentile(every, 1)), 4),
            "cosine_to_stored_median": round(float(np.median(every)), 4),
            "mixes_rebuilt": len(matched),
            "mixes_rebuilt_worst_match": round(min(matched), 6) if matched else None,
        }
        results[name] = {}
        for method in ("plain", "deep"):
            for s in sets:
                deep = method == "deep"
                if s == "locomo":
                    out = replay.replay_locomo(vhome, convs, base, "after", deep)
                else:
                    out = replay.replay_notes(vhome, s, base, "after", deep)
                f = replay.figures(out)
                results[name][f"{method}/{s}"] = [f[0], f[2]]  # R@1, R@10
        print(name, f"{time.monotonic() - t0:.0f} s", json.dumps(vectors[name]),
              json.dumps(results[name]), file=sys.stderr, flush=True)  # fmt: skip

    verdict = {}
    for name in VARIANTS[1:]:
        moves = {}
        for key, fp32 in results["fp32"].items():
            moves[key] = [round(a - b, 1) for a, b in zip(results[name][key], fp32, strict=True)]
        worst = max(abs(x) for m in moves.values() for x in m)
        verdict[name] = {"moves": moves, "worst_move": worst, "adopt": worst < MOVE_LIMIT}
    report.update({"vectors": vectors, "recall": results, "verdict": verdict})
    lines = [
        "| variant | query p50 / p99 ms | batch texts/s | cosine to served fp32"
        " (min / p1 / median) | worst recall move (points) |",
        "|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        sp, ve = report["speed"][name], vectors[name]
        worst = "-" if name == "fp32" else f"{verdict[name]['worst_move']:.1f}"
        lines.append(
            f"| {name} | {sp['query_p50_ms']} / {sp['query_p99_ms']} | {sp['batch_texts_per_s']}"
            f" | {ve['cosine_to_stored_min']} / {ve['cosine_to_stored_p1']} /"
            f" {ve['cosine_to_stored_median']} | {worst} |"
        )
    lines += ["", "| set, method | " + " | ".join(VARIANTS) + " (R@1 / R@10) |",
              "|---|" + "---|" * len(VARIANTS)]  # fmt: skip
    for key in results["fp32"]:
        cells = [" / ".join(f"{x:.1f}" for x in results[n][key]) for n in VARIANTS]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
