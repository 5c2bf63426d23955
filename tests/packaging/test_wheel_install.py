"""The package as a release ships it, installed the way a user installs it.

``python -m build`` makes the sdist from a copy of the source tree and the wheel from that
sdist; the sdist must carry the tests, the deployment files, the documentation and the
license, the wheel the package and the license only. The wheel then goes into a fresh venv
with pip, and one MCP session runs against that install's own ``trusty-memory serve``:
initialize, tools/list, memory_remember, memory_recall with the real model (the SDK client
also checks both results against their output schemas).

Dependencies come from the package index, as for any user, pinned to this venv's versions
(a constraints file from ``pip freeze``): so the fresh install's compiled-model cache key
is this venv's and its daemon finds the model ``./dev`` compiled (the cache is per user
and machine), and pip's own cache holds the hnswlib wheel built when ``./dev`` set up, so
nothing compiles twice. About 30 s here; on a machine whose pip cache is empty, add the
downloads and hnswlib's compile (~35 s).

Covers: pyproject.toml MANIFEST.in
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import trusty_memory.common
from tests.mcp.conftest import short_tmp, stop_daemon_in
from trusty_memory.client.mcp.tools import TOOL_NAMES
from trusty_memory.common import home as home_mod
from trusty_memory.workers.embedder import compiled_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".*_cache", "out"
)
# What the sdist must carry beyond the package (every file under these, as in the tree).
SDIST_TREES = ("tests", "deploy", "bench", "docs")
SDIST_FILES = ("LICENSE", "README.md", "BENCHMARKS.md", "dev", "pyproject.toml")


def run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{cmd[:4]} exited {done.returncode}:\n{done.stderr[-4000:]}"
    return done


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would point Python at this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def constraints(path: Path) -> Path:
    """This venv's versions of everything but this project, as pip constraints."""
    frozen = run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], 120).stdout
    lines = [
        line
        for line in frozen.splitlines()
        if "==" in line and " @ " not in line and not line.lower().startswith("trusty")
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def check_sdist(sdist: Path, src: Path) -> None:
    with tarfile.open(sdist) as tar:
        top = f"trusty_memory-{trusty_memory.common.__version__}/"
        names = {n.removeprefix(top) for n in tar.getnames()}
    wanted = set(SDIST_FILES)
    for tree in SDIST_TREES:
        wanted |= {str(p.relative_to(src)) for p in (src / tree).rglob("*") if p.is_file()}
    assert not wanted - names, sorted(wanted - names)
    assert "client/mcp/tools.py" in names and "LICENSE" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def check_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = f"trusty_memory-{trusty_memory.common.__version__}.dist-info/"
        entry_points = whl.read(info + "entry_points.txt").decode()
    assert info + "licenses/LICENSE" in names
    assert "trusty_memory/client/mcp/tools.py" in names
    assert "trusty_memory/workers/embedder/model_build.py" in names
    assert "trusty_memory/__init__.py" not in names  # a namespace package: no folder of its own
    # The web page's files are package data: without them `trusty-memory ui` cannot render.
    for data in ("templates/base.html", "static/htmx.min.js", "static/htmx.LICENSE"):
        assert f"trusty_memory/ui/{data}" in names, data
    assert not [n for n in names if n.startswith(("tests/", "bench/", "deploy/", "docs/"))]
    assert "trusty-memory = trusty_memory.client.cli.main:main" in entry_points


async def one_session(command: Path, home: Path, cwd: Path, venv: Path) -> None:
    params = StdioServerParameters(
        command=str(command),
        args=["serve", "--palace", "wheel"],
        env=clean_env(TRUSTY_MEMORY_HOME=str(home)),
        cwd=str(cwd),
    )
    with open(home.parent / "serve-stderr.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert init.server_info.name == "trusty-memory"
            assert init.server_info.version == trusty_memory.common.__version__
            tools = (await session.list_tools()).tools
            assert [t.name for t in tools] == list(TOOL_NAMES)
            text = "The wheel installs into a fresh venv and serves MCP."
            stored = await session.call_tool("memory_remember", {"text": text, "tags": ["ci"]})
            assert not stored.is_error, stored
            assert stored.structured_content["status"] == "stored"
            found = await session.call_tool(
                "memory_recall", {"query": "does the installed wheel serve?", "top_k": 1}
            )
            assert not found.is_error, found
            [hit] = found.structured_content["results"]
            assert (
                hit["content"] == text
                and hit["drawer_id"] == stored.structured_content["drawer_id"]
            )
            # The daemon this session started is the fresh install's, not this checkout's.
            record = home_mod.read_record(home)
            assert record is not None
            argv0 = Path(f"/proc/{record.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            assert argv0.startswith(str(venv)), argv0


def ui_page_renders(command: Path, home: Path, cwd: Path) -> None:
    """The install's ``trusty-memory ui`` finds its templates and shows the palace."""
    proc = subprocess.Popen(
        [str(command), "ui", "--port", "0"],
        env=clean_env(TRUSTY_MEMORY_HOME=str(home)),
        cwd=str(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = urlsplit(proc.stdout.readline().split()[-1])
        assert url.hostname.endswith(".localhost"), url  # its private name (ui/security.py)
        # Browsers resolve *.localhost themselves; urllib asks the C library, which may not.
        request = urllib.request.Request(
            f"http://127.0.0.1:{url.port}/?{url.query}", headers={"Host": url.netloc}
        )
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        with opener.open(request, timeout=60) as resp:  # the token sets a cookie, redirects
            page = resp.read().decode()
        assert 'data-palace="wheel"' in page, page[-2000:]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_built_wheel_installs_into_a_fresh_venv_and_serves_mcp():
    tmp = short_tmp("tpk-")  # the daemon's ipc socket paths must stay short
    src, dist, venv, home = tmp / "src", tmp / "dist", tmp / "venv", tmp / "home"
    times: dict[str, float] = {}
    try:
        started = time.monotonic()
        shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
        run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)], 300, env=clean_env())
        [sdist] = dist.glob("*.tar.gz")
        [wheel] = dist.glob("*.whl")
        check_sdist(sdist, src)
        check_wheel(wheel)
        times["build"] = time.monotonic() - started

        started = time.monotonic()
        run([sys.executable, "-m", "venv", str(venv)], 120)
        python = venv / "bin" / "python"
        run(
            [
                str(python),
                *("-m", "pip", "install", "-q", "-c", str(constraints(tmp / "constraints.txt"))),
                str(wheel),
            ],
            600,
            env=clean_env(HNSWLIB_NO_NATIVE="1"),
            cwd=tmp,
        )
        times["install"] = time.monotonic() - started

        probe = (
            "import trusty_memory.common\n"
            "from trusty_memory.workers.embedder.compiled_model import cache_key\n"
            "print(trusty_memory.common.__file__)\n"
            "print(cache_key())\n"
        )
        where, key = run([str(python), "-c", probe], 60, env=clean_env(), cwd=tmp).stdout.split()
        assert where.startswith(str(venv)), where
        # Same versions, same key: the session below loads the model ./dev compiled
        # instead of building one (which would install the export tools first).
        assert key == compiled_model.cache_key()
        assert (compiled_model.default_cache_root() / key).is_dir(), "run ./dev setup first"

        started = time.monotonic()
        asyncio.run(one_session(venv / "bin" / "trusty-memory", home, tmp, venv))
        times["session"] = time.monotonic() - started
        ui_page_renders(venv / "bin" / "trusty-memory", home, tmp)
    finally:
        stop_daemon_in(home)
        print("wheel install test, seconds:", {k: round(v, 1) for k, v in times.items()})
        shutil.rmtree(tmp, ignore_errors=True)
