"""The streaming ingest on real Spark and Delta: results, replays, crashes.

Crash safety is tested by stopping the job at kill points between its writes (in process, by
an exception inside the micro-batch, and once as a real ``os._exit`` of a separate process) and
restarting it on the same checkpoint: the tables must equal those of a run that was never
stopped. Columns that record wall-clock time or the writing query are left out of the
comparison; everything else must be identical.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from engine import EngineSettings, EventBatch, PartitionState, position_text
from jobs.bench.generate import MALFORMED_KEY, RAW_KEY, iter_events
from jobs.cli import main
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.rewrite import REWRITE_PREDICATE
from jobs.platform.tables import read_table
from schemas.tables import TABLES
from tests.conftest import GENERATED_CODE, generated_code
from tests.jobs.ingest.killed_cli import run_killed
from tests.jobs.warehouse import LINEAGE, assert_same_tables, commit_actions, crash_at
from tests.jobs.warehouse import snapshot as warehouse_snapshot

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

FILES = 2


def _write_source(source: Path, records: list[dict], files: int = FILES, prefix: str = "events") -> None:
    source.mkdir(parents=True, exist_ok=True)
    size = -(-len(records) // files)
    for i in range(files):
        with open(source / f"{prefix}-{i:03d}.jsonl", "w") as fh:
            for record in records[i * size : (i + 1) * size]:
                fh.write((record[RAW_KEY] if RAW_KEY in record else json.dumps(record)) + "\n")


def _generated() -> tuple[list[dict], list[dict]]:
    """(every record as written, the well-formed ones) of a small generated workload."""
    records = list(
        iter_events(
            events=800, topics=2, partitions=2, subscriptions_per_topic=2, malformed_rate=0.02, seed=11
        )
    )
    written = [{k: v for k, v in r.items() if k != MALFORMED_KEY} if RAW_KEY not in r else r for r in records]
    return written, [r for r in records if MALFORMED_KEY not in r]


@pytest.fixture(scope="module")
def workload() -> list[dict]:
    return _generated()[0]


@pytest.fixture(scope="module")
def well_formed() -> list[dict]:
    return _generated()[1]


def _options(source: Path, warehouse: Path, checkpoint: Path | None = None) -> IngestOptions:
    return IngestOptions(
        source=str(source),
        warehouse=warehouse,
        max_files_per_trigger=1,
        checkpoint=str(checkpoint) if checkpoint else None,
        settings=EngineSettings(),
    )


def _run(spark, options: IngestOptions, kill_at: str | None = None) -> None:
    on_phase = crash_at(kill_at) if kill_at is not None else None
    query = start_ingest(spark, options, BatchWriter(options, on_phase=on_phase))
    if kill_at is None:
        query.awaitTermination()
        assert query.exception() is None
        return
    with pytest.raises(StreamingQueryException, match="simulated crash"):
        query.awaitTermination()


def snapshot(warehouse: Path) -> dict[str, list[tuple]]:
    """Every table's rows without lineage columns, sorted: what 'identical tables' means."""
    return warehouse_snapshot(warehouse, exclude=LINEAGE)


@pytest.fixture(scope="module")
def clean_run(spark, workload, tmp_path_factory):
    base = tmp_path_factory.mktemp("clean")
    _write_source(base / "source", workload)
    options = _options(base / "source", base / "warehouse")
    _run(spark, options)
    return base, snapshot(base / "warehouse")


def test_state_matches_the_engine_applied_directly(spark, workload, well_formed, clean_run):
    base, _tables = clean_run
    valid = well_formed
    by_partition: dict[tuple[str, int], list[dict]] = {}
    for record in valid:
        by_partition.setdefault((record["topic"], record.get("partition", -1)), []).append(record)
    cursors = {
        (r["topic"], r["partition"], r["subscription"]): r
        for r in read_table(spark, base / "warehouse", "cursors").collect()
    }
    ranges = read_table(spark, base / "warehouse", "ack_ranges").collect()
    checked = 0
    for (topic, partition), records in by_partition.items():
        state = PartitionState(topic, partition)
        state.apply(EventBatch.from_records(records), EngineSettings())
        for name, cursor in state.cursors.items():
            row = cursors[(topic, partition, name)]
            assert row["mark_delete"] == position_text(cursor.mark_delete)
            assert row["msg_backlog"] == cursor.backlog(state.ledgers)
            assert row["non_contiguous_deleted_ranges"] == cursor.non_contiguous_deleted_ranges
            table_ranges = {
                r["range"]
                for r in ranges
                if (r["topic"], r["partition"], r["subscription"]) == (topic, partition, name)
            }
            engine_ranges = {
                f"({ledger}:{first - 1}..{ledger}:{last}]"
                for ledger, firsts, lasts in cursor.acked.runs()
                for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True)
            }
            assert table_ranges == engine_ranges
            checked += 1
    assert checked >= 4
    batches = read_table(spark, base / "warehouse", "ingest_batches").collect()
    assert len(batches) == FILES
    assert sum(b["input_rows"] for b in batches) == len(workload)
    rejected = read_table(spark, base / "warehouse", "rejected_events").count()
    assert sum(b["rejected_rows"] for b in batches) == rejected
    assert rejected >= len(workload) - len(valid)  # every malformed record is accounted for


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_feeding_the_same_events_again_changes_no_state(spark, workload, well_formed, clean_run, tmp_path):
    base, tables = clean_run
    work = tmp_path / "replay"
    shutil.copytree(base, work)
    # the same records under new file names: the file source reads them as new input
    _write_source(work / "source", workload, prefix="again")
    _run(spark, _options(work / "source", work / "warehouse", work / "warehouse" / "_checkpoints" / "replay"))
    after = snapshot(work / "warehouse")
    assert_same_tables(after, tables, ("cursors", "topic_partitions", "ack_ranges", "batch_acks", "ledgers"))
    stale = read_table(spark, work / "warehouse", "rejected_events").filter("reason = 'stale_seq'").count()
    # a new query reads the original files and their copies: every well-formed record twice,
    # and each time it is refused as a replay
    assert stale == 2 * len(well_formed)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill_at", ["1:write rejected_events", "1:merge ack_ranges", "1:write ingest_batches"]
)
def test_crash_between_writes_then_restart_equals_a_clean_run(spark, workload, clean_run, tmp_path, kill_at):
    _, expected = clean_run
    _write_source(tmp_path / "source", workload)
    options = _options(tmp_path / "source", tmp_path / "warehouse")
    _run(spark, options, kill_at=kill_at)
    _run(spark, options)
    assert_same_tables(snapshot(tmp_path / "warehouse"), expected)


@pytest.mark.slow
def test_killed_process_between_state_and_projections_restarts_exactly(spark, workload, clean_run, tmp_path):
    """A real kill: the ingest process exits abruptly after writing `cursors` in batch 1, before
    `topic_partitions` and the projections; a restart on the same checkpoint must complete it
    exactly. The restart is the same command in this process's session, another driver than
    the killed one (a second cold JVM would add half a minute and nothing to the check)."""
    _, expected = clean_run
    _write_source(tmp_path / "source", workload)
    argv = [
        "ingest",
        "--source",
        str(tmp_path / "source"),
        "--warehouse",
        str(tmp_path / "warehouse"),
        "--max-files-per-trigger",
        "1",
    ]
    killed = run_killed(argv, "1:merge cursors")
    assert killed.returncode == 137, killed.stderr[-2000:]
    assert main(argv) == 0
    assert_same_tables(snapshot(tmp_path / "warehouse"), expected)


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_delta_table_source_gives_the_same_state(spark, well_formed, clean_run, tmp_path, caplog):
    """The same events from a Delta table (format delta) as from JSON Lines, written one table
    at a time (the clean run writes them concurrently); progress is logged."""
    import logging

    from schemas.events import EVENT_SCHEMA

    _, expected = clean_run
    fields = [f.name for f in EVENT_SCHEMA.fields]
    rows = [{name: record.get(name) for name in fields} for record in well_formed]
    source = tmp_path / "events_table"
    spark.createDataFrame(rows, EVENT_SCHEMA).write.format("delta").save(str(source))
    options = IngestOptions(
        source=str(source), warehouse=tmp_path / "warehouse", format="delta", write_threads=1
    )
    with caplog.at_level(logging.INFO, logger="ackstate.ingest"):
        _run(spark, options)
        deadline = time.time() + 30  # listener events arrive asynchronously
        while not any("rows in" in m for m in caplog.messages) and time.time() < deadline:
            time.sleep(0.5)
    actual = snapshot(tmp_path / "warehouse")
    assert_same_tables(
        actual,
        expected,
        ("cursors", "topic_partitions", "ack_ranges", "batch_acks", "ledgers", "consumers", "pending_acks"),
    )
    assert any("rows in" in m and "rejected" in m for m in caplog.messages), caplog.messages


def _files_per_rewrite(warehouse: Path) -> list[int]:
    """The files each batch's rewrite of a projection table added (``jobs.platform.rewrite``),
    read from the tables' Delta logs."""
    added = []
    for name in sorted(TABLES):
        if not (warehouse / name).is_dir():
            continue
        for actions in commit_actions(warehouse, name):
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            if REWRITE_PREDICATE in str(info.get("operationParameters", {}).get("predicate", "")):
                added.append(sum(1 for a in actions if "add" in a))
    return added


@pytest.mark.parametrize("rewrites", ["by Spark", "in the driver"])
def test_large_batches_write_what_small_batches_write(
    spark, workload, clean_run, tmp_path, caplog, monkeypatch, rewrites
):
    """The clean run's batches (400 records) are small: they run interpreted (``[ingest]
    interpreted_rows``) and in one partition (``single_partition_rows``: each table's rewrite
    writes one file). The same files run as large batches (both 0: generated code, spread
    over the shuffle partitions) give every table the same rows, whether their rewrites run in
    Spark (a file per shuffle partition) or, as a large batch's few rows do by default
    (``jobs.platform.rewrite.DRIVER_SOURCE_ROWS``), in the driver (one file).

    The large batches' apply sends Arrow batches with Spark's row-by-row size check off and at
    most as many rows as fit the session's byte limit (``jobs.ingest.arrow_batches``); here a
    limit of 64 KiB, so that a batch holds a few rows and a group many batches. The session has
    its own settings back after each apply."""
    import logging
    from contextlib import contextmanager

    from jobs.ingest import batch as batch_module
    from jobs.ingest.arrow_batches import MAX_BYTES, MAX_RECORDS, UNCHECKED_BYTES, event_row_bytes
    from jobs.platform import rewrite

    if rewrites == "by Spark":
        monkeypatch.setattr(rewrite, "DRIVER_SOURCE_ROWS", 0)

    base, expected = clean_run
    small = _options(base / "source", base / "warehouse")
    assert small.interpreted(len(workload) // FILES) and small.single_partition(len(workload) // FILES)
    options = replace(
        _options(base / "source", tmp_path / "warehouse", tmp_path / "checkpoint"),
        interpreted_rows=0,
        single_partition_rows=0,
    )
    applies: list[tuple[str, str, dict, str]] = []  # (records, bytes, codegen settings) inside, bytes after
    real_settings = batch_module.session_settings

    @contextmanager
    def observed(sessions, settings):
        with real_settings(sessions, settings):
            conf = sessions[0].conf
            codegen = {key: conf.get(key) for key in GENERATED_CODE}
            inside = (conf.get(MAX_RECORDS), conf.get(MAX_BYTES), codegen)
            yield
        if MAX_BYTES in settings:
            applies.append((*inside, sessions[0].conf.get(MAX_BYTES)))

    monkeypatch.setattr(batch_module, "session_settings", observed)
    limit = 64 * 1024
    spark.conf.set(MAX_BYTES, str(limit))  # the query's session is a copy of this one
    try:
        with caplog.at_level(logging.DEBUG, logger="ackstate.ingest"), generated_code(spark):
            _run(spark, options)
    finally:
        spark.conf.unset(MAX_BYTES)
    assert not any("interpreted" in m or "one partition" in m for m in caplog.messages), caplog.messages
    assert_same_tables(snapshot(tmp_path / "warehouse"), expected)
    longest = max(len(r[RAW_KEY] if RAW_KEY in r else json.dumps(r)) for r in workload)
    assert len(applies) == FILES, applies
    for records, checked, codegen, after in applies:
        assert checked == str(UNCHECKED_BYTES) and after == str(limit)
        assert codegen == GENERATED_CODE  # the query's session runs generated code
        assert 1 <= int(records) <= limit // event_row_bytes(0) and int(records) <= limit // longest
    in_one = _files_per_rewrite(base / "warehouse")
    spread = _files_per_rewrite(tmp_path / "warehouse")
    assert in_one and max(in_one) == 1, in_one
    assert len(spread) == len(in_one) and max(spread) == (2 if rewrites == "by Spark" else 1), spread


def test_large_batches_reject_the_duplicates_small_batches_reject(spark, workload, well_formed, tmp_path):
    """Two copies of valid records, in their originals' batch with a higher seq: one in its
    original's topic partition, one in a topic partition no other record names (marking it a
    duplicate leaves that partition without a valid record). A large batch finds them through
    its count of event-id hashes (``classified_summary``), a small one by a window over its one
    partition; both reject the same copies and write the same tables."""
    good = {r["event_id"] for r in well_formed}
    picks = [i for i, r in enumerate(workload) if RAW_KEY not in r and r.get("event_id") in good][10:12]
    records = list(workload)
    for at, topic in zip(reversed(picks), ("persistent://acme/prod/only-a-duplicate", None), strict=True):
        copy = dict(records[at], seq=records[at]["seq"] + 100_000)
        if topic is not None:
            copy["topic"] = topic
        records.insert(at + 1, copy)
    outputs = {}
    for path, thresholds in (("small", {}), ("large", {"interpreted_rows": 0, "single_partition_rows": 0})):
        run = tmp_path / path
        _write_source(run / "source", records, files=1)
        with generated_code(spark) if path == "large" else nullcontext():
            _run(spark, replace(_options(run / "source", run / "warehouse"), **thresholds))
        outputs[path] = snapshot(run / "warehouse")
    rejected = read_table(spark, tmp_path / "large" / "warehouse", "rejected_events")
    assert rejected.where("reason = 'duplicate_event_id'").count() == 2
    assert_same_tables(outputs["large"], outputs["small"])


@pytest.mark.slow
def test_continuous_trigger_applies_files_as_they_arrive(spark, workload, clean_run, tmp_path):
    """`--trigger continuous`: a processing-time query picks up files written while it runs.
    Two such ingests of one source into two warehouses run side by side in the one session,
    each query named by its writer's id (Spark allows one active query of a name)."""
    _, expected = clean_run
    source = tmp_path / "source"
    source.mkdir()
    options = [
        IngestOptions(
            source=str(source),
            warehouse=tmp_path / name,
            trigger="continuous",
            processing_time="1 second",
            max_files_per_trigger=1,
        )
        for name in ("warehouse", "beside")
    ]
    queries = []
    try:
        for each in options:
            queries.append(start_ingest(spark, each))
        assert [q.name for q in queries] == [each.app_id for each in options]
        assert queries[0].name != queries[1].name
        # arrives after the queries started; renamed in whole, as a file stream source expects
        _write_source(tmp_path / "staging", workload)
        for staged in sorted((tmp_path / "staging").iterdir()):
            staged.rename(source / staged.name)
        deadline = time.time() + 300
        while time.time() < deadline:
            done = [read_table(spark, each.warehouse, "ingest_batches").count() for each in options]
            if min(done) >= FILES:
                break
            assert all(q.exception() is None for q in queries)
            time.sleep(1)
    finally:
        for query in queries:
            query.stop()
    for each in options:
        assert_same_tables(snapshot(each.warehouse), expected)
