"""The code base stays ruff-clean and keeps its import rules (both live in pyproject.toml).

Covers: pyproject.toml
"""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tool(name: str) -> str:
    return shutil.which(name) or str(Path(sys.executable).parent / name)


def test_ruff_check_is_clean():
    out = subprocess.run(
        [tool("ruff"), "check", "--quiet", str(ROOT)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_import_rules_hold():
    """Each actor imports ``common`` and its own folder (docs/architecture.md): checked by
    import-linter over the installed package, with the contracts in pyproject.toml."""
    out = subprocess.run(
        [tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _module_files() -> dict[str, Path]:
    """Every product module by its import name, from pyproject's package-dir map."""
    import tomllib

    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    modules = {}
    for package, folder in package_dir.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts]
            modules[".".join([package, *[p for p in parts if p != "__init__"]])] = path
    return modules


def _runtime_imports(tree) -> list[str]:
    """The project modules a file imports when it runs, at any depth (function-level too),
    leaving out ``if TYPE_CHECKING:`` blocks, which never run."""
    import ast

    found: list[str] = []

    def visit(node) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.ImportFrom) and child.module:
                found.extend(f"{child.module}.{alias.name}" for alias in child.names)
                found.append(child.module)
            elif isinstance(child, ast.Import):
                found.extend(alias.name for alias in child.names)
            visit(child)

    visit(tree)
    return [name for name in found if name.startswith("trusty_memory.")]


def test_the_product_has_no_import_circle():
    """No module imports, directly or through others, a module that imports it back: a
    circle makes import order matter and hides which of the two is the lower layer."""
    import ast

    modules = _module_files()
    graph = {
        name: {
            imported
            for imported in _runtime_imports(ast.parse(path.read_text()))
            if imported in modules and imported != name
        }
        for name, path in modules.items()
    }
    circles = []
    for start in graph:  # a depth-first walk from each module back to itself
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, "\n".join(sorted(set(circles))[:20])
