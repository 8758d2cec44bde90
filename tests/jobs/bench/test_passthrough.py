"""The ingest bench's pass-through runs on real Spark: every event through a grouped Arrow UDF
per topic partition, one row per partition and batch appended to Delta."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.bench.generate import generate
from jobs.bench.ingest import run_passthrough

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def test_passthrough_sends_every_event_through_the_grouped_udf(spark, tmp_path: Path) -> None:
    summary = generate(tmp_path / "events", events=600, files=2, seed=5)
    timings = run_passthrough(spark, str(tmp_path / "events"), tmp_path / "work")
    assert [t.rows for t in timings] == [300, 300]
    rows = spark.read.format("delta").load(str(tmp_path / "work" / "table")).collect()
    assert sum(r["events"] for r in rows) == 600
    assert {r["batch_id"] for r in rows} == {0, 1}
    per_batch = {(r["topic"], r["partition"], r["batch_id"]) for r in rows}
    assert len(per_batch) == len(rows)  # one row per topic partition and batch
    assert summary.events == 600
