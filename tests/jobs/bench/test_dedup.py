"""The ``bench --dedup`` workload (no Spark): sized as asked, deterministic, and a stream the
engine accepts whole that exercises every dedup decision."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from engine import EngineSettings, EventBatch, PartitionState
from jobs.bench.dedup import DedupWorkload, generate_dedup_workload

SMALL = DedupWorkload(batches=2, events_per_batch=1_500, partitions=3)


def test_workload_is_sized_and_deterministic(tmp_path: Path):
    first = generate_dedup_workload(SMALL, tmp_path / "a")
    second = generate_dedup_workload(SMALL, tmp_path / "b")
    assert first.events == [1_500, 1_500]
    assert [len(f.read_text().splitlines()) for f in first.files] == first.events
    assert [f.read_bytes() for f in first.files] == [f.read_bytes() for f in second.files]
    assert first.files[0].stat().st_mtime < first.files[1].stat().st_mtime  # read in order


def test_the_engine_accepts_the_stream_and_meets_every_status(tmp_path: Path):
    summary = generate_dedup_workload(SMALL, tmp_path)
    records = [json.loads(line) for f in summary.files for line in f.read_text().splitlines()]
    statuses: Counter[str] = Counter()
    for topic in {r["topic"] for r in records}:
        state = PartitionState(topic, -1)
        mine = [r for r in records if r["topic"] == topic]
        result = state.apply(EventBatch.from_records(mine), EngineSettings(broker_deduplication_enabled=True))
        assert not result.rejects
        statuses.update(r.status for r in result.sends.receipts)
    assert sum(statuses.values()) == sum(summary.sends)
    assert set(statuses) == {"NotDup", "Dup", "Unknown"}
    assert statuses["NotDup"] > statuses["Dup"] > statuses["Unknown"] > 0
