"""``active_consumer_changes`` is appended: the rows the insert-only MERGE it replaced wrote.

Its key (topic, partition, subscription, seq) is new in every batch: a replayed event is
refused as ``stale_seq`` before the engine sees it, so no change is computed twice, and a batch
that runs again after a crash skips the append by its tag (``jobs.ingest.recovery``), as it does
for the other appends. These tests feed the same events to both writes, over two batches with
switches in each and a replay of them all, and kill a batch right after its append.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.ingest import batch
from jobs.ingest.projections import PROJECTION
from jobs.platform.delta_writer import TableMerge
from jobs.platform.tables import read_table
from schemas.udf import ACTIVE_CHANGE
from tests.jobs.warehouse import LINEAGE, EventLog, ingest, snapshot, write_events

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

TABLE = "active_consumer_changes"
PARTITIONS = (
    ("persistent://public/default/switches-a", -1),
    ("persistent://public/default/switches-b", 0),
    ("persistent://public/default/switches-b", 1),
)


def _switching_stream(log: EventLog, topic: str, partition: int) -> list[list[dict[str, object]]]:
    """Two files of one Failover subscription's consumers coming and going: each file changes
    the active consumer more than once."""

    def subscribe(consumer_id: int, name: str, priority: int = 0) -> dict[str, object]:
        return log.event(
            "SUBSCRIBE",
            topic,
            partition,
            subscription="fo",
            consumer_id=consumer_id,
            consumer_name=name,
            sub_type="Failover",
            priority_level=priority,
        )

    def close(consumer_id: int) -> dict[str, object]:
        return log.event("CLOSE_CONSUMER", topic, partition, subscription="fo", consumer_id=consumer_id)

    publish = [
        log.event(
            "PUBLISH",
            topic,
            partition,
            ledger_id=7,
            entry_id=e,
            batch_size=1,
            producer_name="p",
            sequence_id=e,
        )
        for e in range(3)
    ]
    return [
        [*publish, subscribe(1, "c-b"), subscribe(2, "c-a"), subscribe(3, "c-c", priority=1), close(2)],
        [
            subscribe(4, "c-0"),
            close(1),
            close(4),
            subscribe(5, "c-a"),
            close(3),
            subscribe(6, "c-z", priority=-1),
        ],
    ]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two files of switches on three topic partitions, then one file that replays them all."""
    files: list[list[dict[str, object]]] = [[], []]
    log = EventLog()
    for topic, partition in PARTITIONS:
        for i, part in enumerate(_switching_stream(log, topic, partition)):
            files[i].extend(part)
    path = tmp_path_factory.mktemp("switches")
    write_events(path, files)
    write_events(path, [[e for f in files for e in f]], prefix="replayed")
    replayed = path / "replayed-000.jsonl"
    os.utime(replayed, (time.time() + 1, time.time() + 1))  # read after the originals
    return path


@pytest.fixture(scope="module")
def appended(spark: SparkSession, source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The warehouse of a run that was never stopped."""
    assert PROJECTION[ACTIVE_CHANGE].write is None  # appended
    warehouse = tmp_path_factory.mktemp("appended") / "warehouse"
    ingest(spark, source, warehouse)
    return warehouse


def _old_write(merge: TableMerge) -> TableMerge:
    """The write ``active_consumer_changes`` had before: insert the rows whose key is new."""
    return merge.when_not_matched_insert()


def test_appended_changes_are_the_rows_the_insert_only_merge_wrote(
    spark: SparkSession, source: Path, appended: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged = tmp_path / "merged"
    old = tuple(replace(p, write=_old_write) if p.kind == ACTIVE_CHANGE else p for p in batch.PROJECTIONS)
    monkeypatch.setattr(batch, "PROJECTIONS", old)
    ingest(spark, source, merged)

    got = snapshot(appended, exclude=LINEAGE)[TABLE]
    assert got == snapshot(merged, exclude=LINEAGE)[TABLE]
    # switches in both batches on every partition, none from the replays
    changes = read_table(spark, appended, TABLE).collect()
    assert {(r["batch_id"], r["topic"], r["partition"]) for r in changes} == {
        (b, topic, partition) for b in range(2) for topic, partition in PARTITIONS
    }


@pytest.mark.slow  # a crash and a restart
def test_a_batch_run_again_after_its_append_adds_no_change_twice(
    spark: SparkSession, source: Path, appended: Path, tmp_path: Path
) -> None:
    """Killed right after batch 1 appended its changes, the re-run skips that append by its tag."""
    crashed = tmp_path / "crashed"
    ingest(spark, source, crashed, kill_at=f"1:write {TABLE}")
    ingest(spark, source, crashed)
    assert snapshot(crashed, exclude=LINEAGE)[TABLE] == snapshot(appended, exclude=LINEAGE)[TABLE]
