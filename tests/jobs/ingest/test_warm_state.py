"""A batch that takes its state from the last batch's (``jobs.ingest.warm``) writes the tables a
batch that reads Delta writes, and stops taking it as soon as another writer commits."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.bench.generate import generate
from jobs.ingest.warm import (
    REMOVED,
    WarmState,
    changed_state,
    of_partitions,
    overlay,
    overlay_table,
    removed_cursors,
    state_arrow,
    state_changes_table,
)
from jobs.platform.tables import local_frame, table_path
from schemas.udf import APPLY_OUTPUT, CURSOR, DELETE, PARTITION, RANGE, STATE_INPUT, UPSERT
from tests.jobs.warehouse import LINEAGE, assert_same_tables, cached_rdds, cached_rdds_when, ingest, snapshot
from udfs.apply import OUTPUT_ARROW

FILES = 3


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    """Three micro-batches of a generated mix, each touching every topic partition."""
    source = tmp_path_factory.mktemp("warm") / "events"
    generate(source, events=600, topics=2, partitions=2, subscriptions_per_topic=2, seed=23, files=FILES)
    return source


@pytest.fixture(scope="module")
def read_every_batch(spark, events, tmp_path_factory) -> dict[str, list]:
    warehouse = tmp_path_factory.mktemp("cold") / "warehouse"
    writer = ingest(spark, events, warehouse, warm_state=False)
    assert writer.warm is None
    return snapshot(warehouse, exclude=LINEAGE)


def test_batches_on_kept_state_write_the_tables_of_batches_that_read(
    spark, events, read_every_batch, tmp_path
):
    writer = ingest(spark, events, tmp_path / "warehouse")
    assert writer.warm is not None
    assert writer.warm.hits == FILES - 1  # every batch after the first
    assert_same_tables(snapshot(tmp_path / "warehouse", exclude=LINEAGE), read_every_batch)


def _drop_one_partitions_cursors(spark, warehouse: Path) -> None:
    """Another writer's commit to ``cursors`` (a repair by hand): the subscriptions of one
    topic partition removed, so that the later batches' commands for them are refused."""
    table = DeltaTable.forPath(spark, table_path(warehouse, "cursors"))
    topic = table.toDF().agg(F.min("topic")).first()[0]
    table.delete((F.col("topic") == topic) & (F.col("partition") == 0))


def _repair_after_batch_1(spark, warehouse: Path):
    def on_phase(batch_id: int, phase: str) -> None:
        if (batch_id, phase) == (1, "write ingest_batches"):
            _drop_one_partitions_cursors(spark, warehouse)

    return on_phase


@pytest.mark.slow
def test_a_commit_by_another_writer_between_batches_is_read_by_the_next(
    spark, events, read_every_batch, tmp_path
):
    """Batch 2 starts from the table without the removed cursors, as a batch that always reads
    does: the kept state would bring them back."""
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    writer = ingest(spark, events, warm, on_phase=_repair_after_batch_1(spark, warm))
    assert writer.warm is not None
    assert writer.warm.hits == FILES - 2  # batch 2 read the table
    ingest(spark, events, cold, on_phase=_repair_after_batch_1(spark, cold), warm_state=False)
    repaired = snapshot(cold, exclude=LINEAGE)
    assert repaired["cursors"] != read_every_batch["cursors"], "the repair changes what the batches write"
    assert_same_tables(snapshot(warm, exclude=LINEAGE), repaired)


@pytest.mark.slow
def test_kept_rows_lost_between_batches_are_read_again(spark, events, read_every_batch, tmp_path):
    """Kept rows of batches spread over partitions live in the executors' block managers. When
    they are gone before the next batch (here: every block this ingest persisted, dropped after
    batch 1, as if its executor died), that batch reads Delta instead of failing, and the
    tables are the same."""
    jsc = spark.sparkContext._jsc
    before = set(jsc.getPersistentRDDs().keys())

    def lose_blocks_after_batch_1(batch_id: int, phase: str) -> None:
        if (batch_id, phase) == (1, "write ingest_batches"):
            for rdd_id, rdd in jsc.getPersistentRDDs().items():
                if rdd_id not in before:
                    rdd.unpersist(True)

    writer = ingest(
        spark, events, tmp_path / "warehouse", on_phase=lose_blocks_after_batch_1, single_partition_rows=0
    )
    assert writer.warm is not None
    assert writer.warm.hits == FILES - 2  # batch 2 found its kept rows gone and read
    assert_same_tables(snapshot(tmp_path / "warehouse", exclude=LINEAGE), read_every_batch)


def test_batches_spread_over_partitions_keep_their_state_in_spark(spark, events, read_every_batch, tmp_path):
    """The batches above run in one partition and keep their state in the driver as Arrow;
    batches spread over partitions keep it in Spark, and write the same tables. Of the rows
    they checkpoint (input, duplicates, state, UDF output, kept state), only the state kept
    for the next batch is still in the block manager when the query ends."""
    before = cached_rdds(spark)
    writer = ingest(spark, events, tmp_path / "warehouse", single_partition_rows=0)
    assert writer.warm is not None and writer.warm.hits == FILES - 1
    assert_same_tables(snapshot(tmp_path / "warehouse", exclude=LINEAGE), read_every_batch)
    new = cached_rdds_when(spark, lambda cached: len(cached - before) <= 1) - before
    assert len(new) == 1, f"{len(new)} checkpoints of the query left in the block manager"


# ---- the driver's overlay and hand-over between the two forms ---------------------------
T1, T2 = "persistent://t/n/a", "persistent://t/n/b"
VERSIONS = {"cursors": 3, "topic_partitions": 3}
NEXT = {"cursors": 4, "topic_partitions": 4}


def _state(rows: list[tuple]) -> pa.Table:
    """STATE_INPUT rows from (topic, partition, kind, subscription, state)."""
    given = ("topic", "partition", "kind", "subscription", "state")
    full = [dict.fromkeys(STATE_INPUT.fieldNames()) | dict(zip(given, r, strict=True)) for r in rows]
    return pa.Table.from_pylist(full, schema=state_arrow())


def _changes(changed: list[tuple], removed: list[tuple]) -> pa.Table:
    rows = _state(changed + removed).append_column(
        REMOVED, pa.array([False] * len(changed) + [True] * len(removed), pa.bool_())
    )
    return rows


BASE = [
    (T1, 0, PARTITION, None, b"p-old"),
    (T1, 0, CURSOR, "s1", b"s1-old"),
    (T1, 0, CURSOR, "s2", b"s2-old"),
    (T1, 0, CURSOR, "gone", b"gone-old"),
    (T2, 1, PARTITION, None, b"p2-old"),
    (T2, 1, CURSOR, "s1", b"t2-s1-old"),
]
CHANGED = [(T1, 0, PARTITION, None, b"p-new"), (T1, 0, CURSOR, "s1", b"s1-new"), (T1, 0, CURSOR, "new", b"n")]
REMOVED_KEYS = [(T1, 0, CURSOR, "gone", None)]


def _sorted(rows: list[dict]) -> list[tuple]:
    return sorted(tuple(r[n] for n in STATE_INPUT.fieldNames()) for r in rows)


def test_the_drivers_overlay_leaves_the_rows_sparks_overlay_leaves(spark):
    changes = _changes(CHANGED, REMOVED_KEYS)
    in_driver = overlay_table(_state(BASE), changes)
    frame = spark.createDataFrame(
        changes, T.StructType([*STATE_INPUT.fields, T.StructField(REMOVED, T.BooleanType())])
    )
    in_spark = overlay(
        spark.createDataFrame(_state(BASE), STATE_INPUT),
        frame.filter(~F.col(REMOVED)).drop(REMOVED),
        frame.filter(F.col(REMOVED)).select("topic", "partition", "kind", "subscription"),
    )
    assert _sorted(in_driver.to_pylist()) == _sorted([r.asDict() for r in in_spark.collect()])
    states = {(r["kind"], r["subscription"]): r["state"] for r in in_driver.to_pylist() if r["topic"] == T1}
    assert states == {
        (PARTITION, None): b"p-new",
        (CURSOR, "s1"): b"s1-new",
        (CURSOR, "s2"): b"s2-old",
        (CURSOR, "new"): b"n",
    }


def test_state_kept_in_either_form_is_handed_to_a_batch_of_the_other(spark):
    """A batch that runs in one partition after one spread over partitions takes the kept
    Spark rows as Arrow, and the other way round; a partition not kept means: read Delta."""
    keys = local_frame(spark, [(T1, 0)], "topic string, partition int")
    base = _state(BASE)
    expected = _sorted(of_partitions(base, [(T1, 0)]).to_pylist())

    in_driver = WarmState()
    in_driver.keep_table(base, _changes([], []), [(T1, 0), (T2, 1)], VERSIONS, NEXT, NEXT)
    as_frame = in_driver.rows_for(NEXT, [(T1, 0)], keys)
    assert as_frame is not None and _sorted([r.asDict() for r in as_frame.collect()]) == expected
    assert in_driver.rows_for(NEXT, [(T1, 0), (T2, 7)], keys) is None

    in_spark = WarmState()
    frame = spark.createDataFrame(base, STATE_INPUT)
    no_output = spark.createDataFrame(pa.Table.from_pylist([], schema=OUTPUT_ARROW), APPLY_OUTPUT)
    lineage = [F.lit("q").alias("query_id"), F.lit(0).cast("long").alias("batch_id")]
    in_spark.keep(frame, no_output, lineage, [(T1, 0), (T2, 1)], keys, VERSIONS, NEXT, NEXT)
    as_table = in_spark.table_for(NEXT, [(T1, 0)], keys)
    assert as_table is not None and _sorted(as_table.to_pylist()) == expected
    assert in_spark.table_for(VERSIONS, [(T1, 0)], keys) is None  # not the versions kept


def _output(rows: list[dict]) -> pa.Table:
    """APPLY_OUTPUT rows (Arrow) from the columns given, the others null (``op``: upsert)."""
    return pa.Table.from_pylist(
        [dict.fromkeys(OUTPUT_ARROW.names) | {"op": UPSERT} | r for r in rows], schema=OUTPUT_ARROW
    )


def test_state_changes_from_the_drivers_rows_are_the_ones_spark_selects(spark):
    """Partition rows, cursors whose state changed (not those unchanged or with no flag), the
    cursors a batch deletes, and none of the other kinds: what ``changed_state`` and
    ``removed_cursors`` select from the same rows in Spark."""
    cursor = {"kind": CURSOR, "topic": T1, "partition": 0, "subscription_state": b"sub"}
    rows = _output(
        [
            {
                "kind": PARTITION,
                "topic": T1,
                "partition": 0,
                "ledgers": b"l",
                "last_seq": 9,
                "last_event_time": 5,
                "producers_state": b"p",
                "state": b"not-this",
            },
            {**cursor, "subscription": "changed", "state": b"c", "state_changed": True},
            {**cursor, "subscription": "same", "state": b"s", "state_changed": False},
            {**cursor, "subscription": "unflagged", "state": b"u"},
            {**cursor, "subscription": "gone", "op": DELETE, "state_changed": False},
            {"kind": RANGE, "topic": T1, "partition": 0, "subscription": "changed", "op": DELETE},
            {"kind": PARTITION, "topic": T2, "partition": 1, "ledgers": b"l2", "last_seq": 1},
        ]
    )
    in_driver = state_changes_table(rows)
    out = spark.createDataFrame(rows, APPLY_OUTPUT)
    lineage = [F.lit("q").alias("query_id"), F.lit(0).cast("long").alias("batch_id")]
    changed = [r.asDict() for r in changed_state(out, lineage).collect()]
    removed = [dict.fromkeys(STATE_INPUT.fieldNames()) | r.asDict() for r in removed_cursors(out).collect()]
    flags = in_driver.column(REMOVED).to_pylist()
    assert _sorted([r for r, gone in zip(in_driver.to_pylist(), flags, strict=True) if not gone]) == _sorted(
        changed
    )
    assert _sorted([r for r, gone in zip(in_driver.to_pylist(), flags, strict=True) if gone]) == _sorted(
        removed
    )
    assert sorted(r["subscription"] or "" for r in changed) == ["", "", "changed"]
    assert in_driver.select(STATE_INPUT.fieldNames()).schema.types == state_arrow().types
