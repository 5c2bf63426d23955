"""A module's tests can be found from its name (issue 38): the suite's layout holds.

Tests sit in folders by kind (unit, engine, mcp, ...), and an integration test drives the
product as real processes, importing none of the modules it checks: neither a file's folder
nor its imports say what it tests. So every test file says it, on the ``Covers:`` line of
its docstring (``tests/covers.py`` reads it; ``./dev tests-for broker/broker.py`` runs the
files that name a module). Here, that the line stays true to its purpose:

* every test file has one;
* every name on it is a file here, and under a product folder a product module (a typo, a
  module renamed or removed, a ``.pyc`` or a folder would otherwise point nowhere);
* every product module is named by at least one test file (an ``__init__.py`` holding only
  its docstring has nothing to test): a module nothing covers is found when it is added;
* no two test files share a name, so that a name given in a failure, a log or a
  conversation is one file.

Covers: tests/covers.py
"""

from __future__ import annotations

from collections import defaultdict

from tests import covers as c


def test_every_test_file_says_what_it_covers():
    missing = [path for path, names in c.all_covers().items() if not names]
    assert not missing, (
        "test files without a 'Covers:' line in their docstring (the product modules they "
        "test, as repository paths; see tests/covers.py):\n" + "\n".join(missing)
    )


def test_every_name_covered_is_a_product_module_or_a_file_here():
    modules = set(c.product_modules())
    folders = tuple(f + "/" for f in c.product_folders())
    tests = {p.relative_to(c.ROOT).as_posix() for p in c.all_test_files()}
    wrong = []
    for path, names in c.all_covers().items():
        for name in names or []:
            if name.startswith(folders):
                if name not in modules:
                    wrong.append(f"{path}: {name} is no product module")
            elif not (c.ROOT / name).is_file() or name in tests:
                wrong.append(f"{path}: {name} is no file of the repository (or is a test)")
        if names and len(set(names)) != len(names):
            wrong.append(f"{path}: names a module twice")
    assert not wrong, "\n".join(wrong)


def test_every_product_module_is_covered_by_a_test_file():
    covered = {name for names in c.all_covers().values() for name in names or []}
    uncovered = [m for m in c.product_modules() if m not in covered]
    assert not uncovered, (
        "product modules no test file names on its 'Covers:' line (add the module to the "
        "line of the tests that check it, or write them):\n" + "\n".join(uncovered)
    )


def test_no_two_test_files_share_a_name():
    by_name = defaultdict(list)
    for path in c.all_test_files():
        by_name[path.name].append(path.relative_to(c.ROOT).as_posix())
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"test files sharing a name (rename one to say what it tests): {shared}"


def test_the_covers_line_reads_as_documented(tmp_path):
    """The parser itself: continuation lines, the end of the line, dotted and folder names."""
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        '"""Checks something.\n\nCovers: broker/broker.py broker/palaces.py\n'
        '    client/sync.py\nMore text, not names.\n"""\n'
    )
    assert c.covers(sample) == ["broker/broker.py", "broker/palaces.py", "client/sync.py"]
    sample.write_text('"""No line here."""\n')
    assert c.covers(sample) is None
    assert c.as_path("trusty_memory.broker.broker") == "broker/broker.py"
    assert c.as_path("trusty_memory.client.mcp") == "client/mcp/"
    assert c.as_path("./broker/palace_moves.py") == "broker/palace_moves.py"
    assert c.as_path("broker") == "broker/"
    assert "tests/engine/test_palace_moves.py" in c.tests_for(["broker/palace_moves.py"])
    assert set(c.tests_for(["broker/"])) >= set(c.tests_for(["broker/broker.py"]))
