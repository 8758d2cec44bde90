"""The pure helpers of ``ackstate bench --latency`` (no Spark, nothing timed)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from jobs.bench import latency as b


def test_quick_measures_at_most_two_batches_after_one_warm_up() -> None:
    assert (b.workload(5, quick=True).warmup, b.workload(5, quick=True).measured) == (1, 2)
    full = b.workload(5, quick=False)
    assert (full.events_per_batch, full.warmup, full.measured, full.batches) == (1_000, 2, 5, 7)


def test_batches_without_input_are_not_measured() -> None:
    progress = [
        SimpleNamespace(batchId=1, numInputRows=10, durationMs={"triggerExecution": 2500, "addBatch": 2000}),
        SimpleNamespace(batchId=0, numInputRows=10, durationMs={"triggerExecution": 4000, "addBatch": 3900}),
        SimpleNamespace(batchId=2, numInputRows=0, durationMs={"triggerExecution": 5}),
    ]
    batches = b.batch_latencies(progress)
    assert [x.batch_id for x in batches] == [0, 1]
    assert batches[1].trigger_s == 2.5 and abs(batches[1].streaming_s - 0.5) < 1e-9


def test_phase_medians_count_a_missing_phase_as_zero_and_add_streaming() -> None:
    batches = [
        b.BatchLatency(0, 1, 3.0, 2.0, [("read", 1.0), ("merge cursors", 1.0), ("writes", 1.0)]),
        b.BatchLatency(1, 1, 4.0, 3.0, [("read", 3.0), ("writes", 2.0)]),
        b.BatchLatency(2, 1, 5.0, 5.0, [("read", 2.0), ("merge cursors", 3.0), ("writes", 3.0)]),
    ]
    assert b.phase_medians(batches) == [
        ("read", 2.0),
        ("merge cursors", 1.0),
        ("writes", 2.0),
        ("streaming", 1.0),
    ]
    lines = b.breakdown_lines(batches)
    assert lines[0] == "  median per phase (s): read 2.00, writes 2.00, streaming 1.00"
    assert lines[1].endswith("side by side (s): cursors 1.00")


def test_commits_are_counted_per_batch_from_the_tags_of_this_query(tmp_path: Path) -> None:
    def commit(table: str, version: int, tag: str | None) -> None:
        log = tmp_path / table / "_delta_log"
        log.mkdir(parents=True, exist_ok=True)
        lines = [{"commitInfo": {"operation": "MERGE", "userMetadata": tag}}, {"add": {"path": "x"}}]
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(x) for x in lines))

    commit("cursors", 1, "app:0 read cursors@0,topic_partitions@0")
    commit("cursors", 2, "app:1 read cursors@1,topic_partitions@1")
    commit("ingest_batches", 1, "app:1")
    commit("cursors", 3, "other:1")
    commit("cursors", 4, None)  # compaction
    assert b.commits_by_batch(tmp_path, "app") == {0: {"cursors": 1}, 1: {"cursors": 1, "ingest_batches": 1}}
