"""The protocol's methods, declared once (``common/methods.py``): the records are whole,
the tables derived from them agree with them, and no other product module spells a
method as a bare string.

Covers: common/methods.py workers/secrets_guard.py
"""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

from trusty_memory.common import methods
from trusty_memory.common import protocol as p
from trusty_memory.common.methods import Method
from trusty_memory.workers import secrets_guard

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("broker", "workers", "dreamer", "client", "common", "ui")

# Strings that are also method names but mean something else where they appear: the
# MCP protocol's own ``ping``, and a field named ``status`` in many results.
NOT_METHODS = {"ping", "status"}


def test_a_method_is_its_wire_name():
    assert Method.MEMORY_RECALL == "memory_recall"
    assert f"{Method.PALACE_CREATE}: refused" == "palace_create: refused"
    assert p.encode_request(Method.MEMORY_RECALL, {"query": "q"}, id="1") == p.encode_request(
        "memory_recall", {"query": "q"}, id="1"
    )


def test_every_method_is_answered_by_exactly_one_actor():
    sets = [methods.BROKER_METHODS, methods.PALACE_METHODS, methods.EMBEDDER_METHODS]
    for method in Method:
        assert sum(method in s for s in sets) == 1, method
    assert not methods.PALACE_READ_METHODS & methods.PALACE_WRITE_METHODS


def test_what_a_worker_answers_decodes_into_its_params():
    for method in methods.PALACE_METHODS | methods.EMBEDDER_METHODS:
        assert method.spec.params is not None, method
        assert methods.PARAMS_FOR_METHOD[method] is method.spec.params


def test_the_derived_flags_sit_where_they_mean_something():
    assert methods.PALACE_MOVE_METHODS <= methods.BROKER_METHODS
    assert methods.BULK_METHODS <= methods.PALACE_WRITE_METHODS
    assert {Method.PALACE_IMPORT, Method.DREAM_MERGE} <= methods.BULK_METHODS
    assert Method.MEMORY_REMEMBER not in methods.BULK_METHODS | methods.BACKGROUND_METHODS


@pytest.mark.parametrize("method", [m for m in Method if m.spec.lookup_fields])
def test_a_lookup_field_is_a_field_of_the_methods_params(method: Method):
    params = method.spec.params
    assert params is not None
    assert set(method.spec.lookup_fields) <= set(params.__struct_fields__), method


@pytest.mark.parametrize("method", [m for m in Method if m.spec.result is not None])
def test_a_result_is_a_struct(method: Method):
    result = method.spec.result
    assert result is not None and issubclass(result, msgspec.Struct)


def test_an_unknown_method_is_named():
    with pytest.raises(p.TrustyError) as caught:
        methods.decode_params("memory_recal", p.encode({}))
    assert caught.value.code == p.ErrorCode.UNKNOWN_METHOD
    assert "memory_recal" in caught.value.message


def _bare_method_strings(path: Path) -> list[str]:
    """``"memory_recall"``-like constants outside docstrings and outside ``name=...``
    (an MCP tool's name, the contract's, which equals its method's)."""
    tree = ast.parse(path.read_text(), str(path))
    names = {str(m) for m in Method} - NOT_METHODS
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    tool_names = {
        id(k.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for k in node.keywords
        if k.arg == "name"
    }
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in names
        and id(node) not in docstrings | tool_names
    ]


def test_no_product_module_spells_a_method_as_a_string():
    allowed = {
        ROOT / "common" / "methods.py",
        # The MCP tool a failure came from, by its (contract) name.
        ROOT / "client" / "mcp" / "tool_sets.py",
    }
    found = [
        hit
        for folder in PRODUCT
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in allowed
        for hit in _bare_method_strings(path)
    ]
    assert found == []


def test_the_secrets_guard_redacts_exactly_the_methods_that_store_text():
    """A new write that stores an agent's text and has no guard would keep credentials in
    clear; a guard for a method that stores none is a table out of date."""
    stores = {m for m in Method if m.spec.stores_text}
    assert stores == set(secrets_guard._WRITES)
    assert all(m.spec.answered_by is methods.Answerer.WRITER for m in stores)
