"""The cursor's binary state: exact, versioned, unbounded."""

from __future__ import annotations

import numpy as np
import pytest

from engine import CorruptState, Cursor, MessageId
from engine.ackset import mask_from_acked
from tests.engine.conftest import make_ledgers


def cursor_with_everything() -> Cursor:
    ledgers = make_ledgers(50, 50, 50)
    cursor = Cursor.subscribe("Failover", "Earliest", ledgers, ledgers.last_position)
    lac = ledgers.last_position
    cursor.ack(
        [MessageId((10, 0)), MessageId((10, 7)), MessageId((11, 3)), MessageId((12, 49))],
        ledgers,
        lac,
        True,
    )
    cursor.ack([MessageId((11, 9), mask_from_acked(130, [0, 64, 129]), 130)], ledgers, lac, True)
    return cursor


def test_round_trip_keeps_every_field():
    cursor = cursor_with_everything()
    decoded = Cursor.decode(cursor.encode())
    assert decoded == cursor
    assert decoded.sub_type == "Failover"
    assert decoded.batch_acks[(11, 9)].acked_count == 3
    assert decoded.encode() == cursor.encode()


def test_encoding_is_deterministic():
    assert cursor_with_everything().encode() == cursor_with_everything().encode()


@pytest.mark.parametrize("cut", [0, 3, 10, -1])
def test_truncated_or_foreign_state_is_refused(cut):
    data = cursor_with_everything().encode()
    with pytest.raises(CorruptState):
        Cursor.decode(data[:cut] if cut else b"XXX" + data[3:])


def test_unknown_version_is_refused():
    data = bytearray(cursor_with_everything().encode())
    data[3] = 99
    with pytest.raises(CorruptState, match="version 99"):
        Cursor.decode(bytes(data))


def test_ten_million_ack_holes_round_trip_exactly_in_under_4_bytes_each():
    rng = np.random.default_rng(7)
    holes = 10_000_000
    # acked entries separated by 1..3 unacked entries: every gap is one ack hole
    entries = np.cumsum(rng.integers(2, 5, size=holes)).astype(np.int64)
    ledgers = make_ledgers(0)
    ledgers.publish((10, int(entries[-1]) + 1))
    cursor = Cursor("Shared", (9, -1))
    cursor.acked.add_entries(10, entries)
    data = cursor.encode()
    decoded = Cursor.decode(data)
    assert decoded == cursor
    assert decoded.non_contiguous_deleted_ranges == holes
    assert len(data) / holes < 4
