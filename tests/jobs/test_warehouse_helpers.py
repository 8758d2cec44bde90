"""The tests' table comparison: a difference names its table and shows the rows."""

from __future__ import annotations

import pytest

from tests.jobs.warehouse import assert_same_tables


def test_equal_snapshots_pass_whatever_their_row_order() -> None:
    assert_same_tables({"cursors": [("a", 1), ("b", 2)]}, {"cursors": [("b", 2), ("a", 1)]})


def test_a_difference_names_the_table_and_prints_the_rows_of_each_side() -> None:
    actual = {"cursors": [("a", 1)], "ledgers": [("t", 3), ("t", 3)]}
    expected = {"cursors": [("a", 1)], "ledgers": [("t", 3), ("t", 4)]}
    with pytest.raises(AssertionError) as failure:
        assert_same_tables(actual, expected)
    message = str(failure.value)
    assert "ledgers: 1 row(s) only in actual, 1 only in expected" in message
    assert "+ ('t', 3)" in message and "- ('t', 4)" in message
    assert "cursors" not in message


def test_only_the_tables_named_are_compared() -> None:
    assert_same_tables({"a": [1], "b": [2]}, {"a": [1], "b": [3]}, ("a",))
    with pytest.raises(AssertionError, match="missing_table: 0 row"):
        assert_same_tables({}, {"missing_table": [1]})
