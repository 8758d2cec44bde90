"""The whole path on S3: every command a user runs, against an S3 API through Hadoop's S3A.

The source, the checkpoint, the warehouse and the report all live in one bucket of a local
S3 server (moto). ``ackstate ingest`` runs as a process of its own whose only S3 settings come
from ``[spark]`` of its ``--conf``, as a user's would; the other commands run in this process,
on the suite's session pointed at the same server (``s3_spark``), each with its own S3 paths.
What they leave must be what the same events give on a local warehouse: the same tables, row
for row, and the same answers from ``stats``, ``internal-stats`` and ``sql``.

Why only the ingest in a process: every command builds its session from ``--conf`` the same way
(``jobs.cli.main`` then ``jobs.platform.session.get_spark``), so one process proves that path on
S3, and a cold JVM with S3A costs about half a minute here (seven processes took 239 s of a
36-minute suite, 2026-12-02). What differs between the commands, their paths, is tested here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.cli import main
from jobs.compact.compaction import CompactOptions
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform import checkpoints
from tests.jobs.warehouse import BATCH_FIGURES, assert_same_tables, reference_warehouse, snapshot
from tests.jobs.warehouse import LINEAGE as WRITER_LINEAGE
from tests.s3.conftest import BUCKET
from tests.s3.server import S3Server

LINEAGE = WRITER_LINEAGE | BATCH_FIGURES  # the runs cut the input into micro-batches differently
WAREHOUSE = f"s3a://{BUCKET}/warehouse"
CHECKPOINT = f"s3a://{BUCKET}/checkpoints/ingest-one"
QUERY = (
    "SELECT topic, partition, subscription, mark_delete_ledger_id, mark_delete_entry_id FROM cursors "
    "ORDER BY topic, partition, subscription"
)


@pytest.fixture(scope="module")
def source(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Path:
    """The session's reference events as local files, and the same files under
    ``s3a://<bucket>/events``, put one second apart: the stream reads files in modification
    order, which S3 keeps to the second."""
    path = reference_warehouse(spark, tmp_path_factory.getbasetemp())[0]
    client = s3.client()
    for k, file in enumerate(sorted(path.glob("*.jsonl"))):
        if k:
            time.sleep(1.1)
        client.upload_file(str(file), BUCKET, f"events/{file.name}")
    return path


@pytest.fixture(scope="module")
def local_warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a local ingest makes of ``source``: the session's reference warehouse, which
    tests/cluster compares with too (one local ingest for both). Only read here."""
    return reference_warehouse(spark, tmp_path_factory.getbasetemp())[1]


def ackstate(conf: Path, *args: str) -> str:
    """One ``ackstate`` command in a process of its own; its standard output."""
    cmd = [sys.executable, "-m", "jobs.cli", *args, "--warehouse", WAREHOUSE, "--conf", str(conf)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{args[0]}: {done.stderr[-3000:]}"
    return done.stdout


def stored(s3: S3Server, uri: str, into: Path) -> dict[str, list]:
    """``snapshot`` of the warehouse at ``uri`` as the server holds it: its objects downloaded
    into ``into`` (which must not exist yet) and read from those files, with no Spark job (a cold
    Spark read of the 14 tables is three jobs each)."""
    return snapshot(s3.download(uri, into), exclude=LINEAGE)


def in_process(capsys: pytest.CaptureFixture[str], warehouse: Path | str, *args: str) -> str:
    """One command on ``warehouse``, in this process's session; its standard output."""
    capsys.readouterr()
    assert main([*args, "--warehouse", str(warehouse)]) == 0, capsys.readouterr().err[-3000:]
    return capsys.readouterr().out


def test_every_command_on_s3_gives_what_a_local_warehouse_gives(
    s3_spark: SparkSession,
    s3: S3Server,
    source: Path,
    local_warehouse: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conf = tmp_path / "s3.toml"
    # quoted keys: `endpoint` and `endpoint.region` cannot both be dotted TOML keys
    settings = "".join(f'"hadoop.{key}" = "{value}"\n' for key, value in s3.hadoop_settings().items())
    conf.write_text(f"[spark]\n{settings}[ingest]\nmax_files_per_trigger = 1\n")

    in_process(capsys, WAREHOUSE, "init")
    ackstate(conf, "ingest", "--source", f"s3a://{BUCKET}/events", "--checkpoint", CHECKPOINT)
    local = snapshot(local_warehouse, exclude=LINEAGE)
    assert_same_tables(stored(s3, WAREHOUSE, tmp_path / "ingested"), local)
    assert sum(len(rows) for rows in local.values()) > 100

    # the checkpoint is on S3 and registered in the warehouse, where `compact` looks for it
    objects = {o["Key"] for o in s3.client().list_objects_v2(Bucket=BUCKET)["Contents"]}
    assert "checkpoints/ingest-one/commits/1" in objects
    [entry] = [k for k in objects if k.startswith("warehouse/_checkpoints/_registry/")]
    body = s3.client().get_object(Bucket=BUCKET, Key=entry)["Body"].read()
    assert json.loads(body)["checkpoint"] == CHECKPOINT
    # read back through Hadoop's FileSystem, as the ledger-trim protocol does
    assert checkpoints.registered(WAREHOUSE) == [CHECKPOINT]
    assert checkpoints.uncommitted_batch(CHECKPOINT) is None and checkpoints.running_batches(WAREHOUSE) == []

    for command in (["stats"], ["internal-stats"]):
        assert json.loads(in_process(capsys, WAREHOUSE, *command)) == json.loads(
            in_process(capsys, local_warehouse, *command)
        ), command
    rows = in_process(capsys, WAREHOUSE, "sql", "--format", "json", QUERY)  # JSON Lines, in QUERY's order
    assert rows == in_process(capsys, local_warehouse, "sql", "--format", "json", QUERY)
    assert len(rows.splitlines()) == len(local["cursors"])

    in_process(capsys, WAREHOUSE, "compact")
    assert_same_tables(stored(s3, WAREHOUSE, tmp_path / "compacted"), local)

    printed = in_process(capsys, WAREHOUSE, "report", "--out", f"s3a://{BUCKET}/report")
    assert f"s3a://{BUCKET}/report/report.html" in printed
    html = s3.client().get_object(Bucket=BUCKET, Key="report/report.html")["Body"].read()
    png = s3.client().get_object(Bucket=BUCKET, Key="report/report.png")["Body"].read()
    assert b"<html" in html.lower() and png.startswith(b"\x89PNG")


def test_compaction_inside_a_continuous_ingest_on_s3_loses_nothing(
    s3_spark: SparkSession,
    s3: S3Server,
    source: Path,
    local_warehouse: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``[ingest] compact_every``: the query compacts between its micro-batches, the one writer
    of every table. A separate ``ackstate compact`` refuses meanwhile, unless a log store is
    configured; the tables end as a plain run's."""
    warehouse, events = f"s3a://{BUCKET}/continuous/warehouse", f"s3a://{BUCKET}/continuous/events"
    options = IngestOptions(
        source=events,
        warehouse=warehouse,
        trigger="continuous",
        processing_time="1 second",
        max_files_per_trigger=1,
        compact_every=1,
        compaction=CompactOptions(warehouse=warehouse),
    )
    client = s3.client()
    files = sorted(source.glob("*.jsonl"))
    client.upload_file(str(files[0]), BUCKET, f"continuous/events/{files[0].name}")
    phases: list[tuple[int, str]] = []
    writer = BatchWriter(options, on_phase=lambda batch, phase: phases.append((batch, phase)))
    query = start_ingest(s3_spark, options, writer)
    try:
        query.processAllAvailable()
        # beside the live query, on S3 and with Delta's default log store: refused
        capsys.readouterr()
        assert main(["compact", "--warehouse", warehouse]) == 2
        err = capsys.readouterr().err
        assert "an ingest is running there" in err and "[ingest] compact_every" in err, err
        # a log store the user configured (`[spark]` of a process of its own) is passed
        # through, and compaction runs; this one is Delta's, safe within one JVM as here
        s3_spark.conf.set("spark.delta.logStore.s3a.impl", "io.delta.storage.S3SingleDriverLogStore")
        try:
            assert main(["compact", "--warehouse", warehouse]) == 0
        finally:
            s3_spark.conf.unset("spark.delta.logStore.s3a.impl")
        time.sleep(1.1)  # a later modification time than the first file's
        client.upload_file(str(files[1]), BUCKET, f"continuous/events/{files[1].name}")
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert_same_tables(stored(s3, warehouse, tmp_path / "stored"), snapshot(local_warehouse, exclude=LINEAGE))
    # both batches compacted inside the query, after their writes
    assert [b for b, phase in phases if phase == "compact"] == [0, 1], phases
