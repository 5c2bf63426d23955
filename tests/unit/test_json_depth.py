"""``common.json_depth.nesting_over``: the bound measured on the bytes, the same on every
Python, brackets inside strings not counted.

Covers: common/json_depth.py
"""

from __future__ import annotations

import json

import pytest

from trusty_memory.common.json_depth import nesting_over


@pytest.mark.parametrize("depth", [0, 1, 5, 64])
def test_at_or_under_the_limit(depth):
    raw = ("[" * depth + "]" * depth).encode()
    assert not nesting_over(raw, 64)


@pytest.mark.parametrize("depth", [65, 1_000, 200_000])
def test_over_the_limit(depth):
    raw = ("[" * depth + "]" * depth).encode()
    assert nesting_over(raw, 64)


def test_objects_and_arrays_both_count():
    raw = json.dumps({"a": [{"b": [{"c": []}]}]}).encode()  # six levels
    assert not nesting_over(raw, 6)
    assert nesting_over(raw, 5)


def test_brackets_inside_strings_do_not_count():
    text = '"' + "[{" * 500 + '\\"' + "[" * 100 + '"'
    raw = ("{" + f'"a": {text}' + "}").encode()
    assert json.loads(raw)  # one object holding one string
    assert not nesting_over(raw, 1)


def test_many_flat_brackets_are_not_deep():
    raw = json.dumps([[1]] * 10_000).encode()
    assert not nesting_over(raw, 2)
    assert nesting_over(bytearray(raw), 1)
