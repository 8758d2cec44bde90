"""A MERGE that loses a race with a concurrent OPTIMIZE, on real Delta: why ``jobs.platform.retry`` exists.

Delta commits optimistically. When OPTIMIZE commits while a MERGE into the same table is under
way, the MERGE fails at its commit with a concurrent-modification error (the ingest would stop);
run again, it commits on top of the compacted table. The race is forced, not left to timing: the
MERGE's source waits, inside the Spark task, until OPTIMIZE has committed.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from jobs.platform.retry import is_conflict, retry_on_conflict

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def test_a_merge_that_loses_to_a_concurrent_optimize_is_run_again(spark, tmp_path: Path):
    path = str(tmp_path / "t")
    DeltaTable.create(spark).location(path).addColumn("k", "INT").addColumn("v", "INT").clusterBy(
        "k"
    ).execute()
    for i in range(3):  # three small files: OPTIMIZE has something to compact
        spark.range(i * 10, i * 10 + 10).selectExpr("CAST(id AS INT) k", "0 v").write.format("delta").mode(
            "append"
        ).save(path)
    started, go = tmp_path / "merge-started", tmp_path / "optimize-done"

    @F.udf("int")
    def gated(k):
        # runs in the Python worker: announce that the MERGE is under way, then wait for OPTIMIZE
        started.touch()
        deadline = time.time() + 120
        while not go.exists() and time.time() < deadline:
            time.sleep(0.05)
        return k

    conflicts: list[BaseException] = []
    attempts: list[int] = []
    result: dict[str, object] = {}

    def merge() -> None:
        attempts.append(1)
        # one partition: one task waits in the gate, the other core is free for OPTIMIZE
        source = (
            spark.range(5, 15, numPartitions=1).selectExpr("CAST(id AS INT) k").select(gated("k").alias("k"))
        )
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(source.alias("s"), "t.k = s.k")
            .whenMatchedUpdate(set={"v": "t.v + 1"})
            .execute()
        )

    def run() -> None:
        try:
            retry_on_conflict(merge, what="test merge", base_delay=0.01, on_retry=conflicts.append)
            result["ok"] = True
        except BaseException as exc:  # reported by the main thread
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.time() + 120
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists(), "the MERGE never started"
    optimized = DeltaTable.forPath(spark, path).optimize().executeCompaction().first()
    assert optimized["metrics"]["numFilesAdded"] == 1
    go.touch()
    thread.join(timeout=300)

    assert result == {"ok": True}, result
    assert len(attempts) == 2
    (conflict,) = conflicts
    assert is_conflict(conflict)
    assert "OPTIMIZE" in str(conflict)
    values = {r.k: r.v for r in spark.read.format("delta").load(path).collect()}
    assert values == {k: (1 if 5 <= k < 15 else 0) for k in range(30)}  # applied exactly once
