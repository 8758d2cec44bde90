"""The apply UDF body without Spark: Arrow in, state and projection differences out.

Successive micro-batches are applied the way the ingest job does it: the state rows one batch
returns are the state the next batch reads, and the projection rows are upserts and deletes by
key. Replaying those differences must rebuild exactly the engine's ranges and batch state.
"""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Cursor, EngineSettings, EventBatch, Ledgers, MessageId, PartitionState
from engine.subscription import REDELIVER, Changes, Consumer, Subscription, SubscriptionSettings
from jobs.bench.generate import MALFORMED_KEY, iter_events
from schemas.events import EVENT_ARROW_SCHEMA
from schemas.udf import (
    BATCH,
    CONSUMER,
    CURSOR,
    DELETE,
    LATE_RECEIPT,
    LEDGER,
    OUTPUT_KEY_COLUMNS,
    OUTPUT_UNPACKING,
    PACKED_EVENT_COLUMNS,
    PACKED_EVENTS,
    PARTITION,
    PENDING,
    PRODUCER,
    RANGE,
    RECEIPT,
    REDELIVERY,
    REJECT,
    STATE_INPUT,
    UPSERT,
)
from tests.engine.conftest import make_ledgers
from tests.udfs.output_rows import every_kind
from udfs.apply import (
    OUTPUT_ARROW,
    PACKED_ARROW,
    OutputRows,
    Repeated,
    apply_bucket,
    apply_partition,
    emit_range_changes,
    emit_subscription_changes,
    events_to_batch,
)
from udfs.trim import trim_partition

EVENTS_ARROW = pa.schema([*EVENT_ARROW_SCHEMA, pa.field("_row", pa.int64())])
STATE_ARROW = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("kind", pa.string()),
        pa.field("subscription", pa.string()),
        pa.field("state", pa.binary()),
        pa.field("last_seq", pa.int64()),
        pa.field("last_event_time", pa.int64()),
        pa.field("subscription_state", pa.binary()),
        pa.field("producers_state", pa.binary()),
        pa.field("first_retained_ledger", pa.int64()),
    ]
)


def test_state_arrow_schema_matches_the_spark_one():
    assert [f.name for f in STATE_ARROW] == [f.name for f in STATE_INPUT.fields]


def _one_partition(records: list[dict]) -> tuple[str, int, list[dict]]:
    first = records[0]
    key = (first["topic"], first.get("partition", -1))
    return key[0], key[1], [r for r in records if (r["topic"], r.get("partition", -1)) == key]


class _Tables:
    """The warehouse of one topic partition as the ingest keeps it: the state rows the next
    batch reads, and the projections maintained from upsert/delete rows by key (as MERGE)."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.state_rows: dict[tuple[str, str | None], dict] = {}
        self.ranges: dict[tuple, tuple] = {}
        self.batches: dict[tuple, tuple] = {}
        self.consumers: dict[tuple, tuple] = {}
        self.pending: dict[tuple, int] = {}
        self.redeliveries: dict[tuple, tuple] = {}
        self.ledgers: dict[int, int] = {}
        self.rejects = 0
        self.pending_deletes = 0  # pending_acks deletes, and those of a key the table lacked
        self.pending_deletes_of_nothing = 0

    def state(self, first_retained_ledger: int | None = None) -> pa.Table:
        rows = [
            {**row, "first_retained_ledger": first_retained_ledger if kind == PARTITION else None}
            for (kind, _), row in self.state_rows.items()
        ]
        return pa.Table.from_pylist(rows, schema=STATE_ARROW)

    def write(self, out: list[dict]) -> None:
        for row in out:
            if row["kind"] == PARTITION:
                self.state_rows[(PARTITION, None)] = {
                    "topic": self.topic,
                    "partition": self.partition,
                    "kind": PARTITION,
                    "subscription": None,
                    "state": row["ledgers"],
                    "last_seq": row["last_seq"],
                    "last_event_time": row["last_event_time"],
                    "subscription_state": None,
                }
            elif row["kind"] == CURSOR and row["state_changed"]:
                self.state_rows[(CURSOR, row["subscription"])] = {
                    "topic": self.topic,
                    "partition": self.partition,
                    "kind": CURSOR,
                    "subscription": row["subscription"],
                    "state": row["state"],
                    "last_seq": None,
                    "last_event_time": None,
                    "subscription_state": row["subscription_state"],
                }
            elif row["kind"] == RANGE:
                k = (row["subscription"], row["ledger_id"], row["lower_entry_id"])
                if row["op"] == DELETE:
                    self.ranges.pop(k, None)  # MERGE: deleting a missing key is a no-op
                else:
                    self.ranges[k] = (row["upper_entry_id"],)
            elif row["kind"] == BATCH:
                k = (row["subscription"], row["ledger_id"], row["entry_id"])
                if row["op"] == DELETE:
                    self.batches.pop(k, None)
                else:
                    self.batches[k] = (row["batch_size"], tuple(row["ack_set"]), row["acked_count"])
            elif row["kind"] == CONSUMER:
                self.consumers[(row["subscription"], row["consumer_id"])] = (
                    row["connected"],
                    row["unacked_messages"],
                )
            elif row["kind"] == PENDING:
                k = (row["subscription"], row["consumer_id"], row["ledger_id"], row["entry_id"])
                if row["op"] == DELETE:
                    self.pending_deletes += 1
                    if self.pending.pop(k, None) is None:  # a no-op, as in a MERGE
                        self.pending_deletes_of_nothing += 1
                else:
                    self.pending[k] = row["redelivery_count"]
            elif row["kind"] == REDELIVERY:
                k = (row["subscription"], row["ledger_id"], row["entry_id"])
                if row["op"] == DELETE:
                    self.redeliveries.pop(k, None)  # also removes delivered history rows, as MERGE does
                else:
                    self.redeliveries[k] = (row["reason"], row["redelivery_count"], row["delivered_at"])
            elif row["kind"] == LEDGER:
                if row["op"] == DELETE:
                    self.ledgers.pop(row["ledger_id"], None)
                else:
                    self.ledgers[row["ledger_id"]] = row["last_entry_id"]
            elif row["kind"] == REJECT:
                self.rejects += 1

    def assert_holds(self, whole: PartitionState) -> None:
        """Every table is exactly the engine's ``whole`` state."""
        assert set(whole.cursors) == {sub for kind, sub in self.state_rows if kind == CURSOR}
        assert Ledgers.decode(self.state_rows[(PARTITION, None)]["state"]) == whole.ledgers
        assert self.ledgers == dict(whole.ledgers)
        expected_ranges, expected_batches = {}, {}
        for name, cursor in whole.cursors.items():
            assert Cursor.decode(self.state_rows[(CURSOR, name)]["state"]) == cursor
            for ledger, firsts, lasts in cursor.acked.runs():
                for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
                    expected_ranges[(name, ledger, first - 1)] = (last,)
            for pos, batch in cursor.batch_ack_rows():
                expected_batches[(name, *pos)] = (batch.batch_size, tuple(batch.words), batch.acked_count)
        assert self.ranges == expected_ranges
        assert self.batches == expected_batches
        # the consumer tables, rebuilt from differences, are the engine's consumer state
        connected = {k: v[1] for k, v in self.consumers.items() if v[0]}
        assert connected == {
            (name, cid): c.unacked_messages
            for name, sub in whole.subscriptions.items()
            for cid, c in sub.consumers.items()
        }
        assert self.pending == {
            (name, cid, *pos): p.redelivery_count
            for name, sub in whole.subscriptions.items()
            for cid, c in sub.consumers.items()
            for pos, p in c.pending.items()
        }
        due = {k: v[:2] for k, v in self.redeliveries.items() if v[2] is None}
        assert due == {
            (name, *pos): (r.reason, r.redelivery_count)
            for name, sub in whole.subscriptions.items()
            for pos, r in sub.redeliveries.items()
        }
        for name, sub in whole.subscriptions.items():
            encoded = self.state_rows[(CURSOR, name)]["subscription_state"]
            assert (Subscription.decode(encoded) if encoded else Subscription()).encode() == sub.encode()


def _unpacked(packed: pa.Table) -> pa.Table:
    """``PACKED_ARROW`` rows as ``OUTPUT_ARROW`` rows, as the ingest unpacks them in the JVM
    (``jobs.ingest.batch.unpacked_output``): each column is its slot in the rows of the kinds
    that fill it there."""
    kinds = packed.column("kind")
    unpacking = {name: (slot, fill) for name, slot, fill in OUTPUT_UNPACKING}
    arrays = []
    for field in OUTPUT_ARROW:
        if field.name in OUTPUT_KEY_COLUMNS:
            arrays.append(packed.column(field.name))
            continue
        slot, fill = unpacking[field.name]
        column = packed.column(slot)
        if fill:
            column = pc.if_else(pc.is_in(kinds, pa.array(fill)), column, pa.scalar(None, field.type))
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=OUTPUT_ARROW)


def _applied(key: tuple, events: pa.Table, state: pa.Table, settings: EngineSettings) -> pa.Table:
    """``apply_partition``'s rows; the same call packed must give the same rows in slots."""
    wide = apply_partition(key, events, state, settings)
    packed = apply_partition(key, events, state, settings, packed=True)
    assert packed.schema.equals(PACKED_ARROW)
    assert _unpacked(packed).equals(wide)
    return wide


def test_every_kind_packs_every_column_it_fills_into_a_slot_of_its_own():
    """A row of each kind with all its columns set (``KIND_COLUMNS``): packed, then unpacked as
    the ingest does, it is the wide row, so no two columns of a kind share a slot."""
    wide, packed = every_kind(packed=False), every_kind(packed=True)
    assert _unpacked(packed.table()).equals(wide.table())
    with pytest.raises(ValueError, match="no column 'ack_set'"):
        packed.add(PENDING, UPSERT, 1, ack_set=[[1]])


def _event_table(events: list[dict], first_row: int) -> pa.Table:
    names = [f.name for f in EVENT_ARROW_SCHEMA]
    rows = [{**{n: e.get(n) for n in names}, "_row": i} for i, e in enumerate(events, first_row)]
    return pa.Table.from_pylist(rows, schema=EVENTS_ARROW)


def _workload(events: int = 3000, seed: int = 5) -> tuple[str, int, list[dict]]:
    records = [
        r
        for r in iter_events(events=events, topics=1, partitions=1, subscriptions_per_topic=4, seed=seed)
        if MALFORMED_KEY not in r
    ]
    return _one_partition(records)


def test_batches_of_differences_rebuild_the_engine_state_exactly():
    topic, partition, events = _workload()
    settings = EngineSettings(acknowledgment_at_batch_index_level_enabled=True)
    tables = _Tables(topic, partition)
    key = (pa.scalar(topic), pa.scalar(partition, pa.int32()))
    for start in range(0, len(events), 700):
        table = _event_table(events[start : start + 700], start)
        tables.write(_applied(key, table, tables.state(), settings).to_pylist())

    whole = PartitionState(topic, partition)
    whole.apply(EventBatch.from_records(events), settings)
    tables.assert_holds(whole)
    assert tables.pending and tables.consumers, "the workload must dispatch to Shared consumers"
    # a pending ack dispatched and acked within one batch is never a row: no delete names it
    assert tables.pending_deletes and not tables.pending_deletes_of_nothing
    assert tables.ranges, "the workload must leave ack holes to make this test meaningful"


def _cogrouped(events: pa.Table) -> pa.Table:
    """Events as the ingest's cogroup sends them: the key columns and ``PACKED_EVENTS``."""
    flat = events.select(list(PACKED_EVENT_COLUMNS)).combine_chunks()
    struct = pa.StructArray.from_arrays([c.chunk(0) for c in flat.columns], fields=list(flat.schema))
    return pa.table({"topic": events["topic"], "partition": events["partition"], PACKED_EVENTS: struct})


@pytest.mark.parametrize("shuffled", [False, True], ids=["in seq order", "rows out of seq order"])
def test_a_bucket_of_partitions_gives_the_rows_each_partition_gives_alone(shuffled: bool):
    """``apply_bucket`` over several topic partitions' events interleaved (a partitioned topic
    and one without partitions; subscription and producer names shared between them), and
    their state rows in no order, gives the rows of one ``apply_partition`` call per
    partition, each partition's in the same order; a partition with state and no events in
    the batch gives none, as its own group did. Shuffled, each partition's rows reach the UDF
    out of seq order, which both put in order."""
    records = [
        r
        for r in iter_events(events=4000, topics=2, partitions=2, subscriptions_per_topic=3, seed=8)
        if MALFORMED_KEY not in r
    ]
    keys = sorted({(r["topic"], r["partition"]) for r in records})
    assert len(keys) >= 3 and -1 in {p for _, p in keys}
    settings = EngineSettings()
    first, second = records[:2000], [r for r in records[2000:] if (r["topic"], r["partition"]) != keys[-1]]
    tables = {key: _Tables(*key) for key in keys}
    for key in keys:
        mine = [r for r in first if (r["topic"], r["partition"]) == key]
        scalars = (pa.scalar(key[0]), pa.scalar(key[1], pa.int32()))
        tables[key].write(_applied(scalars, _event_table(mine, 0), tables[key].state(), settings).to_pylist())
    # the partitions' state rows interleaved at random, each partition's in its own order (the
    # order the state rows come in is the order of the cursors' rows; Spark gives no order)
    states = pa.concat_tables([tables[key].state() for key in keys])
    owner = np.repeat(np.arange(len(keys)), [tables[key].state().num_rows for key in keys])
    mixed = np.random.default_rng(2).permutation(owner)  # whose row each place holds
    take = np.empty(owner.size, dtype=np.int64)
    for k in range(len(keys)):
        take[mixed == k] = np.flatnonzero(owner == k)
    states = states.take(pa.array(take))
    events = _event_table(second, 2000)
    if shuffled:
        events = events.take(pa.array(np.random.default_rng(3).permutation(events.num_rows)))

    expected = []
    for key in keys[:-1]:
        where = pc.and_(pc.equal(events["topic"], key[0]), pc.equal(events["partition"], key[1]))
        mine = events.filter(where)
        scalars = (pa.scalar(key[0]), pa.scalar(key[1], pa.int32()))
        expected.append(apply_partition(scalars, mine, tables[key].state(), settings, packed=True))
    got = apply_bucket((pa.scalar(7),), _cogrouped(events), states, settings)
    assert got.schema.equals(PACKED_ARROW)
    rows = pa.concat_tables(expected).to_pylist()
    assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, rows))
    assert {(r["topic"], r["partition"]) for r in rows} == set(keys[:-1])

    def in_order(table_rows: list[dict]) -> dict[tuple[str, int], list[str]]:
        by_key: dict[tuple[str, int], list[str]] = {}
        for r in table_rows:
            by_key.setdefault((r["topic"], r["partition"]), []).append(repr(r))
        return by_key

    assert in_order(got.to_pylist()) == in_order(rows)
    assert apply_bucket((pa.scalar(7),), _cogrouped(events.slice(0, 0)), states, settings).num_rows == 0


def _numbered(topic: str, partition: int, batch: list[dict], seq: int) -> list[dict]:
    """``batch``'s events on ``topic``/``partition``, numbered from ``seq + 1`` (seq, event id
    and event time)."""
    where = {"topic": topic, "partition": partition}
    return [
        {**where, **event, "seq": n, "event_id": f"e{n}", "event_time": 1_000 + n}
        for n, event in enumerate(batch, seq + 1)
    ]


def test_a_redeliver_all_deletes_only_the_pending_acks_the_table_holds():
    """A redeliver-all takes a consumer's pending acks as columns (``Changes.taken``); of those,
    the ones dispatched in the same batch were never rows, and only the others are deleted."""
    topic, partition = "persistent://public/default/t", -1
    sub = {"topic": topic, "partition": partition, "subscription": "s", "consumer_id": 1}
    first = [
        *({"type": "PUBLISH", "ledger_id": 3, "entry_id": e} for e in range(10)),
        {**sub, "type": "SUBSCRIBE", "consumer_name": "c1", "sub_type": "Shared"},
        *({**sub, "type": "DISPATCH", "ledger_id": 3, "entry_id": e} for e in range(5)),
    ]
    second = [
        *({**sub, "type": "DISPATCH", "ledger_id": 3, "entry_id": e} for e in range(5, 10)),
        {**sub, "type": "REDELIVER", "message_ids": []},
    ]
    tables = _Tables(topic, partition)
    key = (pa.scalar(topic), pa.scalar(partition, pa.int32()))
    whole, seq = PartitionState(topic, partition), 0
    for batch in (first, second):
        events = _numbered(topic, partition, batch, seq)
        seq += len(batch)
        out = _applied(key, _event_table(events, seq), tables.state(), EngineSettings()).to_pylist()
        assert not [r for r in out if r["kind"] == REJECT]
        tables.write(out)
        whole.apply(EventBatch.from_records(events), EngineSettings())
    deletes = [(r["ledger_id"], r["entry_id"]) for r in out if r["kind"] == PENDING and r["op"] == DELETE]
    assert deletes == [(3, e) for e in range(5)]
    assert tables.pending_deletes == 5 and not tables.pending_deletes_of_nothing
    tables.assert_holds(whole)


def test_the_cursor_row_shows_the_type_stats_shows():
    """``cursors.sub_type`` is what ``stats`` prints (``PersistentSubscription.getTypeString``):
    "None" from a LOAD_TOPIC until a consumer joins, kept across batches by the encoded
    subscription although it holds nothing else; then the new consumer's type."""
    topic, partition = "persistent://public/default/t", -1
    common = {"topic": topic, "partition": partition, "subscription": "s"}
    batches = [
        [
            {"type": "PUBLISH", "ledger_id": 3, "entry_id": 0},
            {**common, "type": "SUBSCRIBE", "consumer_id": 1, "consumer_name": "c1", "sub_type": "Shared"},
            {**common, "type": "CLOSE_CONSUMER", "consumer_id": 1},
        ],
        [{"type": "LOAD_TOPIC"}],
        [{"type": "PUBLISH", "ledger_id": 3, "entry_id": 1}],
        [{**common, "type": "SUBSCRIBE", "consumer_id": 2, "consumer_name": "c2", "sub_type": "Failover"}],
    ]
    tables = _Tables(topic, partition)
    key = (pa.scalar(topic), pa.scalar(partition, pa.int32()))
    shown, seq = [], 0
    for batch in batches:
        events = _numbered(topic, partition, batch, seq)
        seq += len(batch)
        out = apply_partition(key, _event_table(events, seq), tables.state(), EngineSettings()).to_pylist()
        assert not [r for r in out if r["kind"] == REJECT]
        tables.write(out)
        shown.append([(r["sub_type"], r["state_changed"]) for r in out if r["kind"] == CURSOR])
    assert shown == [[("Shared", True)], [("None", True)], [("None", False)], [("Failover", True)]]


def test_a_requested_trim_is_applied_before_the_batch_and_composes_with_compacts_trim():
    """The ingest applies a requested ledger trim before the batch's events. Its differences are
    against the state it read; written over the tables after ``ackstate compact`` trimmed the
    same partition meanwhile (the race jobs.compact.compaction allows), they must still give exactly the
    engine's state: the trim only deletes projection rows, which the batch deletes too or never
    names."""
    topic, partition, events = _workload(20_000, seed=5)
    settings = EngineSettings()
    key = (pa.scalar(topic), pa.scalar(partition, pa.int32()))
    half = len(events) // 2
    read = _Tables(topic, partition)
    read.write(_applied(key, _event_table(events[:half], 0), read.state(), settings).to_pylist())
    whole = PartitionState(topic, partition)
    whole.apply(EventBatch.from_records(events[:half]), settings)
    ledger_ids = [lid for lid, _ in whole.ledgers]
    first_retained = ledger_ids[len(ledger_ids) // 2]
    trimmed = whole.trim_ledgers(first_retained)
    assert trimmed.removed and trimmed.advanced, "the trim must delete ledgers and move cursors"
    whole.apply(EventBatch.from_records(events[half:]), settings)

    second = _event_table(events[half:], half)
    # the ingest alone, and the ingest writing after compact's trim of the same state
    alone = copy.deepcopy(read)
    after_compact = copy.deepcopy(read)
    after_compact.write(trim_partition(key, read.state(first_retained)).to_pylist())
    assert after_compact.ranges != read.ranges
    out = _applied(key, second, read.state(first_retained), settings).to_pylist()
    alone.write(out)
    after_compact.write(out)
    alone.assert_holds(whole)
    after_compact.assert_holds(whole)

    # without the request, the batch would write back what compact deleted
    stale = copy.deepcopy(read)
    stale.write(trim_partition(key, read.state(first_retained)).to_pylist())
    stale.write(apply_partition(key, second, read.state(), settings).to_pylist())
    assert Ledgers.decode(stale.state_rows[(PARTITION, None)]["state"]) != whole.ledgers


def test_receipts_and_producers_across_batches_equal_the_engine_applied_whole():
    """SENDs answered in a later batch come back as late receipts (row -1) keyed by seq; with
    the producers' state carried in ``producers_state``, the rows equal one whole apply."""
    topic = "persistent://public/default/udf-dedup"
    events = []
    for k in range(60):
        producer = f"p{k % 3}"
        events.append({"type": "SEND", "producer_name": producer, "sequence_id": k // 3 - (k % 7 == 0)})
        if k % 4 == 3:
            events.append(
                {
                    "type": "PUBLISH",
                    "ledger_id": 10,
                    "entry_id": k,
                    "producer_name": producer,
                    "sequence_id": k // 3 - (k % 7 == 0),
                }
            )
        if k % 17 == 16:
            events.append({"type": "SEND_FAILED"})
    names = [f.name for f in EVENT_ARROW_SCHEMA]
    events = [
        {
            **{n: None for n in names},
            "event_id": f"e{i}",
            "seq": i,
            "event_time": i,
            "topic": topic,
            "partition": -1,
            "num_messages": 1,
            "marker": False,
            **e,
        }
        for i, e in enumerate(events, 1)
    ]
    settings = EngineSettings(broker_deduplication_enabled=True)
    key = (pa.scalar(topic), pa.scalar(-1, pa.int32()))
    partition_row: dict = {}
    receipts: dict[int, dict] = {}
    producers: dict[str, tuple] = {}
    late = 0
    for start in range(0, len(events), 9):
        chunk = [{**e, "_row": i} for i, e in enumerate(events[start : start + 9], start)]
        state = pa.Table.from_pylist([partition_row] if partition_row else [], schema=STATE_ARROW)
        out = _applied(key, pa.Table.from_pylist(chunk, schema=EVENTS_ARROW), state, settings)
        for row in out.to_pylist():
            if row["kind"] == PARTITION:
                partition_row = {
                    "topic": topic,
                    "partition": -1,
                    "kind": PARTITION,
                    "state": row["ledgers"],
                    "last_seq": row["last_seq"],
                    "last_event_time": row["last_event_time"],
                    "producers_state": row["producers_state"],
                }
            elif row["kind"] == PRODUCER:
                producers[row["producer_name"]] = (
                    row["highest_sequence_pushed"],
                    row["highest_sequence_persisted"],
                )
            elif row["kind"] == RECEIPT:  # appended by the ingest, with the SEND's event_id
                assert row["seq"] not in receipts and row["event_id"] == f"e{row['seq']}"
                answer = (row["ledger_id"], row["entry_id"], row["error"])
                receipts[row["seq"]] = {"status": row["dedup_status"], "answer": answer}
            elif row["kind"] == LATE_RECEIPT:  # the ingest's MERGE by seq updates only the answer
                assert receipts[row["seq"]]["answer"] == (None, None, None)
                receipts[row["seq"]]["answer"] = (row["ledger_id"], row["entry_id"], row["error"])
                late += 1
    whole = PartitionState(topic, -1)
    result = whole.apply(EventBatch.from_records(events), settings)
    expected = {
        r.seq: {"status": r.status, "answer": (*(r.position or (None, None)), r.error)}
        for r in result.sends.receipts
    }
    assert receipts == expected
    assert producers == {n: (p.pushed, p.persisted) for n, p in whole.producers.by_name.items()}
    statuses = {r["status"] for r in receipts.values()}
    assert statuses == {"NotDup", "Dup", "Unknown"}, "the workload must exercise every status"
    assert late, "some sends must be answered in a later batch"
    assert any(r["answer"][2] == "PersistenceError" for r in receipts.values() if r["status"] == "NotDup")


def test_output_rows_from_arrays_are_the_rows_from_lists():
    """``OutputRows`` keeps numpy columns and repeated values as they are; the table is the one
    Python lists give."""
    from_lists, from_arrays = OutputRows("persistent://t/ns/x", 3), OutputRows("persistent://t/ns/x", 3)
    for out, cols in ((from_lists, list), (from_arrays, np.asarray)):
        out.add(REJECT, "upsert", 2, row=[7, 8], reason=["a", "b"], detail=["x", None])
        out.add(
            PENDING,
            DELETE,
            3,
            subscription=["s"] * 3 if cols is list else Repeated("s", 3),
            consumer_id=[1, 1, 2],
            ledger_id=cols([5, 5, 6]),
            entry_id=cols([0, 4, 1]),
        )
        out.add(LEDGER, "upsert", 1, ledger_id=cols([9]), last_entry_id=[3], entries=cols([4]))
    expected = from_lists.table()
    assert from_arrays.table().to_pylist() == expected.to_pylist()
    assert from_arrays.table().equals(expected)
    assert from_arrays.table().schema == expected.schema


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["DISPATCH", "DISPATCH", "NACK", "REDELIVER", "REDELIVER_ALL"]),
            st.sampled_from([1, 2, 3]),
            st.integers(0, 17),
        ),
        max_size=60,
    ),
    st.lists(st.sampled_from([1, 2, 3]), max_size=3),
)
def test_pending_and_redelivery_rows_are_every_change_in_key_order(ops, last_redeliver_alls):
    """The pending-ack and redelivery rows, emitted from per-consumer sets, the columns of
    redeliver-alls (``Changes.taken`` and ``Changes.bulk``, still columns when nothing follows
    them) and sorted columns, are what one lookup per changed (consumer, position) of the eager
    path (every redeliver-all written into the dictionaries at once) in ``sorted`` order gives."""
    cursor = Cursor("Shared", (5, 1))
    settings_ = SubscriptionSettings(max_unacked_messages_per_consumer=0)
    sub, eager = Subscription(), Subscription()
    for s in (sub, eager):
        for cid in (1, 2, 3):
            s.subscribe(cursor, Consumer(cid, f"c{cid}", 0, 0, 0), "Shared", cid, settings_)
        s.changes = Changes()
    redeliver_alls = [("REDELIVER_ALL", cid, 0) for cid in last_redeliver_alls]
    for now, (kind, cid, entry) in enumerate([*ops, *redeliver_alls], start=1_000):
        pos = (5 + entry // 6, entry % 6)
        for s in (sub, eager):
            if kind == "DISPATCH":
                s.dispatch(cursor, cid, pos, 1, 0, now, settings_)
            elif kind == "NACK":
                s.nack(cursor, cid, [pos], now)
            else:
                s.redeliver(
                    cursor, cid, None if kind == "REDELIVER_ALL" else [pos], now, REDELIVER, settings_
                )
        assert eager.redeliveries is not None  # reading them materializes a redeliver-all at once
    assert not eager.changes.bulk
    pending = eager.changes.pending_pairs()
    assert sub.changes.pending_pairs() == pending
    redeliveries = dict(eager.changes.redeliveries)
    assert sub.changes.all_redeliveries() == redeliveries
    out = OutputRows("persistent://t/ns/x", 0)
    emit_subscription_changes(out, "s", cursor, sub, EngineSettings())
    rows = out.table().to_pylist()
    expected_pending = []
    for cid, pos in sorted(pending):
        held = sub.consumers[cid].pending.get(pos)
        expected_pending.append((UPSERT if held else DELETE, cid, *pos, held.dispatched_at if held else None))
    upserts = [r for r in expected_pending if r[0] == UPSERT]
    assert [
        (r["op"], r["consumer_id"], r["ledger_id"], r["entry_id"], r["dispatched_at"])
        for r in rows
        if r["kind"] == PENDING
    ] == upserts + [r for r in expected_pending if r[0] == DELETE]
    expected = sorted(redeliveries.items())
    kept = [
        (UPSERT, *pos, r.consumer_id, r.reason, r.requested_at, r.due_at, r.redelivery_count, r.dead_letter)
        for pos, r in expected
        if r is not None
    ]
    gone = [(DELETE, *pos, None, None, None, None, None, None) for pos, r in expected if r is None]
    assert [
        (
            r["op"],
            r["ledger_id"],
            r["entry_id"],
            r["consumer_id"],
            r["reason"],
            r["requested_at"],
            r["due_at"],
            r["redelivery_count"],
            r["dead_letter"],
        )
        for r in rows
        if r["kind"] == REDELIVERY
    ] == kept + gone


def _concatenated(out: OutputRows, schema: pa.Schema = OUTPUT_ARROW) -> pa.Table:
    """``out.table()`` as it was built before shared null buffers and numpy assembly: every
    chunk converted by ``pa.array`` / ``pa.nulls`` / ``pa.repeat`` and concatenated. ``schema``:
    ``out``'s (``PACKED_ARROW`` for a packed one)."""

    def arrow(chunk: object, type_: pa.DataType) -> pa.Array:
        if isinstance(chunk, int):
            return pa.nulls(chunk, type=type_)
        if isinstance(chunk, Repeated):
            return pa.repeat(pa.scalar(chunk.value, type=type_), chunk.n)
        if isinstance(chunk, pa.Array):
            return chunk.cast(type_)
        return pa.array(chunk, type=type_)

    n = out.size
    arrays = []
    for field in schema:
        if field.name == "topic":
            arrays.append(pa.array([out.topic] * n, type=field.type))
        elif field.name == "partition":
            arrays.append(pa.array([out.partition] * n, type=field.type))
        else:
            chunks = [*out.columns[field.name], n - out.filled[field.name]]
            parts = [arrow(c, field.type) for c in chunks if not isinstance(c, int) or c > 0]
            arrays.append(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))
    return pa.Table.from_arrays(arrays, schema=schema)


_INTS = st.one_of(st.none(), st.integers(-(2**40), 2**40))


# per kind, its columns of each type the test fills: int64, bool, string, int32, int64 again
_KIND_COLUMNS = {
    CONSUMER: ("consumer_id", "connected", "consumer_name", "priority_level", "subscribed_at"),
    REDELIVERY: ("consumer_id", "dead_letter", "reason", "redelivery_count", "delivered_at"),
}


@pytest.mark.parametrize("packed", [False, True])
@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([CONSUMER, REDELIVERY]),
            st.integers(1, 6),
            st.sampled_from(["list", "numpy", "arrow", "repeated"]),
            st.data(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_table_is_the_concatenation_of_its_chunks(packed, adds):
    """``OutputRows.table`` (all-null columns on one shared zero buffer, fixed-width columns
    assembled in numpy) equals converting every chunk and concatenating, nulls and types
    included; packed or not."""
    out = OutputRows("persistent://t/ns/x", 3, packed=packed)
    for kind, n, form, data in adds:
        ints = data.draw(st.lists(_INTS, min_size=n, max_size=n))
        flags = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
        long_, flag, text, int_, other = _KIND_COLUMNS[kind]
        if form == "list":
            values = {long_: ints, flag: flags, text: [str(i) for i in ints]}
        elif form == "numpy":
            column = np.asarray([i or 0 for i in ints], dtype=np.int64)
            values = {long_: column, flag: np.asarray(flags), int_: column % 7}
        elif form == "arrow":
            values = {long_: pa.array(ints, type=pa.int64()), other: pa.array(ints)}
        else:
            values = {long_: Repeated(ints[0], n), "subscription": Repeated("s", n)}
        out.add(kind, UPSERT, n, **values)
    table = out.table()
    expected = _concatenated(out, PACKED_ARROW if packed else OUTPUT_ARROW)
    assert table.to_pylist() == expected.to_pylist()
    assert table.equals(expected)


def test_values_the_fast_paths_do_not_take_convert_as_arrow_converts_them():
    """Small lists of plain ints and bools go straight into numpy; a float, a numpy scalar or a
    null among them takes ``pa.array``, as every chunk did before, with the same result."""
    out = OutputRows("persistent://t/ns/x", 3)
    out.add(
        CONSUMER,
        "upsert",
        2,
        consumer_id=[1.0, 2],
        connected=[np.True_, False],
        max_redeliver_count=[3, None],
    )
    out.add(CONSUMER, "upsert", 1, consumer_id=[np.int64(7)], priority_level=[np.bool_(True)])
    out.add(REDELIVERY, "upsert", 2, consumer_id=[4, 5], dead_letter=[True, False], redelivery_count=[1, 2])
    assert out.table().equals(_concatenated(out))
    # an int the column cannot hold fails the batch: pa.array raises ArrowInvalid, numpy OverflowError
    with pytest.raises((OverflowError, pa.ArrowInvalid)):
        overflowing = OutputRows("persistent://t/ns/x", 3)
        overflowing.add(PENDING, "upsert", 1, redelivery_count=[2**31])
        overflowing.add(PENDING, "upsert", 1, redelivery_count=[1])
        overflowing.table()


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=60),
    then=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 40)), max_size=60),
    before_exists=st.booleans(),
)
def test_range_changes_as_rows_are_the_range_changes_as_columns(first, then, before_exists):
    """A few ranges are compared as Python tuples, many as sorted key columns: the same upserts
    and deletes, in the same order, for cursors that gain, lose (a mark-delete moving past them)
    and split ranges."""
    ledgers = make_ledgers(41, 41, 41)
    lac = (12, 40)

    def acked(cursor: Cursor, positions: list[tuple[int, int]]) -> Cursor:
        cursor.ack([MessageId((10 + lid, eid)) for lid, eid in positions], ledgers, lac, False)
        return cursor

    before = acked(Cursor("Shared"), first) if before_exists else None
    after = acked(copy.deepcopy(before) if before is not None else Cursor("Shared"), then)
    tables = []
    for rows_up_to in (10**9, -1):
        out = OutputRows("persistent://t/ns/x", -1)
        emit_range_changes(out, "s", before, after, rows_up_to=rows_up_to)
        tables.append(out.table())
    assert tables[0].equals(tables[1])


def test_a_slice_of_a_converted_bucket_is_the_conversion_of_its_rows():
    """``EventBatch.slice`` of a bucket's conversion holds what ``events_to_batch`` of just those
    rows holds, field by field: the same arrays, message ids and ack-set words, and the
    subscription and producer codes numbered as that slice alone numbers them, so the engine
    meets a partition's subscriptions in the same order (``apply_bucket``)."""
    records = [
        r
        for r in iter_events(events=3000, topics=2, partitions=2, subscriptions_per_topic=3, seed=5)
        if MALFORMED_KEY not in r
    ]
    table = _event_table(records, 0).select(list(PACKED_EVENT_COLUMNS))
    whole = events_to_batch(table)
    assert whole.msg_ledger.size > table.num_rows // 4 and whole.ackset_words.size > 0
    assert whole.sends is not None and len(whole.sends.producer_names) > 1
    rng = np.random.default_rng(4)
    cuts = [(0, 0), (0, table.num_rows)]
    cuts += [tuple(sorted(rng.integers(0, table.num_rows, 2).tolist())) for _ in range(20)]
    for lo, hi in cuts:
        alone, sliced = events_to_batch(table.slice(lo, hi - lo)), whole.slice(lo, hi)
        for name in EventBatch.__slots__:
            a, b = getattr(alone, name), getattr(sliced, name)
            if name == "sends":
                for field in type(a).__slots__:
                    x, y = getattr(a, field), getattr(b, field)
                    assert x == y if isinstance(x, list) else np.array_equal(x, y), (lo, hi, field)
                    assert isinstance(x, list) or x.dtype == y.dtype, (lo, hi, field)
            elif isinstance(a, list):
                assert a == b, (lo, hi, name)
            else:
                assert a.dtype == b.dtype and np.array_equal(a, b), (lo, hi, name)
