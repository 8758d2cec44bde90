"""VACUUM's figures come from its own commits, read without the table's whole history; whether
it runs at all comes from the table's tombstones, read without a Spark job when the table is
younger than the retention.

A continuous ingest commits once per micro-batch, and Delta keeps 30 days of commit files;
``DeltaTable.history()`` reads every one of them. Here an old commit file is made unreadable
after a checkpoint: the table itself reads from the checkpoint and is whole, the full history
cannot be read, and compaction still vacuums and reports what it deleted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from jobs.compact.compaction import CompactOptions, commits_after, compact, oldest_tombstone

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def test_vacuum_reads_only_the_commits_after_it_began(spark, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    path = warehouse / "rejected_events"
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta "
        "TBLPROPERTIES ('delta.checkpointInterval' = '2')"
    )
    # versions 1 to 6, checkpointed by Delta at 2, 4 and 6; compaction adds three more, so the
    # newest eight commits it reads first do not reach version 1
    for i in range(6):
        spark.range(i, i + 1).write.format("delta").mode("append").save(str(path))
    log = path / "_delta_log"
    assert (log / "00000000000000000006.checkpoint.parquet").is_file()
    (log / "00000000000000000001.json").write_text("not a commit\n")
    # without its checksum file: Hadoop would move a file that fails its checksum out of the log
    (log / ".00000000000000000001.json.crc").unlink()
    table = DeltaTable.forPath(spark, str(path))
    with pytest.raises(Exception):  # noqa: B017 (the JVM's parse error, whatever its class)
        table.history().collect()
    assert spark.read.format("delta").load(str(path)).count() == 6

    assert [row["version"] for row in commits_after(table, 4, first_read=1)] == [6, 5]
    assert commits_after(table, 6, first_read=1) == []

    report = compact(
        spark,
        CompactOptions(
            warehouse=warehouse,
            tables=("rejected_events",),
            vacuum_retention_hours=0,
            allow_short_vacuum_retention=True,
        ),
    )
    vacuum = report.tables["rejected_events"].vacuum
    # OPTIMIZE made the six files one; VACUUM deleted them (and their checksum files)
    assert vacuum is not None and vacuum.files_removed >= 6 and vacuum.bytes_removed > 0, vacuum
    assert len(list(path.glob("*.parquet"))) == 1
    assert spark.read.format("delta").load(str(path)).count() == 6


def _last_job(spark) -> int:
    """The id of the newest Spark job the session ran (ids only grow)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None), default=-1)


def test_a_table_younger_than_the_retention_is_answered_without_a_job(spark, tmp_path: Path) -> None:
    """The oldest tombstone of a table created after VACUUM's cutoff is not looked for (no file
    it dropped can be older than the table); one created before it is, and its answer is the
    time Delta recorded for the dropped file."""
    path = str(tmp_path / "table")
    before_create = time.time() * 1000
    spark.range(3).write.format("delta").save(path)
    spark.range(2).write.format("delta").mode("overwrite").save(path)  # drops the first file
    dropped = (
        DeltaTable.forPath(spark, path).history(1).select("timestamp").first()["timestamp"].timestamp() * 1000
    )

    last = _last_job(spark)
    assert oldest_tombstone(spark, path, before_create - 3_600_000) == -1  # created after the cutoff
    assert _last_job(spark) == last

    # a cutoff after the creation: the tombstones are read (a job), and the drop is found
    oldest = oldest_tombstone(spark, path, time.time() * 1000)
    assert _last_job(spark) > last
    assert oldest is not None and before_create <= oldest and abs(oldest - dropped) < 5_000
