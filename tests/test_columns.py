"""iterlin.columns: a record is a read-only mapping of its columns, and reads them back."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from iterlin.columns import Record


@dataclasses.dataclass(frozen=True, eq=False)
class Table(Record):
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray | None = None


def test_a_record_is_the_mapping_of_its_columns_and_reads_them_back():
    t = Table(a=np.arange(3), b=np.ones(3))
    assert list(t) == ["a", "b"] and len(t) == 2  # None: not computed, not a column
    assert t["a"] is t.a and dict(t) == {"a": t.a, "b": t.b}
    back = Table.from_columns(dict(t))
    assert back.a is t.a and back.b is t.b and back.c is None
    full = Table.from_columns({"a": 1, "b": 2, "c": 3})
    assert (full.a, full.b, full.c) == (1, 2, 3) and list(full) == ["a", "b", "c"]
    with pytest.raises(TypeError):
        t["a"] = 0  # read-only
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.a = 0


@pytest.mark.parametrize("columns, what", [
    ({"a": 1, "b": 2, "d": 4}, r"unknown \['d'\]"),
    ({"a": 1}, r"missing \['b'\]"),
    ({"b": 1, "e": 2}, r"unknown \['e'\]; missing \['a'\]"),
])
def test_from_columns_names_unknown_and_missing_columns(columns, what):
    with pytest.raises(ValueError, match=rf"^columns=.* are not allowed: {what} \(the fields of Table"):
        Table.from_columns(columns)
