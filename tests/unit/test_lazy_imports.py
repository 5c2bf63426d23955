"""An import of one of our own modules inside a function says why it is there.

A module's imports at its top are the list of what it depends on: what a reader, the
import contracts (``lint-imports``) and a change to a start path all go by. An import
inside a function hides a dependency from that list, so it is kept only where it must be,
and then it says why on its own line: ``# lazy: <reason>`` (for an import over several
lines, on its first line). The reasons are what keeps a start path cheap (the CLI's start
must not load pyzmq or numpy; ``serve``'s relay loads neither the SDK nor structlog), a
process's order of imports (the worker template's ``preload``), or an import needed only
by one verb or one mode. An import that needs none of these belongs at the top.

Covers: pyproject.toml
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("broker", "workers", "dreamer", "client", "common", "ui")
MARK = "# lazy:"


def _own(node: ast.Import | ast.ImportFrom) -> bool:
    """An import of a module of this project: ``trusty_memory.*``, or a relative one."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "trusty_memory"
    return any(alias.name.split(".")[0] == "trusty_memory" for alias in node.names)


def _unexplained(path: Path, root: Path = ROOT) -> list[str]:
    """The imports of our own modules inside a function of ``path`` whose first line
    carries no ``# lazy:`` reason (a mark with nothing after it is no reason)."""
    source = path.read_text()
    lines = source.splitlines()
    found: dict[int, str] = {}  # by line: a nested function's import is walked twice
    for function in ast.walk(ast.parse(source, str(path))):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Import | ast.ImportFrom) or not _own(node):
                continue
            line = lines[node.lineno - 1]
            if not line.partition(MARK)[2].strip():
                found[node.lineno] = f"{path.relative_to(root)}:{node.lineno}: {line.strip()}"
    return [found[n] for n in sorted(found)]


def test_an_import_inside_a_function_says_why():
    found = [
        hit
        for folder in PRODUCT
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in _unexplained(path)
    ]
    assert found == [], "move to the module's top, or add `# lazy: <why>`:\n" + "\n".join(found)


def test_the_check_sees_what_it_should(tmp_path: Path):
    """The check itself: a bare import of ours is caught, absolute or relative, on one line
    or several, nested or not; a reason on the first line passes; other imports are not ours."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import json\n"
        "from trusty_memory.common import home\n"
        "def f():\n"
        "    import os\n"
        "    from trusty_memory.common import config\n"
        "    from . import sibling\n"
        "    import trusty_memory.workers.store\n"
        "    from trusty_memory.common.names import (  # lazy: only f needs it\n"
        "        validate_palace_name,\n"
        "    )\n"
        "    from trusty_memory.common.protocol import (\n"
        "        TrustyError,  # lazy: on the wrong line\n"
        "    )\n"
        "    from trusty_memory.common import keys  # lazy:\n"
        "    def inner():\n"
        "        from trusty_memory.common import launch\n"
        "async def g():\n"
        "    from trusty_memory.client.sync import Client  # lazy: pyzmq\n"
        "    from trusty_memory_other import thing\n"
    )
    found = _unexplained(sample, root=tmp_path)
    assert [int(hit.split(":")[1]) for hit in found] == [5, 6, 7, 11, 14, 16]
