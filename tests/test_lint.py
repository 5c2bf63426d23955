"""The code base stays ruff-clean and keeps its import rules (both live in pyproject.toml).

Covers: pyproject.toml
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def _runtime_imports(tree, typing: bool = False) -> list[str]:
    """The project modules a file imports when it runs, at any depth (function-level too),
    leaving out ``if TYPE_CHECKING:`` blocks, which never run, unless ``typing``."""
    import ast

    found: list[str] = []

    def visit(node) -> None:
        for child in ast.iter_child_nodes(node):
            if (
                not typing
                and isinstance(child, ast.If)
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
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


def _graph(typing: bool) -> dict[str, set[str]]:
    """Module -> the project modules it imports (at any depth; type-only ones if ``typing``)."""
    import ast

    modules = _module_files()
    return {
        name: {
            imported
            for imported in _runtime_imports(ast.parse(path.read_text()), typing)
            if imported in modules and imported != name
        }
        for name, path in modules.items()
    }


def test_no_two_top_level_folders_import_each_other():
    """Between two actors' folders imports go one way (docs/architecture.md): what two
    share lives in ``common``, and a front end starts an actor by module name rather than
    importing it. Type-only imports count: they tie the folders together all the same."""
    edges: dict[tuple[str, str], str] = {}
    for name, imported in _graph(typing=True).items():
        for other in imported:
            a, b = name.split(".")[1], other.split(".")[1]
            if a != b:
                edges.setdefault((a, b), f"{name} -> {other}")
    pairs = [(a, b) for a, b in sorted(edges) if a < b and (b, a) in edges]
    both = [f"{edges[a, b]} and {edges[b, a]}" for a, b in pairs]
    assert not both, "\n".join(both)


@pytest.mark.parametrize("typing", [False, True], ids=["at run time", "type-only too"])
def test_the_product_has_no_import_circle(typing: bool):
    """No module imports, directly or through others, a module that imports it back: a
    circle makes import order matter and hides which of the two is the lower layer. Nor
    through ``TYPE_CHECKING`` imports: those hide a circle the type checker still walks."""
    graph = _graph(typing)
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
