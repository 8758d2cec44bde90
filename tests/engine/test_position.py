from __future__ import annotations

import random
from typing import Any

import pytest

from engine import EARLIEST, EngineSettings, EventBatch, PartitionState, parse_position, position_text
from engine.position import position_order, positions_of, sorted_after, sorted_columns, sorted_positions


def test_positions_order_by_ledger_then_entry():
    assert (3, 9) < (4, -1) < (4, 0) < (4, 1)
    assert EARLIEST < (0, -1)


def test_text_form_is_ledger_colon_entry():
    assert position_text((3, 5)) == "3:5"
    assert position_text((3, -1)) == "3:-1"
    assert parse_position("12:-1") == (12, -1)


def test_parse_rejects_text_without_colon():
    with pytest.raises(ValueError, match="ledger:entry"):
        parse_position("35")


@pytest.mark.parametrize("n", [0, 1, 255, 256, 5_000])
def test_sorted_after_is_sorted_and_filtered(n: int) -> None:
    rng = random.Random(n)
    positions = {(rng.randrange(3, 9), rng.randrange(-1, 400)) for _ in range(n)}
    floor = (5, 200)
    assert sorted_after(positions, floor) == sorted(p for p in positions if p > floor)


@pytest.mark.parametrize("n", [40, 3000])
def test_position_order_with_a_leading_key_is_tuple_order(n: int) -> None:
    rng = random.Random(7)
    pairs = list({(rng.randrange(4), (rng.randrange(2**40), rng.randrange(9))) for _ in range(n)})
    order = position_order([p for _, p in pairs], [c for c, _ in pairs])
    assert [pairs[i] for i in order] == sorted(pairs)


@pytest.mark.parametrize("n", [0, 1, 255, 256, 5_000])
def test_sorted_columns_and_sorted_positions_are_tuple_order(n: int) -> None:
    rng = random.Random(n)
    positions = {(rng.randrange(2**40), rng.randrange(-1, 400)) for _ in range(n)}
    expected = sorted(positions)
    assert sorted_positions(positions) == expected
    ledgers, entries, order = sorted_columns(positions)
    assert list(zip(ledgers.tolist(), entries.tolist(), strict=True)) == expected
    assert [list(positions)[i] for i in order.tolist()] == expected


def test_positions_of_builds_plain_tuples() -> None:
    """Plain tuples, not a tuple subclass (``engine.position``: four times cheaper to make)."""
    built = positions_of([3, 4, 4], [9, -1, 0])
    assert built == [(3, 9), (4, -1), (4, 0)]
    assert all(type(p) is tuple for p in built)
    assert position_text(built[0]) == "3:9"


def test_every_refusal_that_names_a_position_prints_it_as_pulsar_does() -> None:
    """Positions are plain tuples, whose ``str`` is ``(L, E)``: every refusal detail that names
    one (``rejected_events``) goes through ``position_text`` and reads ``L:E``."""

    def ack(ack_type: str, entry: int) -> dict[str, Any]:
        ids = [{"ledger_id": 7, "entry_id": entry}]
        return {"type": "ACK", "consumer_id": 1, "ack_type": ack_type, "message_ids": ids}

    events: list[dict[str, Any]] = [
        {"type": "PUBLISH", "ledger_id": 7, "entry_id": 0},
        {"type": "PUBLISH", "ledger_id": 7, "entry_id": 1},
        {"type": "PUBLISH", "ledger_id": 7, "entry_id": 1},  # not after 7:1
        {"type": "PUBLISH", "ledger_id": 8, "entry_id": -3},  # outside the entry ids
        {"type": "SUBSCRIBE", "consumer_id": 1, "sub_type": "Exclusive", "initial_position": "Earliest"},
        {"type": "DISPATCH", "consumer_id": 1, "ledger_id": 7, "entry_id": 5},
        ack("Individual", 6),  # beyond the last entry
        ack("Cumulative", 1),
        ack("Cumulative", 0),  # below mark-delete
        ack("Cumulative", 9),  # beyond the last entry
    ]
    for seq, event in enumerate(events, start=1):
        event |= {"seq": seq, "event_time": 1000 + seq}
        if event["type"] != "PUBLISH":
            event["subscription"] = "s"
    state = PartitionState("persistent://t/ns/topic", -1)
    result = state.apply(EventBatch.from_records(events), EngineSettings())
    assert [(reject.reason, reject.detail) for reject in result.rejects] == [
        ("publish_out_of_order", "PUBLISH 7:1 is not after 7:1"),
        ("invalid_value", "PUBLISH position 8:-3 outside 0..4294967294"),
        ("dispatch_beyond_last_published", "DISPATCH of 7:5, beyond the last published entry 7:1"),
        (
            "ack_beyond_last_published",
            "ack of 7:6 beyond the last published entry 7:1; the call stopped there",
        ),
        ("mark_delete_before_mark_delete", "cumulative ack of 7:0 is below mark-delete 7:1"),
        ("ack_beyond_last_published", "cumulative ack of 7:9 beyond the last published entry 7:1"),
    ]
