"""Property tests of the consumer model on random Shared/Key_Shared streams.

1. While a consumer is connected, what was dispatched and is not yet acked is partitioned
   exactly: each such entry is either pending for exactly one consumer, or in the redelivery
   (replay) set, and nothing else is in either. An acked entry is in neither, unless a
   dispatcher sent it after the ack (it read the entry before the ack landed): a real broker
   then holds it pending like any other (``Consumer.sendMessages``).
2. Micro-batch boundaries do not matter: the same stream applied whole or in random pieces
   gives byte-identical subscription and cursor state (timers fire on the event-time clock).
3. The cached earliest client timer (``Subscription.next_due``) is at every call what a scan of
   the nacks and pending acks gives.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import EngineSettings, EventBatch, PartitionState, Position
from engine.subscription import Subscription

TOPIC = "persistent://t/ns/model"
ENTRIES = 12
CONSUMERS = (1, 2, 3)

op = st.one_of(
    st.tuples(st.just("SUBSCRIBE"), st.sampled_from(CONSUMERS)),
    st.tuples(st.just("CLOSE_CONSUMER"), st.sampled_from(CONSUMERS)),
    st.tuples(st.just("DISPATCH"), st.sampled_from(CONSUMERS), st.integers(0, ENTRIES - 1)),
    st.tuples(st.just("DISPATCH"), st.sampled_from(CONSUMERS), st.integers(0, ENTRIES - 1)),
    st.tuples(st.just("ACK"), st.sampled_from(CONSUMERS), st.lists(st.integers(0, ENTRIES - 1), max_size=3)),
    st.tuples(
        st.just("NACK"),
        st.sampled_from(CONSUMERS),
        st.lists(st.integers(0, ENTRIES - 1), min_size=1, max_size=2),
    ),
    st.tuples(
        st.just("REDELIVER"), st.sampled_from(CONSUMERS), st.lists(st.integers(0, ENTRIES - 1), max_size=2)
    ),
    st.tuples(st.just("WAIT"), st.integers(0, 4000)),
)


def _events(ops: list[tuple], sub_type: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "PUBLISH", "ledger_id": 7, "entry_id": e, "seq": e + 1, "event_time": 1000}
        for e in range(ENTRIES)
    ]
    now = 1000
    for item in ops:
        kind = item[0]
        now += 100
        if kind == "WAIT":
            now += item[1]
            continue
        base = {"type": kind, "subscription": "s", "consumer_id": item[1], "event_time": now}
        if kind == "SUBSCRIBE":
            base |= {
                "consumer_name": f"c{item[1]}",
                "sub_type": sub_type,
                "initial_position": "Earliest",
                "negative_ack_delay_ms": 1500,
                "ack_timeout_ms": 3000 if item[1] == 3 else 0,
            }
        elif kind == "DISPATCH":
            base |= {"ledger_id": 7, "entry_id": item[2], "key": f"k{item[2] % 3}"}
        elif kind in ("ACK", "NACK", "REDELIVER"):
            base["message_ids"] = [{"ledger_id": 7, "entry_id": e} for e in item[2]]
            if kind == "ACK":
                if not item[2]:
                    continue
                base["ack_type"] = "Individual"
        events.append(base)
    for seq, event in enumerate(events, 1):
        event["seq"] = seq
    return events


def _check_partition(state: PartitionState, dispatched: set[Position], late: set[Position]) -> None:
    sub = state.subscriptions.get("s")
    cursor = state.cursors.get("s")
    if sub is None or cursor is None or not sub.consumers:
        return
    pending = [p for c in sub.consumers.values() for p in c.pending]
    assert len(pending) == len(set(pending)), "an entry is pending for two consumers"
    replay = {p for p, r in sub.redeliveries.items() if not r.scheduled}
    assert not (set(pending) & replay), "an entry is both pending and due for redelivery"
    unacked = {p for p in dispatched if not cursor.is_deleted(p)}
    held = set(pending) | replay
    assert {p for p in held if not cursor.is_deleted(p)} == unacked
    assert {p for p in held if cursor.is_deleted(p)} <= late, "an entry acked before its dispatch is held"


def _replay_model(events: list[dict[str, Any]], cfg: EngineSettings) -> None:
    """Apply event by event, tracking what was dispatched, and check the partition each time."""
    state = PartitionState(TOPIC, -1)
    dispatched: set[Position] = set()
    late: set[Position] = set()  # dispatched after they were acked
    for event in events:
        cursor = state.cursors.get("s")
        pos = (7, event.get("entry_id", -1))
        if event["type"] == "DISPATCH" and cursor is not None and cursor.is_deleted(pos):
            late.add(pos)
        result = state.apply(EventBatch.from_records([event]), cfg)
        refused = bool(result.rejects)
        sub = state.subscriptions.get("s")
        if event["type"] == "DISPATCH" and not refused and sub is not None:
            dispatched.add((7, event["entry_id"]))
        if event["type"] == "CLOSE_CONSUMER" and not refused and sub is not None and not sub.consumers:
            dispatched.clear()  # the last consumer left: replay set and tracker are wiped
            late.clear()
        _check_partition(state, dispatched, late)


@settings(max_examples=150)
@given(st.lists(op, max_size=40), st.sampled_from(["Shared", "Key_Shared"]), st.booleans())
def test_pending_acked_and_redelivery_partition_what_was_dispatched(ops, sub_type, batch_index):
    events = _events([("SUBSCRIBE", 1), *ops], sub_type)
    _replay_model(events, EngineSettings(acknowledgment_at_batch_index_level_enabled=batch_index))


@settings(max_examples=100)
@given(st.lists(op, max_size=40), st.sampled_from(["Shared", "Key_Shared"]), st.data())
def test_batch_boundaries_do_not_change_the_state(ops, sub_type, data):
    events = _events([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), *ops], sub_type)
    cfg = EngineSettings()
    whole = PartitionState(TOPIC, -1)
    whole.apply(EventBatch.from_records(events), cfg)
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(events) - 1, 1)), max_size=6)))
    pieces = PartitionState(TOPIC, -1)
    for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
        pieces.apply(EventBatch.from_records(events[lo:hi]), cfg)
    assert set(whole.subscriptions) == set(pieces.subscriptions)
    for name, sub in whole.subscriptions.items():
        assert sub.encode() == pieces.subscriptions[name].encode()
        assert whole.cursors[name].encode() == pieces.cursors[name].encode()


@settings(max_examples=300)
@given(
    st.lists(op, max_size=40),
    st.sampled_from(["Shared", "Key_Shared"]),
    st.lists(st.sampled_from([0, 150, 700, 3000, 20_000]), min_size=3, max_size=3),
    st.data(),
)
def test_cached_next_due_is_a_full_scan_at_every_call(ops, sub_type, timeouts, data):
    """Every ``next_due`` the engine asks for, inside a batch too, equals a scan from scratch."""
    events = _events([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), *ops], sub_type)
    for event in events:
        if event["type"] == "SUBSCRIBE":
            event["ack_timeout_ms"] = timeouts[event["consumer_id"] - 1]
    cached = Subscription.next_due

    def checked(sub: Subscription) -> int | None:
        due = cached(sub)
        assert due == sub._scan_next_due()
        return due

    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(events) - 1, 1)), max_size=4)))
    state = PartitionState(TOPIC, -1)
    with mock.patch.object(Subscription, "next_due", checked):
        for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True):
            state.apply(EventBatch.from_records(events[lo:hi]), EngineSettings())
            for sub in state.subscriptions.values():
                checked(sub)
