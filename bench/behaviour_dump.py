"""A behaviour fingerprint of ``trusty-memory serve``, to show a refactor changed nothing.

    .venv/bin/python -m bench.behaviour_dump OUT.json [--questions 200]

Spawns ``serve`` in a throw-away home (it starts its own daemon there) and speaks raw
newline-delimited JSON-RPC to it, so the dump holds what a client reads, byte for byte
where bytes are what a client sees:
- the ``tools/list`` answer line, exactly as it came over stdout;
- the palace made with ``palace_create``;
- the engineering-notes set (bench/data/eng_notes.json) stored with ``memory_remember``,
  then every question asked with ``memory_recall`` and ``memory_recall_deep``: each answer
  with its drawer ids replaced by the note ids they were stored as, and the times a
  drawer was stored at dropped (they are the clock's, not the code's);
- the answers to a few bad calls (unknown palace, wrong type, hostile name, unknown
  tool), whose codes and messages the contract fixes.

Run it on two commits (a second checkout installed with ``pip install --no-deps
--target DIR .`` and ``PYTHONPATH=DIR`` in front) and ``cmp`` the two files: identical
files mean the refactor between them changed none of this. The model is deterministic
on one machine, so scores are compared as they are.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "eng_notes.json"
INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "behaviour-dump", "version": "1"},
}
PALACE = "dump"
# The venv's own console script, so the dump runs the product this interpreter imports.
EXE = shutil.which("trusty-memory", path=str(Path(sys.executable).parent)) or "trusty-memory"
# Fields whose values come from the clock or from fresh random ids, not from the code.
VOLATILE = {"created_at", "updated_at", "stored_at", "valid_from", "last_accessed", "took_ms"}
BAD_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("memory_recall", {"palace": "no-such-palace", "query": "anything"}),
    ("memory_recall", {"palace": PALACE, "query": 7}),
    ("memory_remember", {"palace": "../x", "text": "hostile name"}),
    ("memory_recall", {"palace": PALACE}),
    ("no_such_tool", {}),
]


class Serve:
    """One ``serve`` process and a blocking JSON-RPC conversation with it."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [EXE, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.ids = itertools.count(1)

    def line(self, method: str, params: dict[str, Any]) -> bytes:
        """Send one request; return the raw line that answers it."""
        rid = next(self.ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            raw = self.proc.stdout.readline()
            if not raw:
                raise RuntimeError(f"serve closed stdout during {method}")
            if json.loads(raw).get("id") == rid:
                return raw

    def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = json.loads(self.line("tools/call", {"name": name, "arguments": arguments}))
        return answer.get("result", answer)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def scrub(value: Any, names: dict[str, str]) -> Any:
    """Drop the clock's fields and replace stored drawer ids by the note ids they hold."""
    if isinstance(value, dict):
        return {k: scrub(v, names) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v, names) for v in value]
    if isinstance(value, str):
        return names.get(value, value)
    return value


def tool_json(result: dict[str, Any]) -> Any:
    """A tool result's JSON text, parsed (or the text itself when it is not JSON)."""
    text = result.get("content", [{}])[0].get("text", "")
    try:
        return {"isError": result.get("isError", False), "body": json.loads(text)}
    except json.JSONDecodeError:
        return {"isError": result.get("isError", False), "text": text}


def dump(questions: int) -> dict[str, Any]:
    data = json.loads(DATA.read_text())
    home = Path(tempfile.mkdtemp(prefix="tm-dump-"))
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}
    serve = Serve(env)
    try:
        serve.line("initialize", INIT)
        serve.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        out: dict[str, Any] = {"tools_list": serve.line("tools/list", {}).decode()}
        out["create"] = tool_json(serve.call("palace_create", {"name": PALACE}))
        names: dict[str, str] = {}
        stored = []
        for note in data["drawers"]:
            args = {"palace": PALACE, "text": note["text"], "room": note["room"]}
            answer = tool_json(serve.call("memory_remember", {**args, "tags": note["tags"]}))
            drawer_id = answer.get("body", {}).get("id") or answer.get("body", {}).get("drawer_id")
            if drawer_id:
                names[drawer_id] = note["id"]
            stored.append(answer)
        out["remember"] = scrub(stored, names)
        asked = []
        for q in data["questions"][:questions]:
            plain = serve.call("memory_recall", {"palace": PALACE, "query": q["question"]})
            deep = serve.call("memory_recall_deep", {"palace": PALACE, "query": q["question"]})
            asked.append({"id": q["id"], "plain": tool_json(plain), "deep": tool_json(deep)})
        out["recall"] = scrub(asked, names)
        bad = [[name, args, scrub(serve.call(name, args), names)] for name, args in BAD_CALLS]
        out["bad_calls"] = bad
        return out
    finally:
        serve.close()
        subprocess.run(
            [EXE, "stop"],
            env=env,
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--questions", type=int, default=200)
    args = parser.parse_args()
    args.out.write_text(json.dumps(dump(args.questions), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
