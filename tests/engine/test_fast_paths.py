"""The shortcuts of the per-event path leave what the plain calls leave.

``PartitionState`` stages the cursor side of individual acks (``Cursor.stage_ack``, and
``Cursor.stage_entry_acks`` for a command of whole entries, its checks written out for a
command of one such id; applied at once by ``Cursor.apply_staged``), takes the consumer side
of a whole-entry id through ``Subscription.ack_entry``, passes over the DISPATCHes that
change nothing (``Subscription.dispatch_is_inert``) and applies a Shared or Key_Shared
subscription's runs of DISPATCHes and individual acks in one loop (``Subscription.apply_run``),
and an Exclusive or Failover subscription's runs of cumulative acks (``Cursor.mark_delete_run``).
All are exact claims, so switching them off (the plain ``Cursor.ack`` per call,
``Subscription.ack`` per id, ``Subscription.dispatch`` per DISPATCH, no run) must give
byte-identical state, the same changes per batch, and the same rejects in the same order, on
the generated mix and on random streams that mix every subscription type, refusals, timers and
batch-index acks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine import Cursor, EngineSettings, EventBatch, MessageId, PartitionState, Position
from engine.errors import EngineRefusal
from engine.events import EVENT_TYPES, among, type_table
from engine.subscription import Changes, Subscription
from jobs.bench.generate import generate_records
from tests.engine.conftest import make_ledgers

TOPIC = "persistent://t/ns/fast"
ENTRIES = 10
CONSUMERS = (1, 2, 3)


def _ack_entry_through_ack(
    self: Subscription, cursor: Cursor, consumer_id: int, pos: Position, settings: Any
) -> None:
    """``ack_entry`` as what it stands for: ``ack`` of a whole-entry id, shadows empty."""
    Subscription.ack(self, cursor, consumer_id, pos, None, 1, {}, settings, {})


@contextmanager
def plain_calls() -> Iterator[None]:
    """Every ack call through ``Cursor.ack``, every id through ``Subscription.ack``, every
    DISPATCH through ``Subscription.dispatch``: no run through ``Subscription.apply_run``, no
    cumulative ack through ``Cursor.mark_delete_run``."""
    with (
        mock.patch.object(Cursor, "can_stage_acks", lambda self, enabled, ledgers: False),
        mock.patch.object(Subscription, "ack_entry", _ack_entry_through_ack),
        mock.patch.object(Subscription, "dispatch_is_inert", lambda self, cursor: False),
        mock.patch.object(Subscription, "apply_run", lambda self, cursor, run, start, *rest: (start, -1)),
        mock.patch.object(Cursor, "mark_delete_run", lambda self, positions, lacs, start, stop: start),
    ):
        yield


def outcome(batches: list[EventBatch], cfg: EngineSettings) -> tuple[Any, ...]:
    """Everything a run leaves: per batch the rejects and changed names, then the state."""
    state = PartitionState(TOPIC, -1)
    seen = []
    for batch in batches:
        result = state.apply(batch, cfg)
        seen.append((result.rejects, sorted(result.changed), result.applied))
        for sub in state.subscriptions.values():
            seen.append(repr(sub.changes))
            sub.changes = Changes()  # as the apply UDF does once it has emitted them
    cursors = {name: cursor.encode() for name, cursor in state.cursors.items()}
    subs = {name: sub.encode() for name, sub in state.subscriptions.items()}
    return seen, cursors, subs


def both_ways(batches: list[EventBatch], cfg: EngineSettings) -> None:
    fast = outcome(batches, cfg)
    with plain_calls():
        plain = outcome(batches, cfg)
    assert fast == plain


# ---- the generated mix --------------------------------------------------------------------
@pytest.mark.parametrize(
    "cfg",
    [
        EngineSettings(),
        EngineSettings(acknowledgment_at_batch_index_level_enabled=True),
        EngineSettings(implicit_consumers=True),
    ],
    ids=["default", "batch-index", "implicit"],
)
def test_generated_mix_gives_the_same_as_plain_calls(cfg):
    records = [r for r in generate_records(6_000, topics=1, partitions=0, seed=11)]
    if cfg.implicit_consumers:  # some consumers attach by their first command
        subscribes = [k for k, r in enumerate(records) if r["type"] == "SUBSCRIBE"]
        dropped = set(subscribes[1::2])
        records = [r for k, r in enumerate(records) if k not in dropped]
    for record in records:
        record["topic"] = TOPIC
    batches = [EventBatch.from_records(records[lo : lo + 1_500]) for lo in range(0, len(records), 1_500)]
    both_ways(batches, cfg)


# ---- random streams -----------------------------------------------------------------------
op = st.one_of(
    st.tuples(st.just("SUBSCRIBE"), st.sampled_from(CONSUMERS)),
    st.tuples(st.just("CLOSE_CONSUMER"), st.sampled_from(CONSUMERS)),
    st.tuples(st.just("PUBLISH")),
    st.tuples(st.just("DISPATCH"), st.sampled_from((*CONSUMERS, 9)), st.integers(0, ENTRIES + 1)),
    st.tuples(st.just("DISPATCH"), st.sampled_from(CONSUMERS), st.integers(0, ENTRIES - 1)),
    st.tuples(
        st.just("ACK"),
        st.sampled_from((*CONSUMERS, 9)),
        st.lists(st.tuples(st.integers(-1, ENTRIES + 1), st.booleans()), min_size=1, max_size=3),
    ),
    st.tuples(st.just("ACK"), st.sampled_from(CONSUMERS), st.lists(st.integers(0, ENTRIES - 1), max_size=2)),
    st.tuples(st.just("CUMULATIVE"), st.sampled_from(CONSUMERS), st.integers(0, ENTRIES - 1)),
    st.tuples(st.just("NACK"), st.sampled_from(CONSUMERS), st.lists(st.integers(0, ENTRIES - 1), max_size=2)),
    st.tuples(
        st.just("REDELIVER"), st.sampled_from(CONSUMERS), st.lists(st.integers(0, ENTRIES - 1), max_size=2)
    ),
    st.tuples(st.just("WAIT"), st.integers(0, 4000)),
)


def _stream(ops: list[tuple], sub_type: str) -> list[dict[str, Any]]:
    """Two ledgers of ``ENTRIES // 2`` entries, published as the stream goes (acks and
    dispatches beyond the last entry are refused); a batch entry of 4 messages at every third."""
    published = 2
    events: list[dict[str, Any]] = []
    now = 1000

    def ledger_entry(k: int) -> tuple[int, int]:
        return 7 + k // (ENTRIES // 2), k % (ENTRIES // 2)

    for k in range(published):
        events.append({"type": "PUBLISH", "ledger_id": 7, "entry_id": k, "event_time": now})
    for item in ops:
        kind = item[0]
        now += 100
        if kind == "WAIT":
            now += item[1]
            continue
        if kind == "PUBLISH":
            if published < ENTRIES:
                ledger, entry = ledger_entry(published)
                events.append({"type": "PUBLISH", "ledger_id": ledger, "entry_id": entry, "event_time": now})
                published += 1
            continue
        base = {"subscription": "s", "consumer_id": item[1], "event_time": now}
        if kind == "SUBSCRIBE":
            base |= {
                "type": kind,
                "consumer_name": f"c{item[1]}",
                "sub_type": sub_type,
                "initial_position": "Earliest",
                "negative_ack_delay_ms": 1500,
                "ack_timeout_ms": 3000 if item[1] == 3 else 0,
            }
        elif kind == "CLOSE_CONSUMER":
            base["type"] = kind
        elif kind == "DISPATCH":
            ledger, entry = ledger_entry(item[2])
            base |= {"type": kind, "ledger_id": ledger, "entry_id": entry, "key": f"k{item[2] % 3}"}
            base["batch_size"] = 4 if item[2] % 3 == 0 else 1
        elif kind == "CUMULATIVE":  # of entry k, of (ledger, entry) as given, or of several
            targets = item[2] if isinstance(item[2], list) else [item[2]]
            ids = []
            for target in targets:
                ledger, entry = target if isinstance(target, tuple) else ledger_entry(target)
                ids.append({"ledger_id": ledger, "entry_id": entry})
            if len(item) > 3 and item[3]:  # the first id with an ack set: a batch's indexes 1 and 2
                ids[0] |= {"batch_size": 4, "ack_set": [0b1001]}
            base |= {"type": "ACK", "ack_type": "Cumulative", "message_ids": ids}
        elif kind == "ACK":
            ids = []
            for spec in item[2]:
                k, partial = spec if isinstance(spec, tuple) else (spec, False)
                ledger, entry = ledger_entry(max(k, 0))
                mid: dict[str, Any] = {"ledger_id": ledger, "entry_id": entry if k >= 0 else -1}
                if partial and k % 3 == 0:
                    mid |= {"batch_size": 4, "ack_set": [0b0110]}
                ids.append(mid)
            if not ids:
                continue
            base |= {"type": "ACK", "ack_type": "Individual", "message_ids": ids}
        else:
            ledger_ids = [ledger_entry(k) for k in item[2]]
            base |= {"type": kind, "message_ids": [{"ledger_id": lg, "entry_id": e} for lg, e in ledger_ids]}
        events.append(base)
    for seq, event in enumerate(events, 1):
        event["seq"] = seq
    return events


def _cut(events: list[dict[str, Any]], data: st.DataObject, max_cuts: int) -> list[EventBatch]:
    """``events`` as micro-batches, cut at up to ``max_cuts`` places hypothesis draws."""
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(events) - 1, 1)), max_size=max_cuts)))
    return [
        EventBatch.from_records(events[lo:hi])
        for lo, hi in zip([0, *cuts], [*cuts, len(events)], strict=True)
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(op, max_size=60),
    st.sampled_from(["Exclusive", "Failover", "Shared", "Key_Shared"]),
    st.booleans(),
    st.booleans(),
    st.data(),
)
def test_random_streams_give_the_same_as_plain_calls(ops, sub_type, batch_index, implicit, data):
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), *ops], sub_type)
    batches = _cut(events, data, 3)
    cfg = EngineSettings(acknowledgment_at_batch_index_level_enabled=batch_index, implicit_consumers=implicit)
    both_ways(batches, cfg)


quiet = st.one_of(  # no SUBSCRIBE or CLOSE_CONSUMER: long epochs, where commands are dropped
    st.tuples(st.just("PUBLISH")),
    st.tuples(st.just("DISPATCH"), st.sampled_from((*CONSUMERS, 9)), st.integers(0, ENTRIES + 1)),
    st.tuples(
        st.just("ACK"), st.sampled_from((*CONSUMERS, 9)), st.lists(st.integers(0, ENTRIES - 1), max_size=2)
    ),
    st.tuples(st.just("CUMULATIVE"), st.sampled_from(CONSUMERS), st.integers(0, ENTRIES - 1)),
    st.tuples(
        st.just("NACK"), st.sampled_from((*CONSUMERS, 9)), st.lists(st.integers(0, ENTRIES - 1), max_size=2)
    ),
    st.tuples(
        st.just("REDELIVER"),
        st.sampled_from((*CONSUMERS, 9)),
        st.lists(st.integers(0, ENTRIES - 1), max_size=2),
    ),
    st.tuples(st.just("WAIT"), st.integers(0, 1500)),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(quiet, min_size=70, max_size=160),
    st.sampled_from(["Exclusive", "Failover"]),
    st.booleans(),
    st.data(),
)
def test_long_epochs_give_the_same_as_plain_calls(ops, sub_type, close_one, data):
    """Epochs of 64 events and more, where ``PartitionState`` drops the inert DISPATCH, NACK and
    REDELIVER commands of an Exclusive or Failover subscription before applying the rest:
    consumers that are not connected (9), redelivers from consumers that are not active or
    during a failover switch, dispatches beyond the last entry, a consumer closed midway."""
    middle = len(ops) // 2
    if close_one:
        ops = [*ops[:middle], ("CLOSE_CONSUMER", 1), *ops[middle:]]
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), ("SUBSCRIBE", 3), *ops], sub_type)
    batches = _cut(events, data, 2)
    both_ways(batches, EngineSettings())


dispatch_op = st.tuples(st.just("DISPATCH"), st.sampled_from(CONSUMERS), st.integers(0, ENTRIES - 1))
entries = st.lists(st.integers(0, ENTRIES - 1), max_size=3)
ack_op = st.tuples(st.just("ACK"), st.sampled_from(CONSUMERS), entries)
# mostly DISPATCHes and whole-entry acks (Subscription.apply_run's runs), else any op
busy = st.one_of(*[dispatch_op] * 4, *[ack_op] * 3, op)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(busy, min_size=20, max_size=120),
    st.sampled_from(["Shared", "Key_Shared"]),
    st.booleans(),
    st.integers(0, 3),
    st.data(),
)
def test_shared_runs_give_the_same_as_plain_calls(ops, sub_type, implicit, limit_choice, data):
    """Long stretches of DISPATCHes and acks of whole entries on a Shared or Key_Shared
    subscription, which ``Subscription.apply_run`` takes in one loop: an entry sent again to
    another consumer, acks by a consumer that does not hold the entry, acks and dispatches beyond
    the last entry or of entries that do not exist, nack and ack-timeout timers falling due inside
    a run (consumer 3 has a 3 s ack timeout), replays, and a limit of unacked messages per
    consumer low enough to block and unblock consumers."""
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), ("SUBSCRIBE", 3), *ops], sub_type)
    batches = _cut(events, data, 3)
    limit = (0, 2, 4, 50_000)[limit_choice]
    cfg = EngineSettings(implicit_consumers=implicit, max_unacked_messages_per_consumer=limit)
    both_ways(batches, cfg)


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
def test_an_ack_set_in_a_run_drops_the_redelivery_count(sub_type):
    """Entry 0 (a batch of 4) is sent, handed back by a redeliver (its redelivery count becomes
    1), sent again, then acked index by index inside a run: with batch-index acks off that ack
    only drops the count, which the next dispatch of the entry would otherwise carry."""
    ops = [
        *[("PUBLISH",)] * 6,
        ("DISPATCH", 1, 0),
        ("REDELIVER", 1, [0]),
        ("DISPATCH", 1, 0),
        *[("DISPATCH", 2, k) for k in range(1, 6)],
        ("ACK", 1, [(0, True), (1, False)]),
        *[("ACK", 2, [k]) for k in range(2, 6)],
        ("DISPATCH", 2, 0),
    ]
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), *ops], sub_type)
    both_ways([EventBatch.from_records(events[:12]), EventBatch.from_records(events[12:])], EngineSettings())


@pytest.mark.parametrize("sub_type", ["Shared", "Key_Shared"])
def test_a_timer_set_inside_a_run_fires_inside_it(sub_type):
    """Consumer 3's ack timeout (3 s) starts with a DISPATCH inside a run and falls due inside
    the same run, before entry 2 is sent again to consumer 1: the timer hands it back first,
    so that DISPATCH delivers a replay. The next batch's run has an ack as consumer 1's only
    change, which its changed consumers must still name."""
    ops = [
        *[("PUBLISH",)] * 7,
        ("DISPATCH", 1, 0),
        ("DISPATCH", 2, 1),
        ("DISPATCH", 3, 2),
        ("ACK", 1, [0]),
        ("ACK", 2, [1]),
        ("DISPATCH", 1, 3),
        ("DISPATCH", 2, 4),
        ("WAIT", 3500),
        ("DISPATCH", 1, 2),
        ("ACK", 2, [4]),
        ("ACK", 1, [3]),
        ("ACK", 1, [2]),
        *[("DISPATCH", 2, 5), ("ACK", 2, [5]), ("DISPATCH", 2, 6), ("ACK", 2, [6])] * 2,
    ]
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), ("SUBSCRIBE", 3), *ops], sub_type)
    cut = len(events) - 9  # the second batch: consumer 1's last ack, then consumer 2's events
    batches = [EventBatch.from_records(events[:cut]), EventBatch.from_records(events[cut:])]
    both_ways(batches, EngineSettings())


cumulative_op = st.tuples(
    st.just("CUMULATIVE"),
    st.sampled_from((*CONSUMERS, 9)),
    # entries 7:5 to 7:7 do not exist (ledger 7 ends at 7:4); 7:-1 is before its first
    st.one_of(st.integers(0, ENTRIES + 1), st.tuples(st.just(7), st.integers(-1, 7))),
)
odd_cumulative_op = st.tuples(  # with an ack set, or of two ids (refused)
    st.just("CUMULATIVE"),
    st.sampled_from(CONSUMERS),
    st.lists(st.integers(0, ENTRIES - 1), min_size=1, max_size=2),
    st.booleans(),
)
# mostly cumulative acks (Cursor.mark_delete_run's runs), else any op
cumulative_busy = st.one_of(*[cumulative_op] * 6, odd_cumulative_op, st.tuples(st.just("PUBLISH")), op)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(cumulative_busy, min_size=20, max_size=120),
    st.sampled_from(["Exclusive", "Failover"]),
    st.booleans(),
    st.data(),
)
def test_cumulative_runs_give_the_same_as_plain_calls(ops, sub_type, implicit, data):
    """Long stretches of cumulative acks on an Exclusive or Failover subscription, which
    ``Cursor.mark_delete_run`` applies in one loop: acks below mark-delete and beyond the last
    entry (refused), of entries that do not exist, from consumers that are not connected (9, and
    2 and 3 on an Exclusive subscription, whose SUBSCRIBEs are refused), individual acks that
    leave acked ranges for a later cumulative ack to extend over, and timers falling due."""
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), ("SUBSCRIBE", 3), *ops], sub_type)
    batches = _cut(events, data, 3)
    both_ways(batches, EngineSettings(implicit_consumers=implicit))


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover"])
def test_a_cumulative_run_stops_where_the_plain_call_refuses_or_does_more(sub_type):
    """A run of cumulative acks after two staged individual acks, with, inside it: acks below
    mark-delete, beyond the last entry, with an ack set, of two ids, from a consumer that is not
    connected (all refused), one of an entry that does not exist (7:6, taken), and individual
    acks that leave an acked range, which the next cumulative ack extends over (mark-delete
    8:1 becomes 8:3 by acking 8:2)."""
    ops = [
        *[("PUBLISH",)] * 4,  # 7:0 to 7:4 and 8:0
        ("ACK", 1, [0]),
        ("ACK", 1, [1]),  # staged, then applied before the run: mark-delete 7:1
        *[("CUMULATIVE", 1, k) for k in range(3)],
        ("CUMULATIVE", 1, 1),
        ("CUMULATIVE", 1, 2, True),  # with an ack set it names 7:1, below mark-delete: refused
        ("CUMULATIVE", 1, [2, 3]),  # two ids: refused
        ("CUMULATIVE", 1, 7),
        ("CUMULATIVE", 9, 3),
        ("CUMULATIVE", 1, (7, 6)),
        ("CUMULATIVE", 1, 3),
        ("ACK", 1, [5]),
        *[("PUBLISH",)] * 3,  # 8:1 to 8:3
        ("ACK", 1, [8]),
        *[("CUMULATIVE", 1, k) for k in (6, 7, 8)],
        ("CUMULATIVE", 1, (7, 4)),
    ]
    events = _stream([("SUBSCRIBE", 1), ("SUBSCRIBE", 2), *ops], sub_type)
    both_ways([EventBatch.from_records(events)], EngineSettings())
    state = PartitionState(TOPIC, -1)
    result = state.apply(EventBatch.from_records(events), EngineSettings())
    assert [r.reason for r in result.rejects if r.reason != "exclusive_consumer_busy"] == [
        *["mark_delete_before_mark_delete"] * 3,
        "cumulative_ack_multiple_ids",
        "ack_beyond_last_published",
        "unknown_consumer",
        *["mark_delete_before_mark_delete"] * 2,
    ]
    assert state.cursors["s"].mark_delete == (8, 3)


# ---- the cursor alone ---------------------------------------------------------------------
call = st.lists(st.tuples(st.integers(10, 12), st.integers(-1, 7), st.booleans()), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(call, st.integers(0, 5)), max_size=25))
@example(  # 10:5 and 10:7 do not exist (ledger 10 ends at 10:3): one auto-advance per step
    [
        ([(10, 0, False), (10, 1, False)], 4),
        ([(10, 5, False), (10, 7, False)], 0),
        ([(10, 2, False), (10, 3, False)], 0),
        ([(10, 0, False)], 0),
        ([(10, 0, False)], 0),
    ]
)
def test_staged_calls_are_the_calls_one_by_one(calls):
    """``stage_ack`` per call (``stage_entry_acks`` for a call of whole entries, as
    ``PartitionState`` stages those) and one ``apply_staged`` equal ``ack`` per call, refusals
    included; a call that cannot be staged (a negative entry id, an entry past its ledger's end)
    applies what was staged, then itself, and staging waits until every acked entry exists."""
    ledgers = make_ledgers(4, 4, 4)
    published = [(10 + k // 4, k % 4) for k in range(12)]
    plain = Cursor.subscribe("Shared", "Earliest", ledgers, published[0])
    staged_cursor = Cursor.subscribe("Shared", "Earliest", ledgers, published[0])
    refused_plain: list[str] = []
    refused_staged: list[str] = []
    staged: list[Position] = []
    last: Position | None = None
    seen = 0
    for ids, grow in calls:
        seen = min(seen + grow, 11)
        lac = published[seen]  # the last entry grows as the calls go
        # entry -1 only in the first ledger: elsewhere above mark-delete the bitmap refuses it
        mids = [MessageId((lg if e >= 0 else 10, e), 0b01 if partial else None, 2) for lg, e, partial in ids]
        try:
            plain.ack(mids, ledgers, lac, False)
        except EngineRefusal as refusal:
            refused_plain.append(str(refusal))
        try:
            # as PartitionState stages: asks can_stage_acks when nothing is staged
            can = last is not None or staged_cursor.can_stage_acks(False, ledgers)
            if all(mid.ack_set is None for mid in mids):
                positions = [mid.position for mid in mids]
                ok = can and staged_cursor.stage_entry_acks(positions, dict(ledgers), lac, staged)
            else:
                ok = can and staged_cursor.stage_ack(mids, dict(ledgers), lac, staged)
        except EngineRefusal as refusal:
            ok = True  # refused after staging the positions before it
            refused_staged.append(str(refusal))
        if ok:
            last = lac
            continue
        if last is not None:
            staged_cursor.apply_staged(staged, ledgers, last)
        staged, last = [], None
        try:
            staged_cursor.ack(mids, ledgers, lac, False)
        except EngineRefusal as refusal:
            refused_staged.append(str(refusal))
    if last is not None:
        staged_cursor.apply_staged(staged, ledgers, last)
    assert refused_staged == refused_plain
    assert staged_cursor == plain
    assert staged_cursor.encode() == plain.encode()


@settings(max_examples=200, deadline=None)
@given(
    codes=st.lists(st.integers(-1, len(EVENT_TYPES) - 1), max_size=40),
    types=st.sets(st.integers(0, len(EVENT_TYPES) - 1)),
    ids=st.lists(st.integers(-3, 20), max_size=12, unique=True),
    values=st.lists(st.integers(-3, 20), max_size=40),
)
def test_membership_tables_answer_as_isin(codes, types, ids, values):
    """``type_table`` and ``among`` stand in for ``np.isin`` on type codes (-1: absent) and
    consumer ids, below and above ``among``'s few-ids threshold."""
    kinds = np.asarray(codes, dtype=np.int8)
    assert np.array_equal(type_table(sorted(types))[kinds], np.isin(kinds, sorted(types)))
    column = np.asarray(values, dtype=np.int64)
    assert np.array_equal(among(column, ids), np.isin(column, np.asarray(ids, dtype=np.int64)))
