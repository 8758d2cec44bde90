"""Small warehouses built by the real ingest, shared by the compaction, SQL and report tests.

Building one costs an ingest run (seconds per micro-batch), so the generated demo warehouse is
built once per test session and copied (``shutil.copytree`` keeps file times, and with them
Delta's commit timestamps) by every test that changes it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from engine import EngineSettings
from jobs.bench.generate import generate, iter_events
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.arrow_merge import read_files
from jobs.platform.rewrite import data_file
from jobs.platform.tables import read_table, table_path
from schemas.tables import TABLES

DEMO_FILES = 3
_DEMO: dict[str, Path] = {}
REFERENCE_FILES = 2
_REFERENCE: dict[str, tuple[Path, Path]] = {}

LINEAGE = frozenset(
    {"query_id", "batch_id", "updated_at", "rejected_at", "started_at", "finished_at", "duration_ms",
     "rows_per_second"}
)  # fmt: skip
"""Columns that say which run wrote a row and when: two runs that agree on state differ there."""
BATCH_FIGURES = frozenset(
    {"input_rows", "applied_rows", "rejected_rows", "stale_rows", "duplicate_rows", "partitions_touched",
     "cursors_touched"}
)  # fmt: skip
"""``ingest_batches`` figures that depend on how the input was cut into micro-batches."""


class SimulatedCrash(RuntimeError):
    """What ``crash_at`` raises: the batch fails there, as in a crash, and the streaming
    checkpoint keeps it uncommitted."""


def crash_at(point: str) -> Callable[[int, str], None]:
    """A ``BatchWriter`` ``on_phase`` that fails the batch right after ``<batch id>:<phase>``
    (e.g. ``1:merge cursors``)."""

    def on_phase(batch_id: int, phase: str) -> None:
        if f"{batch_id}:{phase}" == point:
            raise SimulatedCrash(f"simulated crash after {phase} of batch {batch_id}")

    return on_phase


def ingest(
    spark: SparkSession,
    source: Path,
    warehouse: Path,
    *,
    write_threads: int = 4,
    kill_at: str | None = None,
    on_phase: Callable[[int, str], None] | None = None,
    warm_state: bool = True,
    settings: EngineSettings | None = None,
    write_mode: str = IngestOptions.write_mode,
    single_partition_rows: int = IngestOptions.single_partition_rows,
) -> BatchWriter:
    """``ackstate ingest --trigger available-now --max-files-per-trigger 1``, in this session;
    the query's ``BatchWriter``.

    ``kill_at`` (``batch:phase``) makes the batch fail there (in process, like a crash: the
    checkpoint keeps the batch uncommitted); ``on_phase`` runs after each phase of each batch.
    """
    options = IngestOptions(
        source=str(source),
        warehouse=warehouse,
        max_files_per_trigger=1,
        write_threads=write_threads,
        warm_state=warm_state,
        write_mode=write_mode,
        single_partition_rows=single_partition_rows,
        settings=settings if settings is not None else EngineSettings(),
    )

    def phases(batch_id: int, phase: str) -> None:
        if on_phase is not None:
            on_phase(batch_id, phase)
        if kill_at is not None:
            crash_at(kill_at)(batch_id, phase)

    writer = BatchWriter(options, on_phase=phases)
    query = start_ingest(spark, options, writer)
    try:
        query.awaitTermination()
    except Exception:  # the simulated crash, as StreamingQueryException
        if kill_at is None:
            raise
    if kill_at is None:
        assert query.exception() is None, query.exception()
    else:
        assert "simulated crash" in str(query.exception()), query.exception()
    return writer


def demo_warehouse(spark: SparkSession, root: Path) -> Path:
    """A generated workload (2 topics x 2 partitions, 2 subscriptions each, some malformed
    records) ingested in ``DEMO_FILES`` micro-batches; built once per session under ``root``."""
    if "demo" not in _DEMO:
        source, warehouse = root / "demo-events", root / "demo-warehouse"
        generate(
            source,
            events=600,
            topics=2,
            partitions=2,
            subscriptions_per_topic=2,
            malformed_rate=0.02,
            seed=5,
            files=DEMO_FILES,
        )
        ingest(spark, source, warehouse)
        _DEMO["demo"] = warehouse
    return _DEMO["demo"]


def reference_warehouse(spark: SparkSession, root: Path) -> tuple[Path, Path]:
    """1,500 generated events (3 topics x 2 partitions, 2 subscriptions each) in
    ``REFERENCE_FILES`` files, and the warehouse a local ingest makes of them, one micro-batch
    per file: ``(events, warehouse)``, built once per session under ``root``.

    The tests that run these events somewhere else (a Spark standalone cluster, S3) compare
    with it; one local run of a few micro-batches serves them all instead of one per module.
    Read only: a test that changes it works on a ``copy``.
    """
    if "reference" not in _REFERENCE:
        source, warehouse = root / "reference-events", root / "reference-warehouse"
        events = list(iter_events(events=1500, topics=3, partitions=2, subscriptions_per_topic=2, seed=7))
        size = -(-len(events) // REFERENCE_FILES)
        write_events(source, [events[i : i + size] for i in range(0, len(events), size)])
        ingest(spark, source, warehouse)
        _REFERENCE["reference"] = (source, warehouse)
    return _REFERENCE["reference"]


def copy(warehouse: Path, to: Path) -> Path:
    shutil.copytree(warehouse, to)
    return to


def snapshot(warehouse: Path, *, exclude: frozenset[str] = frozenset()) -> dict[str, list]:
    """Every table's rows (all columns but ``exclude``), sorted: what 'the same tables' means.

    Read from the warehouse's files (``delta_rows``), with no Spark job: a Spark read of a
    warehouse the JVM has not read yet builds each table's snapshot cold, three Spark jobs a
    table, 5.5-8.6 s for the 14 tables, and those reads were a third of ``tests/jobs/ingest`` and
    ``tests/jobs/compact`` (README, "Where the time goes"). A warehouse on S3 is downloaded
    first (``tests/s3``). Each value is written as ``plain`` writes it, as ``spark_snapshot``
    writes Spark's rows (``test_warehouse_reader.py`` checks that the two give the same rows)."""
    return {name: table_rows(warehouse / name, name, exclude=exclude) for name in TABLES}


def table_rows(
    table: Path, name: str, version: int | None = None, *, exclude: frozenset[str] = frozenset()
) -> list[tuple[str, ...]]:
    """One local table's rows (``delta_rows``, at ``version`` or its latest), sorted, each
    value as ``snapshot`` writes it."""
    columns = [f.name for f in TABLES[name].fields if f.name not in exclude]
    rows = delta_rows(table, name, version).select(columns).to_pylist()
    return plain_rows([row[c] for c in columns] for row in rows)


def spark_snapshot(
    spark: SparkSession, warehouse: Path | str, *, exclude: frozenset[str] = frozenset()
) -> dict[str, list]:
    """``snapshot`` of any warehouse as Spark reads it (the check of ``delta_rows``)."""
    out = {}
    for name, schema in TABLES.items():
        columns = [f.name for f in schema.fields if f.name not in exclude]
        out[name] = plain_rows(read_table(spark, warehouse, name).select(*columns).collect())
    return out


def plain_rows(rows: Iterable[Sequence[Any]]) -> list[tuple[str, ...]]:
    """Rows of either reader as ``snapshot`` compares them: each value as JSON of ``plain``,
    the rows sorted."""
    return sorted(tuple(json.dumps(plain(v)) for v in row) for row in rows)


def plain(value: Any) -> Any:
    """A table value as JSON can hold it, the same whichever reader gave it: binary as hex, a
    timestamp as its UTC instant (Spark gives a naive local time, Arrow an aware one)."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def delta_rows(table: Path, name: str, version: int | None = None) -> pa.Table:
    """The rows of the local Delta table ``table`` (one of ``TABLES``, ``name``) at its latest
    version or at ``version``, from its files, with no Spark job: the log replayed from its last
    checkpoint (the files it lists, then each later commit's adds and removes in order; from
    the first commit when that checkpoint is later than ``version``), and those Parquet files
    read in the table's types (``jobs.platform.arrow_merge.read_files``).

    What the tables use, and no more: no partition columns, no deletion vectors and no column
    mapping (reader version 1), classic checkpoints. Anything else fails here, loudly."""
    import pyarrow.parquet as pq

    log = table / "_delta_log"
    files: dict[str, dict[str, Any]] = {}
    checkpoint = -1
    last = json.loads((log / "_last_checkpoint").read_text()) if (log / "_last_checkpoint").exists() else None
    if last is not None and (version is None or int(last["version"]) <= version):
        checkpoint, parts = int(last["version"]), last.get("parts")
        names = (
            [f"{checkpoint:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
            if parts
            else [f"{checkpoint:020d}.checkpoint.parquet"]
        )
        for part in names:
            for add in pq.read_table(log / part, columns=["add"]).column("add").to_pylist():
                if add is not None:
                    files[add["path"]] = add
    commits = sorted((int(p.stem), p) for p in log.glob("*.json") if p.stem.isdigit())
    if not commits and checkpoint < 0:
        raise FileNotFoundError(f"no Delta table at {table}")
    if checkpoint < 0 and commits[0][0] != 0:
        raise FileNotFoundError(f"{table}: the log's first commits are gone, and no checkpoint covers them")
    for at, commit in commits:
        if at <= checkpoint:
            continue
        if version is not None and at > version:
            break
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "protocol" in action:
                assert action["protocol"]["minReaderVersion"] == 1, action["protocol"]
            if "add" in action:
                files[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                files.pop(action["remove"]["path"], None)
    for add in files.values():
        assert not add.get("deletionVector") and not add.get("partitionValues"), add
    return read_files([data_file(str(table), path) for path in files], TABLES[name])


def assert_same_tables(
    actual: dict[str, list], expected: dict[str, list], tables: Sequence[str] | None = None
) -> None:
    """Two ``snapshot``s hold the same rows in every table (or in ``tables``); a failure names
    each differing table and prints the rows found only on one side (a few of each)."""
    differing = []
    for name in tables if tables is not None else sorted(set(actual) | set(expected)):
        extra = Counter(actual.get(name, [])) - Counter(expected.get(name, []))
        missing = Counter(expected.get(name, [])) - Counter(actual.get(name, []))
        if extra or missing:
            differing.append(
                f"{name}: {sum(extra.values())} row(s) only in actual, "
                f"{sum(missing.values())} only in expected"
                + "".join(f"\n  + {row}" for row in sorted(extra)[:5])
                + "".join(f"\n  - {row}" for row in sorted(missing)[:5])
            )
    assert not differing, "tables differ:\n" + "\n".join(differing)


def write_events(source: Path, files: list[list[dict[str, Any]]], prefix: str = "events") -> None:
    """One JSON Lines file per list, with increasing modification times (read in that order)."""
    source.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for i, records in enumerate(files):
        path = source / f"{prefix}-{i:03d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        stamp = now - (len(files) - i)
        os.utime(path, (stamp, stamp))


def event_source(tmp_path_factory: Any, name: str, files: list[list[dict[str, Any]]]) -> Path:
    """A fresh directory holding ``files`` as ``write_events`` writes them: a module's source."""
    path = tmp_path_factory.mktemp(name) / "events"
    write_events(path, files)
    return path


def append_rows(spark: SparkSession, warehouse: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """Rows of the table's exact schema, appended as a writer of that table would."""
    spark.createDataFrame(rows, TABLES[name]).write.format("delta").mode("append").save(
        table_path(warehouse, name)
    )


def commit_actions(warehouse: str | Path, name: str) -> list[list[dict[str, Any]]]:
    """The actions of each commit in the table's Delta log (``commitInfo``, ``add``, ...), in
    version order, read from its JSON files: what a commit did, without Spark."""
    log_dir = Path(table_path(warehouse, name)) / "_delta_log"
    return [
        [json.loads(line) for line in commit.read_text().splitlines() if line.strip()]
        for commit in sorted(log_dir.glob("*.json"))
    ]


def utc(year: int, month: int, day: int, hour: int = 0) -> datetime:
    """A naive UTC datetime, as Spark returns and takes timestamps in this session (UTC)."""
    return datetime(year, month, day, hour, tzinfo=UTC).replace(tzinfo=None)


class EventLog:
    """Contract-shaped events with a per-partition ``seq`` and event clock, for hand-made logs."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.seq: dict[tuple[str, int], int] = {}
        self.sequence: dict[tuple[str, int], int] = {}  # the producer's sequence id
        self.clock = start_ms
        self.n = 0

    def event(self, type_: str, topic: str, partition: int, **fields: Any) -> dict[str, Any]:
        key = (topic, partition)
        self.seq[key] = self.seq.get(key, 0) + 1
        self.clock += 10
        self.n += 1
        return {
            "event_id": f"hand-{self.n}",
            "seq": self.seq[key],
            "event_time": self.clock,
            "type": type_,
            "topic": topic,
            "partition": partition,
            **fields,
        }

    def subscribe(self, topic: str, partition: int, sub: str, sub_type: str, initial: str) -> dict[str, Any]:
        return self.event(
            "SUBSCRIBE",
            topic,
            partition,
            subscription=sub,
            consumer_id=1,
            consumer_name=f"{sub}-c1",
            sub_type=sub_type,
            initial_position=initial,
        )

    def publish(self, topic: str, partition: int, ledger: int, entries: range) -> list[dict[str, Any]]:
        out = []
        for entry in entries:
            key = (topic, partition)
            self.sequence[key] = self.sequence.get(key, -1) + 1
            out.append(
                self.event(
                    "PUBLISH",
                    topic,
                    partition,
                    ledger_id=ledger,
                    entry_id=entry,
                    producer_name="producer-1",
                    sequence_id=self.sequence[key],
                )
            )
        return out

    def ack(
        self, topic: str, partition: int, sub: str, positions: list[tuple[int, int]], cumulative: bool = False
    ) -> dict[str, Any]:
        return self.event(
            "ACK",
            topic,
            partition,
            subscription=sub,
            consumer_id=1,
            ack_type="Cumulative" if cumulative else "Individual",
            message_ids=[{"ledger_id": lid, "entry_id": eid} for lid, eid in positions],
        )


def cached_rdds(spark: SparkSession) -> set[int]:
    """The ids of the RDDs with blocks in the block manager now. Delta's cache of each table's
    latest snapshot (``Delta Table State #<version> - <log>``) is Delta's to keep, and not
    listed."""
    infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()  # type: ignore[attr-defined]
    return {
        info.id()
        for info in infos
        if info.numCachedPartitions() > 0 and not info.name().startswith("Delta Table State #")
    }


def cached_rdds_when(
    spark: SparkSession, done: Callable[[set[int]], bool], seconds: float = 10.0
) -> set[int]:
    """``cached_rdds`` once ``done`` holds of them, or after ``seconds``:
    ``jobs.platform.tables.release`` does not wait for the blocks to go."""
    deadline = time.monotonic() + seconds
    while not done(cached := cached_rdds(spark)) and time.monotonic() <= deadline:
        time.sleep(0.1)
    return cached
