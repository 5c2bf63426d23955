"""Forked palace workers on this host: the template's threads at fork, and whether children live.

    python -m bench.fork_check [--children 16] [--out bench/results/fork_check.json]

The worker template (``workers/template.py``) imports what a palace worker needs, runs the
store code once (``warm_up``) and then forks every palace worker. A fork copies only the
forking thread: a pool some library started before it (OpenBLAS starts one thread per core
when numpy loads) is gone in the child while its locks may be held, which is how every
forked worker died on a 16-core host. The daemon starts the template with the pools capped
to one thread (``broker.forks.SINGLE_THREADED``); this checks both ways on the host it runs
on, in fresh interpreters:

* ``capped``: the template's environment as the daemon sets it;
* ``uncapped``: the same with those variables removed (what the product did before).

For each it reports the template's threads after ``preload`` and ``warm`` (what
``template.threads`` counts, the check the template makes before every fork), then forks
``--children`` workers, each of which runs the store code again (SQLite, hnswlib, numpy
with a matrix product big enough to use BLAS) and exits, and reports how each ended.
Nothing here needs the model or a daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from trusty_memory.broker.forks import SINGLE_THREADED


def template_run(children: int) -> dict:
    """In a fresh interpreter: become a template, then fork ``children`` workers."""
    import faulthandler

    import numpy as np

    from trusty_memory.workers import template

    template.preload()
    template.warm()
    count, names = template.threads()
    pandas = sys.modules.get("pandas") is not None  # sqlite-utils' optional import
    statuses: list[str] = []
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:  # a forked worker: the store code once more, then out
            code = 1
            try:
                faulthandler.enable(file=sys.stderr, all_threads=True)
                from trusty_memory.common.logs import get_logger
                from trusty_memory.workers.warm_up import warm_up

                warm_up(get_logger().bind(actor="fork_check", pid=os.getpid()))
                a = np.random.default_rng(os.getpid()).random((512, 512), dtype=np.float32)
                float((a @ a).sum())  # BLAS, on whatever pool the child has
                code = 0
            finally:
                os._exit(code)
        pids.append(pid)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            statuses.append(signal.Signals(os.WTERMSIG(status)).name)
        else:
            statuses.append(f"exit {os.WEXITSTATUS(status)}")
    return {
        "threads_at_fork": count,
        "thread_names": names,
        "pandas_loaded": pandas,
        "children": statuses,
    }


def run_mode(mode: str, children: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SINGLE_THREADED}
    if mode == "capped":
        env.update(SINGLE_THREADED)
    with tempfile.TemporaryDirectory(prefix="tm-forkcheck-") as home:
        env["TRUSTY_MEMORY_HOME"] = home
        proc = subprocess.run(
            [sys.executable, "-m", "bench.fork_check", "--template-run", str(children)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": proc.stderr[-3000:]}
    result["returncode"] = proc.returncode
    crashed = [s for s in result.get("children", []) if s != "exit 0"]
    result["crashed"] = len(crashed)
    if crashed:
        result["stderr_tail"] = proc.stderr[-3000:]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--template-run", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.template_run is not None:
        print(json.dumps(template_run(args.template_run)), flush=True)
        return 0
    report = {
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
        "modes": {mode: run_mode(mode, args.children) for mode in ("capped", "uncapped")},
    }
    try:
        import numpy

        report["host"]["numpy"] = numpy.__version__
    except ImportError:
        pass
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    capped = report["modes"]["capped"]
    return 0 if capped.get("threads_at_fork") == 1 and capped.get("crashed") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
