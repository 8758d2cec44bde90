"""``ackstate compact`` on warehouses the real ingest built: nothing a query sees changes (unless a
retention or a ledger trim says so), a second run finds nothing to do, compaction next to a
running ingest loses nothing, and time travel still answers within the VACUUM retention."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from engine import Cursor, EngineSettings, EventBatch, Ledgers, PartitionState, position_text
from engine.subscription import Subscription
from jobs.bench.generate import MALFORMED_KEY, iter_events
from jobs.cli import main
from jobs.compact.compaction import (
    COMPACT_QUERY_ID,
    CompactOptions,
    CompactReport,
    LedgerTrim,
    LedgerTrimmer,
    PartitionTrim,
    compact,
)
from jobs.platform.java import QUICK_JIT
from jobs.platform.tables import read_table, table_path
from schemas.tables import TABLES
from tests.conftest import generated_code
from tests.jobs.warehouse import (
    DEMO_FILES,
    LINEAGE,
    EventLog,
    append_rows,
    assert_same_tables,
    cached_rdds,
    cached_rdds_when,
    copy,
    demo_warehouse,
    ingest,
    snapshot,
    spark_snapshot,
    utc,
    write_events,
)

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory) -> Path:
    return demo_warehouse(spark, tmp_path_factory.getbasetemp())


def _files(spark, warehouse: Path, name: str) -> int:
    """Data files the table's latest version references."""
    return spark.sql(f"DESCRIBE DETAIL delta.`{table_path(warehouse, name)}`").first()["numFiles"]


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out)


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_compaction_changes_no_query_result_and_a_second_run_finds_nothing_to_do(
    spark, demo, tmp_path, capsys
):
    """The compaction runs generated code, as a user's scheduled job does."""
    warehouse = copy(demo, tmp_path / "warehouse")
    before = snapshot(warehouse)
    files_before = _files(spark, warehouse, "rejected_events")
    assert files_before > 1  # each micro-batch appended its own

    with generated_code(spark):
        code, first = run_json(
            capsys,
            "compact",
            "--warehouse",
            str(warehouse),
            "--json",
            "--vacuum-retention-hours",
            "0",
            "--allow-short-retention",
        )
    assert code == 0
    assert_same_tables(snapshot(warehouse), before)
    tables = first["tables"]
    assert tables["rejected_events"]["optimize"]["files_removed"] == files_before
    assert tables["rejected_events"]["optimize"]["files_added"] == 1
    assert _files(spark, warehouse, "rejected_events") == 1
    # with no retention, VACUUM deletes every file the MERGEs and OPTIMIZE stopped using
    assert tables["cursors"]["vacuum"]["files_removed"] >= DEMO_FILES
    assert first["totals"]["bytes_freed"] > 0
    data_files = [p for p in (warehouse / "rejected_events").glob("*.parquet")]
    assert len(data_files) == 1
    assert tables["cursors"]["checkpoint_written"] is True
    assert (warehouse / "cursors" / "_delta_log" / "_last_checkpoint").is_file()
    # the tests' reader of the files, now from the checkpoints, still reads what Spark reads
    assert snapshot(warehouse) == spark_snapshot(spark, warehouse)
    assert tables["ingest_batches"]["rows_trimmed"] == 0  # every row is younger than 30 days

    code, second = run_json(capsys, "compact", "--warehouse", str(warehouse), "--json")
    assert code == 0
    totals = second["totals"]
    assert (
        totals["files_removed"],
        totals["files_added"],
        totals["bytes_freed"],
        totals["rows_trimmed"],
    ) == (
        0,
        0,
        0,
        0,
    )
    assert_same_tables(snapshot(warehouse), before)


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_history_retention_trims_only_rows_older_than_the_retention(spark, demo, tmp_path, capsys):
    warehouse = copy(demo, tmp_path / "warehouse")
    old, recent = utc(2020, 1, 1), utc(2099, 1, 1)  # 2099: younger than any retention
    append_rows(
        spark,
        warehouse,
        "ingest_batches",
        [{"query_id": "old", "batch_id": i, "input_rows": 1, "finished_at": old} for i in range(2)],
    )
    append_rows(
        spark,
        warehouse,
        "rejected_events",
        [{"event_id": f"old-{i}", "reason": "unknown_type", "rejected_at": old} for i in range(3)],
    )
    key = {"topic": "persistent://public/default/r", "partition": 0, "subscription": "s"}
    append_rows(
        spark,
        warehouse,
        "redeliveries",
        [
            {**key, "ledger_id": 1, "entry_id": 1, "delivered_at": 5, "updated_at": old},  # history: trimmed
            {
                **key,
                "ledger_id": 1,
                "entry_id": 2,
                "delivered_at": None,
                "updated_at": old,
            },  # still due: kept
            {**key, "ledger_id": 1, "entry_id": 3, "delivered_at": 5, "updated_at": recent},
        ],
    )
    append_rows(
        spark,
        warehouse,
        "active_consumer_changes",
        [{**key, "seq": 1, "updated_at": old}, {**key, "seq": 2, "updated_at": recent}],
    )
    append_rows(
        spark,
        warehouse,
        "send_receipts",
        [
            {"topic": key["topic"], "partition": 0, "event_id": "a", "updated_at": old},
            {"topic": key["topic"], "partition": 0, "event_id": "b", "updated_at": recent},
        ],
    )
    rejected_before = read_table(spark, warehouse, "rejected_events").count()

    code, report = run_json(
        capsys,
        "compact",
        "--warehouse",
        str(warehouse),
        "--json",
        "--no-optimize",
        "--no-vacuum",
        "--no-checkpoint",
        "--retention",
        "rejected_events=0",  # 0 keeps a table's history forever
    )
    assert code == 0
    trimmed = {name: t.get("rows_trimmed") for name, t in report["tables"].items()}
    assert trimmed == {
        "topic_partitions": None,
        "cursors": None,
        "ack_ranges": None,
        "batch_acks": None,
        "ledgers": None,
        "rejected_events": None,
        "ingest_batches": 2,
        "consumers": None,
        "pending_acks": None,
        "redeliveries": 1,
        "active_consumer_changes": 1,
        "producers": None,
        "send_receipts": 1,
        "ledger_trims": None,
    }
    assert report["totals"]["rows_trimmed"] == 5
    batches = read_table(spark, warehouse, "ingest_batches")
    assert batches.count() == DEMO_FILES and batches.filter("query_id = 'old'").count() == 0
    assert read_table(spark, warehouse, "rejected_events").count() == rejected_before

    # The demo warehouse has rows of its own (recent ones): look only at this test's topic.
    def mine(table: str) -> list:
        return read_table(spark, warehouse, table).filter(f"topic = '{key['topic']}'").collect()

    assert sorted(r.entry_id for r in mine("redeliveries")) == [2, 3]
    assert [r.seq for r in mine("active_consumer_changes")] == [2]
    assert [r.event_id for r in mine("send_receipts")] == ["b"]


# ---- ledger trim ---------------------------------------------------------------------------
TRIMMED = "persistent://public/default/trimmed"
OTHER = "persistent://public/default/other"


def _trim_workload() -> tuple[list[dict], list[dict]]:
    """Two files of hand-made events. Partition 0 of TRIMMED publishes into ledgers 3, 5 and 8
    and its subscriptions stand at different places: `a` behind with holes (and a run of acks
    at the start of ledger 8), `b` exactly at the last entry of ledger 5 (not moved), `c` at
    the end, `d` cumulatively acked to the end of ledger 3 with an ack in ledger 8, `f` at the
    start with a consumer holding, replaying and nacking entries on both sides. Partition 1
    and OTHER are controls. The second file goes on after the trim: more entries, acks, a new
    Earliest subscription."""
    log = EventLog()
    first: list[dict] = []
    for sub, sub_type in (("a", "Exclusive"), ("b", "Shared"), ("d", "Exclusive")):
        first.append(log.subscribe(TRIMMED, 0, sub, sub_type, "Earliest"))
    first += log.publish(TRIMMED, 0, 3, range(10))
    first += log.publish(TRIMMED, 0, 5, range(5))
    first += log.publish(TRIMMED, 0, 8, range(10))
    first.append(log.ack(TRIMMED, 0, "a", [(3, 5), (5, 1), (8, 0), (8, 1), (8, 3)]))
    first.append(
        log.ack(TRIMMED, 0, "b", [(3, e) for e in range(10)] + [(5, e) for e in range(5)] + [(8, 5)])
    )
    # f: a Shared consumer holds entries in both deleted and kept ledgers, two of them in the
    # replay set (REDELIVER) and one nacked (a client timer still scheduled at the trim)
    first.append(log.subscribe(TRIMMED, 0, "f", "Shared", "Earliest"))
    for ledger, entry in ((3, 1), (3, 2), (5, 0), (8, 6), (8, 7)):
        first.append(
            log.event(
                "DISPATCH", TRIMMED, 0, subscription="f", consumer_id=1, ledger_id=ledger, entry_id=entry
            )
        )
    ids = [{"ledger_id": 3, "entry_id": 1}, {"ledger_id": 8, "entry_id": 7}]
    first.append(log.event("REDELIVER", TRIMMED, 0, subscription="f", consumer_id=1, message_ids=ids))
    ids = [{"ledger_id": 3, "entry_id": 2}]
    first.append(log.event("NACK", TRIMMED, 0, subscription="f", consumer_id=1, message_ids=ids))
    first.append(log.subscribe(TRIMMED, 0, "c", "Failover", "Latest"))
    first.append(log.ack(TRIMMED, 0, "d", [(3, 9)], cumulative=True))
    first.append(log.ack(TRIMMED, 0, "d", [(8, 2)]))
    first.append(log.subscribe(TRIMMED, 1, "a", "Exclusive", "Earliest"))
    first += log.publish(TRIMMED, 1, 4, range(5))
    first += log.publish(TRIMMED, 1, 6, range(5))
    first.append(log.ack(TRIMMED, 1, "a", [(4, 2)]))
    first.append(log.subscribe(OTHER, -1, "z", "Shared", "Earliest"))
    first += log.publish(OTHER, -1, 2, range(4))
    first.append(log.ack(OTHER, -1, "z", [(2, 1)]))

    second: list[dict] = []
    second += log.publish(TRIMMED, 0, 8, range(10, 12))
    second += log.publish(TRIMMED, 0, 9, range(3))
    second.append(log.ack(TRIMMED, 0, "a", [(8, 2)]))
    second.append(log.ack(TRIMMED, 0, "b", [(3, 0), (8, 4)]))
    second.append(log.subscribe(TRIMMED, 0, "e", "Shared", "Earliest"))
    second.append(log.ack(TRIMMED, 1, "a", [(4, 0), (4, 1)]))
    return first, second


def _engine(records: list[dict], states: dict[tuple[str, int], PartitionState]) -> None:
    by_partition: dict[tuple[str, int], list[dict]] = {}
    for record in records:
        by_partition.setdefault((record["topic"], record["partition"]), []).append(record)
    for (topic, partition), recs in by_partition.items():
        state = states.setdefault((topic, partition), PartitionState(topic, partition))
        state.apply(EventBatch.from_records(recs), EngineSettings())


def _assert_tables_hold(spark, warehouse: Path, states: dict[tuple[str, int], PartitionState]) -> None:
    """cursors (decoded state and its columns), topic_partitions.ledgers and the projections are
    exactly the engine's."""
    cursors = {
        (r.topic, r.partition, r.subscription): r for r in read_table(spark, warehouse, "cursors").collect()
    }
    expected_keys = {(t, p, s) for (t, p), st in states.items() for s in st.cursors}
    assert set(cursors) == expected_keys
    ranges = {
        (r.topic, r.partition, r.subscription, r.range)
        for r in read_table(spark, warehouse, "ack_ranges").collect()
    }
    expected_ranges = set()
    ledger_rows = {
        (r.topic, r.partition, r.ledger_id, r.first_entry_id, r.last_entry_id, r.entries)
        for r in read_table(spark, warehouse, "ledgers").collect()
    }
    partitions = {
        (r.topic, r.partition): r for r in read_table(spark, warehouse, "topic_partitions").collect()
    }
    for (topic, partition), state in states.items():
        assert Ledgers.decode(bytes(partitions[(topic, partition)].ledgers)) == state.ledgers
        for name, cursor in state.cursors.items():
            row = cursors[(topic, partition, name)]
            assert Cursor.decode(bytes(row.state)) == cursor, (topic, partition, name)
            assert row.mark_delete == position_text(cursor.mark_delete)
            assert row.msg_backlog == cursor.backlog(state.ledgers), (topic, partition, name)
            assert row.non_contiguous_deleted_ranges == cursor.non_contiguous_deleted_ranges
            expected_ranges |= {
                (topic, partition, name, f"({ledger}:{first - 1}..{ledger}:{last}]")
                for ledger, firsts, lasts in cursor.acked.runs()
                for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True)
            }
    assert ranges == expected_ranges
    pending = {
        (r.topic, r.partition, r.subscription, r.consumer_id, r.ledger_id, r.entry_id)
        for r in read_table(spark, warehouse, "pending_acks").collect()
    }
    due = {
        (r.topic, r.partition, r.subscription, r.ledger_id, r.entry_id, r.reason)
        for r in read_table(spark, warehouse, "redeliveries").filter("delivered_at IS NULL").collect()
    }
    expected_pending, expected_due = set(), set()
    for (topic, partition), state in states.items():
        for name, sub in state.subscriptions.items():
            row = cursors[(topic, partition, name)]
            encoded = bytes(row.subscription_state) if row.subscription_state is not None else None
            assert (Subscription.decode(encoded) if encoded else Subscription()).encode() == sub.encode()
            expected_pending |= {
                (topic, partition, name, cid, pos[0], pos[1])
                for cid, consumer in sub.consumers.items()
                for pos in consumer.pending
            }
            expected_due |= {
                (topic, partition, name, pos[0], pos[1], r.reason) for pos, r in sub.redeliveries.items()
            }
    assert pending == expected_pending
    assert due == expected_due
    expected_ledgers = {
        (t, p, lid, 0, last, last + 1) for (t, p), st in states.items() for lid, last in st.ledgers
    }
    assert ledger_rows == expected_ledgers


@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_ledger_trim_goes_through_the_engine_and_the_ingest_goes_on(spark, tmp_path, capsys):
    first, second = _trim_workload()
    source, warehouse = tmp_path / "source", tmp_path / "warehouse"
    write_events(source, [first])
    ingest(spark, source, warehouse)
    states: dict[tuple[str, int], PartitionState] = {}
    _engine(first, states)
    _assert_tables_hold(spark, warehouse, states)

    held = cached_rdds(spark)  # the ingest's state, kept for its next batch
    code, report = run_json(
        capsys,
        "compact",
        "--warehouse",
        str(warehouse),
        "--json",
        "--tables",
        "cursors,topic_partitions",  # the trim covers every table it must, whatever --tables says
        "--no-vacuum",
        "--no-checkpoint",
        "--trim-ledgers-before",
        f"{TRIMMED}:0=8",
    )
    assert code == 0
    # the trim's checkpoint of the UDF's rows is freed (Spark would keep it until a driver GC)
    assert cached_rdds_when(spark, lambda rdds: rdds <= held) <= held
    expected = states[(TRIMMED, 0)].trim_ledgers(8)
    assert sorted(expected.advanced) == ["a", "d", "f"]  # b stands exactly on 5:4, c at the end
    (trim,) = report["ledger_trims"]
    assert (trim["name"], trim["topic"], trim["partition"]) == (f"{TRIMMED}-partition-0", TRIMMED, 0)
    assert trim["status"] == "trimmed"
    assert trim["ledgers_removed"] == [3, 5]
    assert trim["entries_removed"] == 15
    assert trim["cursors_advanced"] == ["a", "d", "f"]
    assert trim["ack_ranges_deleted"] >= 1
    _assert_tables_hold(spark, warehouse, states)
    # f's replay of 3:1 is gone (table and state); its pending acks stay, as Pulsar's consumer
    # holds them until acked; the nacked 3:2 stays scheduled
    assert report["tables"]["redeliveries"]["rows_trimmed_by_ledger"] == 1
    f_state = states[(TRIMMED, 0)].subscriptions["f"]
    assert sorted(map(position_text, f_state.redeliveries)) == ["3:2", "8:7"]
    assert sorted(map(position_text, f_state.consumers[1].pending)) == ["3:2", "5:0", "8:6"]
    moved = read_table(spark, warehouse, "cursors").filter(f"query_id = '{COMPACT_QUERY_ID}'").collect()
    assert sorted(r.subscription for r in moved) == ["a", "d", "f"]
    assert all(r.last_seq is not None for r in moved)

    code, again = run_json(
        capsys,
        "compact",
        "--warehouse",
        str(warehouse),
        "--json",
        "--tables",
        "cursors",
        "--no-vacuum",
        "--no-checkpoint",
        "--trim-ledgers-before",
        f"{TRIMMED}-partition-0=8",
    )
    assert code == 0
    assert [t["status"] for t in again["ledger_trims"]] == ["nothing to trim"]

    write_events(source, [second], prefix="more")
    ingest(spark, source, warehouse)
    _engine(second, states)
    _assert_tables_hold(spark, warehouse, states)
    assert position_text(states[(TRIMMED, 0)].cursors["e"].mark_delete) == "8:-1"


@pytest.fixture(scope="module")
def trim_first(spark, tmp_path_factory) -> Path:
    """The warehouse after the first file of ``_trim_workload``, ingested once for the tests
    below; each copies it and ingests the second file from a source of its own (a new query)."""
    first, _ = _trim_workload()
    root = tmp_path_factory.mktemp("trim-first")
    write_events(root / "source", [first])
    ingest(spark, root / "source", root / "warehouse")
    return root / "warehouse"


def _from_first(trim_first: Path, tmp_path: Path) -> tuple[Path, Path, dict]:
    """A copy of ``trim_first``, the source of the second file, and the engine after the first."""
    first, second = _trim_workload()
    warehouse = copy(trim_first, tmp_path / "warehouse")
    source = tmp_path / "source"
    write_events(source, [second], prefix="more")
    states: dict[tuple[str, int], PartitionState] = {}
    _engine(first, states)
    return source, warehouse, states


def _trim_options(warehouse: Path, wait: float = 120) -> CompactOptions:
    """Only the ledger trim (and a cheap pass over ``cursors``)."""
    return CompactOptions(
        warehouse=warehouse,
        tables=("cursors",),
        optimize=False,
        vacuum=False,
        checkpoint=False,
        trims=(LedgerTrim.parse(f"{TRIMMED}:0=8"),),
        trim_wait_seconds=wait,
    )


@pytest.mark.slow
def test_a_trim_committed_while_an_ingest_batch_runs_is_kept_by_that_batch(spark, trim_first, tmp_path):
    """The interleaving the protocol allows: compact records the trim and finds no batch
    running; a batch starts and reads the state; compact trims; the batch writes. The batch read
    the request, so it applied the trim before its events and its writes keep it."""
    _, second = _trim_workload()
    source, warehouse, states = _from_first(trim_first, tmp_path)

    options = _trim_options(warehouse)
    trimmer = LedgerTrimmer(spark, options, CompactReport(str(warehouse), "now"), run_id=1)
    wanted = {(TRIMMED, 0): 8}
    results = {(TRIMMED, 0): PartitionTrim(TRIMMED, 0, 8, status="nothing to trim")}
    trimmer._request(wanted)  # the steps of LedgerTrimmer.run, split around the batch
    assert trimmer._wait_for_ingest() is None

    def trim_meanwhile(batch_id: int, phase: str) -> None:
        if phase == "read state":
            trimmer._trim(wanted, results)
            assert results[(TRIMMED, 0)].status == "trimmed"

    ingest(spark, source, warehouse, on_phase=trim_meanwhile)
    assert results[(TRIMMED, 0)].status == "trimmed"
    states[(TRIMMED, 0)].trim_ledgers(8)
    _engine(second, states)
    _assert_tables_hold(spark, warehouse, states)


@pytest.mark.slow
def test_a_trim_waits_for_the_ingest_batch_running_when_it_was_requested(spark, trim_first, tmp_path):
    """A batch that read the state before the request would write it back over the trim:
    compact sees it running in the ingest's checkpoint and trims after it committed."""
    _, second = _trim_workload()
    source, warehouse, states = _from_first(trim_first, tmp_path)
    reports: list[CompactReport] = []
    errors: list[BaseException] = []

    def run_compact() -> None:
        try:
            reports.append(compact(spark, _trim_options(warehouse)))
        except BaseException as exc:  # surfaced by the test thread
            errors.append(exc)

    thread = threading.Thread(target=run_compact)
    waiting = threading.Event()

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("ledger trim: waiting for batch 0 of "):
                waiting.set()

    def compact_meanwhile(batch_id: int, phase: str) -> None:
        if phase != "read state":
            return
        thread.start()
        assert waiting.wait(timeout=180), f"compact did not wait for the running batch {errors}"
        time.sleep(1)
        assert [r.first_ledger for r in _ledger_ids(spark, warehouse)] == [3], "compact trimmed meanwhile"

    handler, logger = Waiting(), logging.getLogger("ackstate.compact")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        ingest(spark, source, warehouse, on_phase=compact_meanwhile)
        thread.join(timeout=300)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert not errors, errors
    (report,) = reports
    assert [t.status for t in report.trims] == ["trimmed"]
    _engine(second, states)  # the batch applied its events without the trim, then compact trimmed
    states[(TRIMMED, 0)].trim_ledgers(8)
    _assert_tables_hold(spark, warehouse, states)


def _ledger_ids(spark, warehouse: Path) -> list:
    from pyspark.sql import functions as F

    return (
        read_table(spark, warehouse, "ledgers")
        .filter((F.col("topic") == TRIMMED) & (F.col("partition") == 0))
        .agg(F.min("ledger_id").alias("first_ledger"))
        .collect()
    )


@pytest.mark.slow
def test_a_restarted_batch_applies_the_trims_its_first_run_read_and_no_later_one(spark, trim_first, tmp_path):
    """A batch interrupted after its ``cursors`` write and repeated after a trim was requested:
    the repeat reads the versions the first run recorded in its commits, so it writes the
    untrimmed state the first run began (its cursors are already in the table); compact,
    deferred while the batch stood interrupted, trims once it committed."""
    _, second = _trim_workload()
    source, warehouse, states = _from_first(trim_first, tmp_path)
    ingest(spark, source, warehouse, write_threads=1, kill_at="0:merge cursors")
    report = compact(spark, _trim_options(warehouse, wait=1))
    (trim,) = report.trims
    assert trim.status.startswith("deferred: ingest batch 0 of "), trim.status

    ingest(spark, source, warehouse, write_threads=1)
    _engine(second, states)
    _assert_tables_hold(spark, warehouse, states)

    report = compact(spark, _trim_options(warehouse, wait=1))
    assert [t.status for t in report.trims] == ["trimmed"]
    states[(TRIMMED, 0)].trim_ledgers(8)
    _assert_tables_hold(spark, warehouse, states)


def test_trimming_a_topic_that_is_not_there_is_an_error(spark, tmp_path, capsys):
    # a warehouse that holds no topic at all (the demo's took a minute to make, for an error)
    assert main(["init", "--warehouse", str(tmp_path)]) == 0
    code = main(["compact", "--warehouse", str(tmp_path), "--trim-ledgers-before", "nope=3", "--no-vacuum"])
    assert code == 2
    assert "no such topic partition" in capsys.readouterr().err


# ---- next to a running ingest --------------------------------------------------------------
@pytest.mark.slow
def test_compaction_during_ingest_loses_nothing(spark, demo, tmp_path):
    """`ackstate ingest --trigger continuous` in its own process takes the demo's files as they
    arrive while this process compacts the same warehouse again and again; the tables end as
    those of the demo's ingest, which ran alone."""
    expected = snapshot(demo, exclude=LINEAGE)
    staging = sorted((demo.parent / "demo-events").glob("*.jsonl"))
    assert len(staging) == DEMO_FILES
    source, warehouse = tmp_path / "source", tmp_path / "warehouse"
    source.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "jobs.cli",
        "ingest",
        "--source",
        str(source),
        "--warehouse",
        str(warehouse),
        "--trigger",
        "continuous",
        "--processing-time",
        "1 second",
        "--max-files-per-trigger",
        "1",
    ]
    conf = tmp_path / "ingest.toml"
    # a second JVM beside the tests' own; a few batches, so C1 alone, as a short ingest gets it
    # (jobs.ingest.query.SHORT_INGEST_BYTES: the continuous trigger keeps both compilers)
    conf.write_text(f'[spark]\ndriver.memory = "2g"\ndriver.extraJavaOptions = "{QUICK_JIT}"\n')
    cmd += ["--conf", str(conf)]
    log_path = tmp_path / "ingest.log"
    with log_path.open("w") as log_file:
        ingest_proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=dict(os.environ))
    stop = threading.Event()
    runs: list[int] = []
    errors: list[BaseException] = []

    def created(name: str) -> bool:
        # not DeltaTable.isDeltaTable: Delta caches a path's log, and a path asked about before
        # the ingest created the table would stay "not a Delta table" in this JVM
        return (warehouse / name / "_delta_log" / "00000000000000000000.json").is_file()

    # the tables every batch writes; VACUUM has nothing to delete within its retention anyway
    options = CompactOptions(
        warehouse=warehouse,
        tables=(
            "cursors",
            "topic_partitions",
            "ack_ranges",
            "ledgers",
            "rejected_events",
            "ingest_batches",
        ),
        vacuum=False,
    )

    def compact_loop() -> None:
        try:
            while not stop.is_set():
                if all(created(name) for name in options.tables):
                    report = compact(spark, options)
                    runs.append(report.totals["conflicts_retried"])
                else:
                    time.sleep(0.5)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    compactor = threading.Thread(target=compact_loop, daemon=True)
    compactor.start()
    try:
        # the files arrive one by one while the ingest runs, renamed in whole
        for path in staging:
            deadline = time.time() + 60
            while not created("cursors") and time.time() < deadline:
                time.sleep(0.5)
            staged = tmp_path / path.name
            staged.write_bytes(path.read_bytes())
            staged.rename(source / path.name)
            time.sleep(3)
        deadline = time.time() + 600
        while time.time() < deadline:
            assert ingest_proc.poll() is None, log_path.read_text()[-3000:]
            if (
                created("ingest_batches")
                and read_table(spark, warehouse, "ingest_batches").count() >= DEMO_FILES
            ):
                break
            time.sleep(1)
    finally:
        stop.set()
        compactor.join(timeout=600)
        ingest_proc.send_signal(signal.SIGINT)
        try:
            ingest_proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            ingest_proc.kill()
    assert not errors, errors
    assert runs, "the compactor never ran"
    # and once more after the ingest's last batch: still nothing a query sees has changed
    compact(spark, replace(options, tables=tuple(TABLES)))
    assert_same_tables(snapshot(warehouse, exclude=LINEAGE), expected)
    # the two writers really interleaved: compaction commits sit between the ingest's commits
    history = DeltaTable.forPath(spark, table_path(warehouse, "cursors")).history().collect()
    ingest_versions = [h.version for h in history if (h.userMetadata or "").startswith("ackstate-ingest")]
    between = [
        h.version
        for h in history
        if (h.userMetadata or "").startswith(COMPACT_QUERY_ID)
        and min(ingest_versions) < h.version < max(ingest_versions)
    ]
    assert between, [
        (h.version, h.operation, h.userMetadata) for h in sorted(history, key=lambda h: h.version)
    ]


# ---- time travel ----------------------------------------------------------------------------
@pytest.mark.slow  # many micro-batches: minutes on 2 cores
def test_time_travel_returns_the_earlier_state_after_compaction(spark, demo, tmp_path, capsys):
    """`internal-stats --as-of TIMESTAMP` answers with the state after the first micro-batch,
    as the engine computes it from the first file alone, also after OPTIMIZE and VACUUM."""
    warehouse = copy(demo, tmp_path / "warehouse")
    assert main(["compact", "--warehouse", str(warehouse)]) == 0
    capsys.readouterr()
    (stamp,) = (
        DeltaTable.forPath(spark, table_path(warehouse, "ingest_batches"))
        .history()
        .where("operation = 'WRITE'")
        .orderBy("version")
        .selectExpr("date_format(timestamp, 'yyyy-MM-dd HH:mm:ss.SSS')")
        .first()
    )

    records = list(
        iter_events(
            events=600, topics=2, partitions=2, subscriptions_per_topic=2, malformed_rate=0.02, seed=5
        )
    )
    first_file = [r for r in records[: 600 // DEMO_FILES] if MALFORMED_KEY not in r]
    states: dict[tuple[str, int], PartitionState] = {}
    _engine(first_file, states)

    code = main(["internal-stats", "--warehouse", str(warehouse), "--as-of", stamp])
    then = json.loads(capsys.readouterr().out)
    assert code == 0
    code = main(["internal-stats", "--warehouse", str(warehouse)])
    now = json.loads(capsys.readouterr().out)
    checked = differs = 0
    for (topic, partition), state in states.items():
        name = topic if partition < 0 else f"{topic}-partition-{partition}"
        assert then[name]["lastConfirmedEntry"] == position_text(state.ledgers.last_position)
        for sub, cursor in state.cursors.items():
            stats = then[name]["cursors"][sub]
            assert stats["markDeletePosition"] == position_text(cursor.mark_delete), (name, sub)
            assert stats["individuallyDeletedMessages"] == cursor.individually_deleted_messages
            differs += now[name]["cursors"][sub] != stats
            checked += 1
    assert checked >= 4 and differs >= 1

    cursor_history = DeltaTable.forPath(spark, table_path(warehouse, "cursors")).history().collect()
    version = min(h.version for h in cursor_history if h.operation in ("MERGE", "WRITE"))  # a batch's
    code = main(["stats", "--warehouse", str(warehouse), "--as-of", str(version)])
    assert code == 0
    old_stats = json.loads(capsys.readouterr().out)
    for (topic, partition), state in states.items():
        name = topic if partition < 0 else f"{topic}-partition-{partition}"
        for sub, cursor in state.cursors.items():
            assert old_stats[name]["subscriptions"][sub]["msgBacklog"] == cursor.backlog(state.ledgers)
