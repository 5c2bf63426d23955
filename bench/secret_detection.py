"""The credential detector measured: precision and recall per kind, and what it adds to a remember.

    .venv/bin/python bench/secret_detection.py [--data bench/data/secrets_labelled.json] [--show]
                                      [--json OUT] [--repeat N]

Quality, on the labelled set (``bench/secrets_data.py``): a labelled credential is caught
when the spans found cover all of it (a part left in clear is a miss); a span found is
right when it overlaps a labelled credential. Recall is per labelled kind, precision per
kind found and overall ("this span is a credential"). ``--show`` prints every miss and
every false alarm.

Cost: ``Redactor.redact`` (what a palace worker runs on each remember's text, before the
store) timed per text, p50 and p99 in microseconds, on the engineering notes of
``bench/data/eng_notes.json`` (ordinary notes, the usual remember) and on the labelled
texts (notes holding credentials). In-process, one thread, after a warm-up.

``--compare-detect-secrets``: detect-secrets' own ad-hoc scan (``scan_line`` with its
default plugins and filters, line by line) timed on the same texts beside ``find``, and
how many labelled credentials it reports whole.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from trusty_memory.common.credentials import detector
from trusty_memory.common.credentials.redactor import Redactor

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "secrets_labelled.json"
NOTES = HERE / "data" / "eng_notes.json"


def covered(span: list, found: list[detector.Found]) -> bool:
    """Every character of the labelled span lies inside a span found."""
    start, end = span[0], span[1]
    at = start
    for f in sorted(found, key=lambda f: f.start):
        if f.start <= at < f.end:
            at = f.end
        if at >= end:
            return True
    return at >= end


def quality(texts: list[dict], show: bool) -> dict:
    caught, labelled = Counter(), Counter()
    right, reported = Counter(), Counter()
    for item in texts:
        text, spans = item["text"], item["spans"]
        found = detector.find(text)
        for span in spans:
            labelled[span[2]] += 1
            if covered(span, found):
                caught[span[2]] += 1
            elif show:
                print(f"MISS {span[2]} in {item['id']}: {text[span[0] : span[1]]!r}\n  {text!r}")
        for f in found:
            reported[f.kind] += 1
            if any(f.start < s[1] and s[0] < f.end for s in spans):
                right[f.kind] += 1
            elif show:
                print(f"FALSE {f.kind} in {item['id']}: {text[f.start : f.end]!r}\n  {text!r}")
    recall = {k: caught[k] / labelled[k] for k in sorted(labelled)}
    precision = {k: right[k] / reported[k] for k in sorted(reported)}
    return {
        "texts": len(texts),
        "credentials": sum(labelled.values()),
        "labelled": dict(sorted(labelled.items())),
        "recall": recall,
        "found": dict(sorted(reported.items())),
        "precision": precision,
        "precision_all": sum(right.values()) / max(1, sum(reported.values())),
        "recall_all": sum(caught.values()) / max(1, sum(labelled.values())),
        "false_alarms": sum(reported.values()) - sum(right.values()),
    }


def cost(texts: list[str], repeat: int) -> dict:
    """Microseconds ``redact`` takes per text (each text ``repeat`` times; p50, p99)."""
    red = Redactor(b"\x01" * 32)
    for t in texts[:50]:
        red.redact(t)
    samples = []
    for _ in range(repeat):
        for t in texts:
            t0 = time.perf_counter_ns()
            red.redact(t)
            samples.append((time.perf_counter_ns() - t0) / 1000)
    return {
        "texts": len(texts),
        "mean_chars": round(sum(len(t) for t in texts) / len(texts), 1),
        "p50_us": round(percentile(samples, 50), 1),
        "p99_us": round(percentile(samples, 99), 1),
    }


def percentile(values: list[float], q: float) -> float:
    """numpy's default (linear) percentile, without numpy: the bench runs on the library
    alone wherever it is measured."""
    ordered = sorted(values)
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def compare_detect_secrets(notes: list[str], texts: list[dict]) -> dict:
    """detect-secrets' full ad-hoc scan beside ``detector.find``: p50 per text, and the
    labelled credentials whose whole value it reports."""
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    def full_scan(text: str) -> list[str]:
        return [s.secret_value for line in text.splitlines() for s in scan_line(line)]

    out: dict = {}
    with default_settings():
        for t in notes[:20]:
            full_scan(t)
        for name, batch in (("plain_notes", notes), ("labelled_texts", [t["text"] for t in texts])):
            theirs, ours = [], []
            for t in batch:
                t0 = time.perf_counter_ns()
                full_scan(t)
                theirs.append((time.perf_counter_ns() - t0) / 1000)
                t0 = time.perf_counter_ns()
                detector.find(t)
                ours.append((time.perf_counter_ns() - t0) / 1000)
            out[name] = {
                "detect_secrets_p50_us": round(percentile(theirs, 50), 1),
                "find_p50_us": round(percentile(ours, 50), 1),
            }
        whole = total = 0
        for item in texts:
            reported = [v for v in full_scan(item["text"]) if v]
            for span in item["spans"]:
                total += 1
                value = item["text"][span[0] : span[1]]
                whole += any(value in v for v in reported)
        out["reported_whole"] = f"{whole} of {total}"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--show", action="store_true", help="print every miss and false alarm")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--compare-detect-secrets", action="store_true", help="time its full scan beside ours"
    )
    args = parser.parse_args(argv)
    texts = json.loads(args.data.read_text())["texts"]
    t0 = time.perf_counter()
    detector.warm()
    warm_ms = (time.perf_counter() - t0) * 1000
    figures = quality(texts, args.show)
    notes = [d["text"] for d in json.loads(NOTES.read_text())["drawers"]]
    figures["cost_plain_notes"] = cost(notes, args.repeat)
    figures["cost_labelled_texts"] = cost([t["text"] for t in texts], args.repeat)
    figures["rules_compile_ms"] = round(warm_ms, 1)
    print(f"{figures['texts']} texts, {figures['credentials']} credentials")
    print(f"{'kind':22} {'labelled':>8} {'recall':>7} {'found':>6} {'precision':>9}")
    for kind in sorted(set(figures["labelled"]) | set(figures["found"])):
        n = figures["labelled"].get(kind, 0)
        rec = figures["recall"].get(kind)
        m = figures["found"].get(kind, 0)
        prec = figures["precision"].get(kind)
        rec_s = f"{rec:7.3f}" if rec is not None else "      -"
        prec_s = f"{prec:9.3f}" if prec is not None else "        -"
        print(f"{kind:22} {n:8d} {rec_s} {m:6d} {prec_s}")
    print(
        f"all: precision {figures['precision_all']:.4f} ({figures['false_alarms']} false"
        f" alarms), recall {figures['recall_all']:.4f}"
    )
    for name in ("cost_plain_notes", "cost_labelled_texts"):
        c = figures[name]
        print(f"{name}: {c['texts']} texts of {c['mean_chars']} chars: p50 {c['p50_us']} us,"
              f" p99 {c['p99_us']} us")  # fmt: skip
    print(f"rules compiled in {figures['rules_compile_ms']} ms (once per process)")
    if args.compare_detect_secrets:
        figures["detect_secrets_full_scan"] = compare_detect_secrets(notes, texts)
        print(f"detect-secrets' full scan: {figures['detect_secrets_full_scan']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
