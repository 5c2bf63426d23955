"""The daemon works inside the sandbox its systemd unit asks for.

No systemd runs here, so the unit's sandbox is rebuilt from the unit's own lines with the
same kernel mechanisms systemd uses: a mount namespace with the root read-only but for
``ReadWritePaths=`` (``ProtectSystem=strict``, ``ProtectHome=read-only``), private
``/tmp`` and ``/var/tmp`` (``PrivateTmp=``), a network namespace (``PrivateNetwork=``),
no capabilities (``CapabilityBoundingSet=``), and seccomp filters built as systemd builds
them (``SystemCallFilter=``, expanded by ``systemd-analyze syscall-filter``;
``MemoryDenyWriteExecute=``; ``RestrictAddressFamilies=``; ``NoNewPrivileges=``). The
unit's ExecStart and Environment then run in it, and every kind of child (embedder on ONNX
Runtime, forked palace writer and reader, dreamer, MCP host) serves a request, after the
unit's daemon took the home over from a daemon a client started outside the sandbox. Not
rebuilt: user, IPC, PID and cgroup isolation (``PrivateUsers=``, ``PrivateIPC=``,
``ProtectProc=``, ``Protect{Kernel*,ControlGroups,Clock,Hostname}=``, ``PrivateDevices=``).

Needs root (namespaces), ``unshare``, ``setpriv``, libseccomp and ``systemd-analyze``.

Covers: client/cli/systemd.py
"""

from __future__ import annotations

import ctypes.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon
from trusty_memory.client.cli import systemd as service
from trusty_memory.common import home as h
from trusty_memory.common.config import load_config
from trusty_memory.workers.embedder import compiled_model

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "trusty_memory.client.cli.main"]
MISSING = [t for t in ("unshare", "setpriv", "systemd-analyze") if shutil.which(t) is None]
if os.geteuid() != 0:
    pytest.skip("namespaces for the sandbox need root", allow_module_level=True)
if MISSING or ctypes.util.find_library("seccomp") is None:
    pytest.skip(f"missing: {MISSING or ['libseccomp']}", allow_module_level=True)


def directives(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            found.setdefault(key, []).append(value)
    return found


def syscall_groups() -> dict[str, list[str]]:
    out = subprocess.run(
        ["systemd-analyze", "syscall-filter"], capture_output=True, text=True, check=True
    ).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def allowed_syscalls(filters: list[str]) -> set[str]:
    """SystemCallFilter= lines as systemd combines them: the first an allow-list, each
    ``~`` line taking its set away."""
    groups = syscall_groups()

    def expand(word: str) -> set[str]:
        if not word.startswith("@"):
            return {word}
        return set().union(*(expand(w) for w in groups[word]))

    allowed: set[str] = set()
    for line in filters:
        deny = line.startswith("~")
        names = set().union(*(expand(w) for w in line.lstrip("~").split()))
        allowed = allowed - names if deny else allowed | names
    return allowed


PRIVATE_TMPS = ("/tmp", "/var/tmp")  # what PrivateTmp= replaces


def code_paths() -> list[Path]:
    """Where the daemon's code and interpreter live (the checkout, the virtual environment,
    everything on ``sys.path``) and the compiled model it serves from."""
    found = [HERE.parents[1], Path(sys.prefix), Path(sys.base_prefix)]
    found += [Path(entry) for entry in sys.path if entry]
    found.append(compiled_model.default_cache_root())
    return [p.resolve() for p in found if p.exists()]


def kept_visible(tmp: str, fd: int) -> list[str]:
    """Commands that bind back, read-only, the code paths under ``tmp`` after its private
    tmpfs hid them, reached through descriptor ``fd`` opened on the old ``tmp`` before
    (``--no-canonicalize``: else ``mount`` resolves ``/proc/self/fd/N`` to the path
    ``tmp``, the new, empty one).

    A checkout in ``/tmp`` (a fresh clone, a CI runner) would otherwise vanish from inside
    the sandbox and nothing could start. An installed service never runs from ``/tmp``
    (systemd's private ``/tmp`` would hide it just the same), so this is a test-machine
    fix, not a sandbox rule: everything else under ``tmp`` stays hidden, which the probe
    checks."""
    real_tmp = Path(tmp).resolve()
    under = sorted({p for p in code_paths() if p.is_relative_to(real_tmp) and p != real_tmp})
    outermost = [p for p in under if not any(p != q and p.is_relative_to(q) for q in under)]
    commands = []
    for path in outermost:
        rel = shlex.quote(str(path.relative_to(real_tmp)))
        target = shlex.quote(str(Path(tmp) / path.relative_to(real_tmp)))
        make = f"mkdir -p {target}" if path.is_dir() else f"touch {target}"
        commands += [
            make,
            f"mount --no-canonicalize --bind /proc/self/fd/{fd}/{rel} {target}",
            f"mount -o remount,bind,ro {target}",
        ]
    return commands


def sandboxed(unit_text: str, workdir: Path, command: list[str] | None = None) -> list[str]:
    """The unit's ExecStart (or ``command``) inside the unit's sandbox."""
    d = directives(unit_text)
    assert d["ProtectSystem"] == ["strict"] and d["PrivateTmp"] == ["yes"]
    assert d["CapabilityBoundingSet"] == [""] and d["NoNewPrivileges"] == ["yes"]
    allow = workdir / "allowed-syscalls"
    allow.write_text("\n".join(sorted(allowed_syscalls(d["SystemCallFilter"]))))
    seccomp = [f"--allow={allow}"]
    if d.get("MemoryDenyWriteExecute") == ["yes"]:
        seccomp.append("--mdwe")
    if d["RestrictAddressFamilies"] == ["AF_UNIX"]:
        seccomp.append("--unix-only")
    env = [w for line in d["Environment"] for w in shlex.split(line.replace("%%", "%"))]
    command = command or shlex.split(d["ExecStart"][0].replace("%%", "%"))
    rw = [Path(p.lstrip("-")) for line in d["ReadWritePaths"] for p in shlex.split(line)]
    mounts = ["mount --make-rprivate /"]
    mounts += [
        f"mount --bind {shlex.quote(str(p))} {shlex.quote(str(p))}" for p in rw if p.exists()
    ]
    mounts += ["mount -o remount,bind,ro /"]
    for fd, tmp in enumerate(PRIVATE_TMPS, start=3):
        mounts += [f"exec {fd}<{tmp}", f"mount -t tmpfs -o mode=1777 tmpfs {tmp}"]
        mounts += kept_visible(tmp, fd)
    # Closed before the daemon starts: a descriptor on the old /tmp is a way around it.
    mounts.append("exec " + " ".join(f"{fd}<&-" for fd, _ in enumerate(PRIVATE_TMPS, start=3)))
    inner = [
        "setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--ambient-caps", "-all",
        "env", *env, sys.executable, str(HERE / "sandbox_exec.py"), *seccomp, "--", *command,
    ]  # fmt: skip
    script = " && ".join([*mounts, "exec " + shlex.join(inner)])
    net = ["--net"] if d.get("PrivateNetwork") == ["yes"] else []
    return ["unshare", "--mount", *net, "--fork", "sh", "-c", script]


PROBE = """
import mmap, os, socket
home = os.environ["TRUSTY_MEMORY_HOME"]
def tried(what, fn):
    try:
        fn()
        print(what, "allowed")
    except OSError as exc:
        print(what, "refused", exc.errno)
tried("wx-mmap", lambda: mmap.mmap(-1, 4096, prot=7))
tried("inet", lambda: socket.socket(socket.AF_INET))
tried("unix", lambda: socket.socket(socket.AF_UNIX))
tried("chroot", lambda: os.chroot("/"))
tried("write-usr", lambda: open("/usr/.tm-probe", "w"))
tried("write-home", lambda: open(os.path.join(home, "probe"), "w"))
tried("see-tmp-home", lambda: os.stat(os.environ["OUTSIDE_TMP"]))
"""


def test_the_daemon_serves_inside_its_units_sandbox(monkeypatch):
    cache = compiled_model.default_cache_root()
    if not compiled_model.entries(cache):
        pytest.skip(f"no compiled model in {cache}: the sandbox has no network to build one")
    # Not under /tmp: the unit's private /tmp would hide it, as it would from systemd's
    # (the checkout may be there: ``kept_visible`` binds it back).
    home = Path(tempfile.mkdtemp(prefix=".tm-sbx-", dir=Path.home()))
    work = Path(tempfile.mkdtemp(prefix=".tm-sbx-work-", dir=Path.home()))
    outside_tmp = Path(tempfile.mkdtemp(prefix="tm-sbx-"))  # what PrivateTmp must hide
    monkeypatch.setenv("TRUSTY_MEMORY_HOME", str(home))
    unit = service.build_unit(load_config(), "system", run_as="root")
    cmd = sandboxed(unit.text, work)
    env = {**os.environ, "TRUSTY_MEMORY_HOME": str(home)}

    def cli(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [*CLI, *args], env=env, input=stdin, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    proc = None
    try:
        # The rules are in force where the daemon runs (else this test would prove nothing).
        probe_cmd = sandboxed(unit.text, work, [sys.executable, "-c", PROBE])
        probe_env = {**os.environ, "OUTSIDE_TMP": str(outside_tmp)}
        probe = subprocess.run(probe_cmd, env=probe_env, capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0, probe.stderr
        results = dict(line.split(" ", 1) for line in probe.stdout.splitlines())
        assert results == {
            "wx-mmap": "refused 1", "inet": "refused 97", "unix": "allowed", "chroot": "refused 1",
            "write-usr": "refused 30", "write-home": "allowed", "see-tmp-home": "refused 2",
        }, probe.stdout  # fmt: skip
        # A daemon a client started owns the home first, outside the sandbox.
        cli("palace", "create", "notes")
        client_started = h.live_daemon(home)
        assert client_started is not None and client_started.client_started
        log = work / "daemon.err"
        proc = subprocess.Popen(cmd, stderr=log.open("wb"), stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while (owner := h.live_daemon(home)) is None or owner.client_started:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        assert "taking the home over" in log.read_text()  # from inside the sandbox
        assert owner.pid != client_started.pid
        cli("remember", "notes", "The staging DB is on port 5433", "--room", "Configuration")
        assert "5433" in cli("recall", "notes", "which port is staging on?")
        cli("scale", "notes", "--readers", "1")
        assert "5433" in cli("recall", "notes", "staging port", "--deep")
        session = "\n".join([
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            '"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
            '{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}',
            '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"memory_recall",'
            '"arguments":{"palace":"notes","query":"staging port","top_k":1}}}',
        ]) + "\n"  # fmt: skip
        assert "5433" in cli("serve", stdin=session)
        status = cli("status")
        assert "writer" in status and "reader" in status and "embedder" in status
        cli("stop")
        assert proc.wait(timeout=30) == 0
        said = log.read_text()
        assert "daemon stopped" in said and '"serving": "compiled"' in said
        assert "Traceback" not in said and "not permitted" not in said.lower(), said
    finally:
        Daemon(home).stop()  # whichever daemon owns the home, in the sandbox or not
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(outside_tmp, ignore_errors=True)
