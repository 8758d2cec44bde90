"""A batch that takes its state from the last batch's (``jobs.ingest.warm``) writes the tables a
batch that reads Delta writes, and stops taking it as soon as another writer commits."""

from __future__ import annotations

from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from jobs.bench.generate import generate
from jobs.platform.tables import table_path
from tests.jobs.warehouse import LINEAGE, assert_same_tables, ingest, snapshot

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
    return snapshot(spark, warehouse, exclude=LINEAGE)


def test_batches_on_kept_state_write_the_tables_of_batches_that_read(
    spark, events, read_every_batch, tmp_path
):
    writer = ingest(spark, events, tmp_path / "warehouse")
    assert writer.warm is not None
    assert writer.warm.hits == FILES - 1  # every batch after the first
    assert_same_tables(snapshot(spark, tmp_path / "warehouse", exclude=LINEAGE), read_every_batch)


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
    repaired = snapshot(spark, cold, exclude=LINEAGE)
    assert repaired["cursors"] != read_every_batch["cursors"], "the repair changes what the batches write"
    assert_same_tables(snapshot(spark, warm, exclude=LINEAGE), repaired)


@pytest.mark.slow
def test_kept_rows_lost_between_batches_are_read_again(spark, events, read_every_batch, tmp_path):
    """Kept rows live in the executors' block managers. When they are gone before the next
    batch (here: every block this ingest persisted, dropped after batch 1, as if its executor
    died), that batch reads Delta instead of failing, and the tables are the same."""
    jsc = spark.sparkContext._jsc
    before = set(jsc.getPersistentRDDs().keys())

    def lose_blocks_after_batch_1(batch_id: int, phase: str) -> None:
        if (batch_id, phase) == (1, "write ingest_batches"):
            for rdd_id, rdd in jsc.getPersistentRDDs().items():
                if rdd_id not in before:
                    rdd.unpersist(True)

    writer = ingest(spark, events, tmp_path / "warehouse", on_phase=lose_blocks_after_batch_1)
    assert writer.warm is not None
    assert writer.warm.hits == FILES - 2  # batch 2 found its kept rows gone and read
    assert_same_tables(snapshot(spark, tmp_path / "warehouse", exclude=LINEAGE), read_every_batch)
