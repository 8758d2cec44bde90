"""The ingest bench's pass-through runs on real Spark: every event through a grouped Arrow UDF
per topic partition, one row per partition and batch appended to Delta."""

from __future__ import annotations

import logging
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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_passthrough_returns_once_the_listener_heard_its_end(spark, tmp_path: Path) -> None:
    """A process that exited while Spark still delivered the query's last events to the
    session's listener got their failed callbacks logged as stack traces (``bench --latency``
    ended so): the pass-through returns after its end was reported."""
    generate(tmp_path / "events", events=200, files=1, seed=5)
    logger = logging.getLogger("ackstate.ingest")
    records, level = _Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        run_passthrough(spark, str(tmp_path / "events"), tmp_path / "work")
        heard = list(records.messages)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    started = [i for i, m in enumerate(heard) if "ackstate-bench-passthrough started" in m]
    assert started, heard
    assert any(m.endswith(" stopped") for m in heard[started[-1] :]), heard
