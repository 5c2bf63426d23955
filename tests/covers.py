"""Which test files test which module: the ``Covers:`` line of every test file's docstring.

A test file names what it tests in its module docstring, one line (indented continuation
lines may follow when it is long)::

    Covers: broker/palace_moves.py broker/palaces.py
        client/cli/palaces.py

Each name is a path from the repository's root: a product module (a ``.py`` file under one
of the folders pyproject.toml's ``package-dir`` maps into ``trusty_memory``), or, for the
tests of what ships beside the product, another file of the repository (a benchmark in
``bench/``, a recipe in ``deploy/``, ``pyproject.toml``). Integration tests name the
modules whose behaviour they assert, not every module the processes they drive load.

Read by ``tests/test_layout.py`` (every test file has the line, every name exists, every
product module is named by some test file) and by ``./dev tests-for``::

    python -m tests.covers [--list] NAME... [-- PYTEST_ARGS...]

NAME is a path (``broker/broker.py``), a dotted module (``trusty_memory.broker.broker``)
or a folder or package (``broker/``, ``trusty_memory.client.mcp``): the test files whose
``Covers:`` names it, or anything under it, run under pytest (with ``--list``, are
printed, one a line).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PREFIX = "Covers:"


def package_dirs() -> dict[str, str]:
    """pyproject.toml's map of import packages to folders (``trusty_memory.common`` ->
    ``common``): the product's folders, and how a dotted name becomes a path."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return dict(setuptools["package-dir"])


def product_folders() -> list[str]:
    return sorted(package_dirs().values())


def is_empty_init(path: Path) -> bool:
    """An ``__init__.py`` holding nothing but its docstring: nothing in it runs, so nothing
    in it needs a test."""
    if path.name != "__init__.py":
        return False
    body = ast.parse(path.read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def product_modules() -> list[str]:
    """Every product module that holds code, as a repository path."""
    found = []
    for folder in product_folders():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" not in path.parts and not is_empty_init(path):
                found.append(path.relative_to(ROOT).as_posix())
    return found


def all_test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def covers(path: Path) -> list[str] | None:
    """The names on ``path``'s ``Covers:`` line (with its continuation lines), in order;
    None when its module docstring has no such line."""
    doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
    if doc is None:
        return None
    names: list[str] | None = None
    for line in doc.splitlines():
        if names is None:
            if line.startswith(PREFIX):
                names = line[len(PREFIX) :].split()
        elif line[:1].isspace() and line.strip():
            names.extend(line.split())
        else:
            break
    return names


def all_covers() -> dict[str, list[str] | None]:
    """Every test file (a repository path) and what it covers."""
    return {p.relative_to(ROOT).as_posix(): covers(p) for p in all_test_files()}


def as_path(name: str) -> str:
    """A name as given on the command line, as a repository path: ``broker/broker.py``,
    ``./broker/broker.py``, an absolute path inside the checkout, or a dotted module
    (``trusty_memory.broker.broker``); a folder or package ends in ``/``. Raises
    ValueError for a name that is neither a file nor a folder here."""
    dirs = package_dirs()
    if name.split(".")[0] == next(iter(dirs)).split(".")[0]:  # trusty_memory.*
        packages = [p for p in dirs if name == p or name.startswith(p + ".")]
        package = max(packages, key=len, default=None)
        if package is None:
            raise ValueError(f"{name}: not a module of the product ({', '.join(sorted(dirs))})")
        rest = name[len(package) :].lstrip(".").split(".") if name != package else []
        name = "/".join([dirs[package], *rest])
        if not (ROOT / name).is_dir():
            name += ".py"
    path = Path(name)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(ROOT)
        except ValueError:
            raise ValueError(f"{name}: not inside {ROOT}") from None
    rel = os.path.normpath(path.as_posix())
    if rel == "." or rel.startswith("../"):
        raise ValueError(f"{name}: name a module or a folder inside {ROOT}")
    if (ROOT / rel).is_dir():
        return rel + "/"
    if not (ROOT / rel).is_file() and (ROOT / (rel + ".py")).is_file():
        rel += ".py"
    if not (ROOT / rel).is_file():
        raise ValueError(f"{name}: no such file or folder in {ROOT}")
    return rel


def tests_for(names: Iterable[str]) -> list[str]:
    """The test files whose ``Covers:`` names any of ``names`` (repository paths; one
    ending in ``/`` stands for everything under it), in path order."""
    wanted = list(names)

    def hit(covered: str) -> bool:
        return any(covered == w or (w.endswith("/") and covered.startswith(w)) for w in wanted)

    return [test for test, listed in all_covers().items() if any(map(hit, listed or []))]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="./dev tests-for",
        description="Run (or list) the test files whose Covers: line names these modules.",
        epilog="Arguments after -- go to pytest: ./dev tests-for broker/ -- -x -q",
    )
    parser.add_argument(
        "names", nargs="+", metavar="PATH", help="broker/broker.py, trusty_memory.broker.broker"
    )
    parser.add_argument("--list", action="store_true", help="print the files, run nothing")
    args = parser.parse_args(argv)
    try:
        wanted = [as_path(name) for name in args.names]
    except ValueError as exc:
        parser.error(str(exc))
    found = tests_for(wanted)
    if not found:
        print(f"no test file names {' '.join(wanted)} on its Covers: line", file=sys.stderr)
        return 1
    if args.list:
        print("\n".join(found))
        return 0
    os.chdir(ROOT)
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *found, *pytest_args])


if __name__ == "__main__":
    sys.exit(main())
