"""A repository the agent opens is untrusted: none of its files runs inside the daemon.

Agent hosts start ``serve`` in the project's folder, and every actor the daemon starts
inherits that working directory. A module there named like a library the daemon imports
(``structlog.py``, ``numpy.py``, ``mcp.py``...) must never be imported by any of them: the
broker, the MCP host, the template, palace workers, the embedder, the dreamer.

Covers: common/launch.py broker/supervisor.py client/spawn.py client/cli/systemd.py
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import Daemon, run_cli
from tests.mcp.conftest import serve_env, tool_json

pytestmark = pytest.mark.slow

# What the daemon's processes import at start or on a request's path, and so what a
# hostile repository would plant.
PLANTED = (
    "structlog", "numpy", "mcp", "zmq", "msgspec", "hnswlib", "sqlite_utils", "onnxruntime",
    "tokenizers", "platformdirs", "starlette", "trusty_memory",
)  # fmt: skip


def plant(repo: Path, marks: Path) -> None:
    """A module per name that leaves a mark (and which process ran it) when imported."""
    for name in PLANTED:
        (repo / f"{name}.py").write_text(
            "import os, sys\n"
            f"open({str(marks / name)!r} + '.' + str(os.getpid()), 'w')"
            ".write(' '.join(sys.argv))\n"
        )


def test_a_repositorys_modules_never_run_in_the_daemon(tmp_path, serve_home):
    asyncio.run(session_in_a_hostile_repository(tmp_path, serve_home))
    # Every actor the daemon starts ran by now: the broker, MCP host, embedder, dreamer,
    # the template and a palace worker forked from it.
    status = json.loads(run_cli(Daemon(serve_home), "status", "--json").stdout)
    assert status["mcp_host_pid"] and status["template"]["pid"], status
    ran = {path.name: path.read_text() for path in (tmp_path / "marks").iterdir()}
    assert not ran, f"the repository's modules ran in: {ran}"


async def session_in_a_hostile_repository(tmp_path: Path, serve_home: Path) -> None:
    repo, marks = tmp_path / "repo", tmp_path / "marks"
    repo.mkdir()
    marks.mkdir()
    plant(repo, marks)
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "trusty-memory"),
        args=["serve"],
        env=serve_env(serve_home),
        cwd=str(repo),
    )
    with open(serve_home / "serve-stderr.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.call_tool("palace_create", {"name": "victim"})
            stored = tool_json(
                await session.call_tool(
                    "memory_remember", {"palace": "victim", "text": "the deploy key is rotated"}
                )
            )
            hits = tool_json(
                await session.call_tool(
                    "memory_recall", {"palace": "victim", "query": "deploy key", "top_k": 1}
                )
            )
            assert [h["drawer_id"] for h in hits["results"]] == [stored["drawer_id"]]


def test_cli_and_actor_commands_leave_the_working_directory_off_sys_path():
    """Every command line the daemon starts a process with begins ``python -P``."""
    from trusty_memory.broker.supervisor import argv_for
    from trusty_memory.client.cli.systemd import daemon_command
    from trusty_memory.client.spawn import module_command
    from trusty_memory.common import protocol as p

    for service in (p.EMBEDDER_SERVICE, p.DREAMER_SERVICE, p.MCP_HOST_SERVICE, "palace:x"):
        assert argv_for(service)[1] == "-P", argv_for(service)
    assert module_command("trusty_memory.broker")[1] == "-P"
    command = daemon_command()
    assert command[0].endswith("trusty-memory") or command[1] == "-P"
    assert os.path.basename(sys.executable).startswith("python")
