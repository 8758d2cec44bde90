"""The cursor vectors of spec section 9.2, as Pulsar's ManagedCursorTest runs them."""

from __future__ import annotations

import pytest

from engine import Cursor, Ledgers, MessageId, Position
from engine.errors import AckBeyondLastPublished, MarkDeleteBeforeMarkDelete
from tests.engine.conftest import make_ledgers


def delete(cursor: Cursor, ledgers: Ledgers, *positions: Position) -> None:
    cursor.ack([MessageId(p) for p in positions], ledgers, ledgers.last_position, False)


def mark_delete(cursor: Cursor, ledgers: Ledgers, pos: Position) -> None:
    cursor.ack_cumulative(MessageId(pos), ledgers, ledgers.last_position, False)


def opened(ledgers: Ledgers) -> Cursor:
    return Cursor.subscribe("Exclusive", "Earliest", ledgers, ledgers.last_position)


def test_v1_single_delete():
    ledgers = make_ledgers(3, 3)
    c = opened(ledgers)
    delete(c, ledgers, (11, 0))
    assert (c.mark_delete, str(c.acked)) == ((10, -1), "[(11:-1..11:0]]")
    delete(c, ledgers, (10, 0))
    assert (c.mark_delete, str(c.acked)) == ((10, 0), "[(11:-1..11:0]]")
    delete(c, ledgers, (10, 2))
    delete(c, ledgers, (10, 2))
    assert str(c.acked) == "[(10:1..10:2],(11:-1..11:0]]"
    delete(c, ledgers, (10, 1))
    assert (c.mark_delete, str(c.acked)) == ((11, 0), "[]")
    delete(c, ledgers, (11, 1))
    assert c.mark_delete == (11, 1)


def test_v2_filtering_read_entries_backlog():
    ledgers = make_ledgers(3, 3)
    c = opened(ledgers)
    assert c.backlog(ledgers) == 6
    delete(c, ledgers, (11, 1))
    assert (c.backlog(ledgers), str(c.acked), c.mark_delete) == (5, "[(11:0..11:1]]", (10, -1))


def test_v4_counting_with_deleted_entries():
    ledgers = make_ledgers(2, 2, 2, 2)
    c = opened(ledgers)
    assert c.backlog(ledgers) == 8
    delete(c, ledgers, (13, 1))
    assert c.backlog(ledgers) == 7
    delete(c, ledgers, (10, 0))
    assert (c.backlog(ledgers), c.mark_delete) == (6, (10, 0))
    delete(c, ledgers, (13, 0))
    delete(c, ledgers, (12, 1))
    delete(c, ledgers, (12, 0))
    assert c.backlog(ledgers) == 3
    assert str(c.acked) == "[(12:-1..12:1],(13:-1..13:1]]"


def test_v5_mark_delete_twice_and_v6_unordered_mark_delete():
    ledgers = make_ledgers(2)
    c = opened(ledgers)
    mark_delete(c, ledgers, (10, 0))
    mark_delete(c, ledgers, (10, 0))
    assert c.mark_delete == (10, 0)
    mark_delete(c, ledgers, (10, 1))
    with pytest.raises(MarkDeleteBeforeMarkDelete):
        mark_delete(c, ledgers, (10, 0))
    assert c.mark_delete == (10, 1)


def test_v7_skip_entries_with_individually_deleted_messages():
    ledgers = make_ledgers(5)
    c = opened(ledgers)
    delete(c, ledgers, (10, 1))
    delete(c, ledgers, (10, 3))
    mark_delete(c, ledgers, (10, 4))  # skipEntries(3, Exclude) lands on 10:4
    assert (c.mark_delete, c.backlog(ledgers)) == ((10, 4), 0)
    for entry in range(5):
        ledgers.publish((11, entry))
    delete(c, ledgers, (11, 1))
    delete(c, ledgers, (11, 3))
    mark_delete(c, ledgers, (11, 3))  # skipEntries(4, Include) lands on 11:3
    assert (c.mark_delete, c.backlog(ledgers), str(c.acked)) == ((11, 3), 1, "[]")


def test_v8_clear_backlog():
    ledgers = Ledgers()
    ledgers.publish((10, 0))
    c2 = Cursor.subscribe("Exclusive", "Latest", ledgers, ledgers.last_position)
    ledgers.publish((11, 0))
    c3 = Cursor.subscribe("Exclusive", "Latest", ledgers, ledgers.last_position)
    ledgers.publish((12, 0))
    c1 = opened(ledgers)
    assert [c.backlog(ledgers) for c in (c1, c2, c3)] == [3, 2, 1]
    mark_delete(c1, ledgers, ledgers.last_position)
    mark_delete(c3, ledgers, ledgers.last_position)
    assert [c.backlog(ledgers) for c in (c1, c2, c3)] == [0, 2, 0]


def test_v10_delete_single_message_twice():
    ledgers = make_ledgers(4)
    c = opened(ledgers)
    expected = [((10, 0), 3), ((10, 0), 3), ((10, 1), 2), ((10, 2), 1), ((10, 3), 0)]
    for pos, (md, backlog) in zip([(10, 0), (10, 0), (10, 1), (10, 2), (10, 3)], expected, strict=True):
        delete(c, ledgers, pos)
        assert (c.mark_delete, c.backlog(ledgers)) == (md, backlog)


def test_v11_out_of_order_acks():
    ledgers = make_ledgers(10)
    c = opened(ledgers)
    for entry, backlog in ((3, 9), (2, 8), (1, 7)):
        delete(c, ledgers, (10, entry))
        assert c.backlog(ledgers) == backlog
    delete(c, ledgers, (10, 0))
    assert (c.backlog(ledgers), c.mark_delete) == (6, (10, 3))


def test_v12_last_individually_deleted_range():
    ledgers = make_ledgers(10)
    c = opened(ledgers)
    delete(c, ledgers, (10, 0), (10, 1), (10, 4), (10, 5))
    assert c.mark_delete == (10, 1)
    assert str(c.acked) == "[(10:3..10:5]]"
    delete(c, ledgers, (10, 7))
    assert str(c.acked).endswith("(10:6..10:7]]")


def test_v13_out_of_order_delete_persistence_state_round_trips():
    ledgers = make_ledgers(20)
    c = opened(ledgers)
    delete(c, ledgers, *[(10, i) for i in (2, 5, 7, 8, 9)])
    assert c.backlog(ledgers) == 15
    reopened = Cursor.decode(c.encode())  # "close and reopen": exact, no range cap
    assert reopened.backlog(ledgers) == 15
    assert str(reopened.acked) == "[(10:1..10:2],(10:4..10:5],(10:6..10:9]]"


def test_v14_out_of_order_delete_many_ranges():
    ledgers = Ledgers()
    c = None
    for entry in range(100):
        ledgers.publish((10, entry))
        if c is None:
            c = Cursor.subscribe("Exclusive", "Earliest", ledgers, ledgers.last_position)
        if entry % 2 == 0:
            delete(c, ledgers, (10, entry))
    assert c is not None
    assert c.mark_delete == (10, 0)
    assert c.non_contiguous_deleted_ranges == 49
    assert str(c.acked).startswith("[(10:1..10:2],") and str(c.acked).endswith("(10:97..10:98]]")
    assert c.backlog(ledgers) == 50
    assert Cursor.decode(c.encode()).backlog(ledgers) == 50


def test_invalid_mark_delete_beyond_last_entry():
    ledgers = make_ledgers(5)
    c = opened(ledgers)
    with pytest.raises(AckBeyondLastPublished):
        mark_delete(c, ledgers, (10, 5))
