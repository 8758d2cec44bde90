"""``ackstate stats`` / ``internal-stats`` end to end over real Delta tables, through the CLI.

The rows are written as the ingest job writes them (engine-encoded ``state`` and ``ledgers``),
so these tests pin the reading side: topic naming, filters, exit codes and time travel.
The JSON shape itself is covered without Spark in tests/jobs/read/test_stats_format.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from engine import Cursor, Ledgers, MessageId, position_text
from jobs.cli import main
from jobs.platform.tables import ensure_tables, table_path
from schemas.tables import TABLES
from tests.jobs.warehouse import demo_warehouse

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

PLAIN = "persistent://public/default/plain"
PARTITIONED = "persistent://public/default/parted"


def ledgers_of(entries: int, ledger_id: int = 10) -> Ledgers:
    ledgers = Ledgers()
    for entry in range(entries):
        ledgers.publish((ledger_id, entry))
    return ledgers


def partition_row(topic: str, partition: int, ledgers: Ledgers) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "last_seq": 1,
        "last_event_time": 1_000_000,
        "ledgers": ledgers.encode(),
        "query_id": "test",
        "batch_id": 0,
        "updated_at": datetime.now(UTC).replace(tzinfo=None),
    }


def cursor_row(
    topic: str, partition: int, subscription: str, cursor: Cursor, ledgers: Ledgers
) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "subscription": subscription,
        "sub_type": cursor.sub_type,
        "mark_delete": position_text(cursor.mark_delete),
        "mark_delete_ledger_id": cursor.mark_delete[0],
        "mark_delete_entry_id": cursor.mark_delete[1],
        "state": cursor.encode(),
        "state_format": 1,
        "msg_backlog": cursor.backlog(ledgers),
        "non_contiguous_deleted_ranges": cursor.non_contiguous_deleted_ranges,
        "partial_batch_entries": 0,
        "last_seq": 1,
        "last_event_time": 1_000_000,
        "query_id": "test",
        "batch_id": 0,
        "updated_at": datetime.now(UTC).replace(tzinfo=None),
    }


def acked(ledgers: Ledgers, sub_type: str, *entries: int) -> Cursor:
    """A cursor opened at Earliest on ledger 10 with the given entries individually acked."""
    cursor = Cursor.subscribe(sub_type, "Earliest", ledgers, ledgers.last_position)
    if entries:
        ids = [MessageId((10, e)) for e in entries]
        cursor.ack(ids, ledgers, ledgers.last_position, False)
    return cursor


def write(spark: SparkSession, warehouse: Path, name: str, rows: list[dict[str, Any]], mode: str) -> None:
    spark.createDataFrame(rows, TABLES[name]).write.format("delta").mode(mode).save(
        table_path(warehouse, name)
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any, str]:
    """``ackstate <argv>``: exit status, stdout parsed as JSON (None if empty), stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def history(spark: SparkSession, warehouse: Path, name: str) -> list[tuple[int, str, str]]:
    """(version, operation, commit time as Delta accepts it back) of a table, oldest first."""
    rows = (
        DeltaTable.forPath(spark, table_path(warehouse, name))
        .history()
        .selectExpr("version", "operation", "date_format(timestamp, 'yyyy-MM-dd HH:mm:ss.SSS') AS ts")
        .orderBy("version")
        .collect()
    )
    return [(row.version, row.operation, row.ts) for row in rows]


def fill(spark: SparkSession, warehouse: Path) -> Path:
    """PLAIN (non-partitioned, one Exclusive sub with a hole) and PARTITIONED (partitions 0, 1),
    one commit to each table."""
    five = ledgers_of(5)
    three = ledgers_of(3)
    write(
        spark,
        warehouse,
        "topic_partitions",
        [
            partition_row(PLAIN, -1, five),
            partition_row(PARTITIONED, 0, three),
            partition_row(PARTITIONED, 1, three),
        ],
        "append",
    )
    write(
        spark,
        warehouse,
        "cursors",
        [
            cursor_row(PLAIN, -1, "sub", acked(five, "Exclusive", 2), five),
            cursor_row(PARTITIONED, 0, "work", acked(three, "Shared", 0), three),
            cursor_row(PARTITIONED, 1, "work", acked(three, "Shared"), three),
            cursor_row(PARTITIONED, 1, "audit", acked(three, "Failover", 0, 1, 2), three),
        ],
        "append",
    )
    return warehouse


@pytest.fixture(scope="module")
def filled(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One filled warehouse shared by the read-only tests of this module (tables cost seconds)."""
    warehouse = tmp_path_factory.mktemp("stats") / "warehouse"
    ensure_tables(spark, warehouse)
    return fill(spark, warehouse)


def test_internal_stats_of_every_topic(capsys, filled):
    code, out, _ = run(capsys, "internal-stats", "--warehouse", str(filled))
    assert code == 0
    assert set(out) == {PLAIN, f"{PARTITIONED}-partition-0", f"{PARTITIONED}-partition-1"}
    assert out[PLAIN] == {
        "numberOfEntries": 5,
        "lastConfirmedEntry": "10:4",
        "ledgers": [{"ledgerId": 10, "entries": 5}],
        "cursors": {
            "sub": {
                "markDeletePosition": "10:-1",
                "readPosition": "10:0",
                "individuallyDeletedMessages": "[(10:1..10:2]]",
                "totalNonContiguousDeletedMessagesRange": 1,
            }
        },
    }
    assert out[f"{PARTITIONED}-partition-1"]["cursors"]["audit"]["markDeletePosition"] == "10:2"
    assert out[f"{PARTITIONED}-partition-1"]["cursors"]["audit"]["readPosition"] == "10:3"


def test_stats_with_filters_and_not_found(capsys, filled, tmp_path):
    code, out, _ = run(capsys, "stats", "--warehouse", str(filled))
    assert code == 0
    # the cursors are written directly, with no consumer rows: no consumer is connected
    assert out[PLAIN]["subscriptions"]["sub"] == {
        "msgBacklog": 4,
        "type": "Exclusive",
        "unackedMessages": 0,
        "nonContiguousDeletedMessagesRanges": 1,
        "consumers": [],
    }
    assert out[f"{PARTITIONED}-partition-0"]["subscriptions"]["work"] == {
        "msgBacklog": 2,
        "type": "Shared",
        "nonContiguousDeletedMessagesRanges": 0,
        "unackedMessages": 0,
        "consumers": [],
    }

    code, out, _ = run(capsys, "stats", "--warehouse", str(filled), "--topic", PARTITIONED)
    assert (code, set(out)) == (0, {f"{PARTITIONED}-partition-0", f"{PARTITIONED}-partition-1"})

    code, out, _ = run(
        capsys,
        "stats",
        "--warehouse",
        str(filled),
        "--topic",
        f"{PARTITIONED}-partition-1",
        "--subscription",
        "audit",
    )
    assert code == 0
    assert out == {
        f"{PARTITIONED}-partition-1": {
            "subscriptions": {
                "audit": {
                    "msgBacklog": 0,
                    "type": "Failover",
                    "unackedMessages": 0,
                    "nonContiguousDeletedMessagesRanges": 0,
                    "consumers": [],
                }
            }
        }
    }

    code, out, err = run(
        capsys, "internal-stats", "--warehouse", str(filled), "--topic", f"{PLAIN}-partition-0"
    )
    assert (code, out) == (1, None)
    assert err.strip() == f"ackstate: error: topic {PLAIN}-partition-0 not found"

    code, out, err = run(capsys, "stats", "--warehouse", str(tmp_path / "nowhere"))
    assert (code, out) == (2, None)
    assert "has no cursors or topic_partitions table" in err


def test_as_of_reads_the_earlier_state(capsys, spark, warehouse):
    ensure_tables(spark, warehouse)
    assert run(capsys, "stats", "--warehouse", str(warehouse))[:2] == (0, {})  # empty, not an error
    fill(spark, warehouse)
    five = ledgers_of(5)
    later = acked(five, "Exclusive", 0, 1, 2)  # the hole is filled: markDelete moves to 10:2
    write(spark, warehouse, "cursors", [cursor_row(PLAIN, -1, "sub", later, five)], "overwrite")

    cursor_history = history(spark, warehouse, "cursors")
    partition_history = history(spark, warehouse, "topic_partitions")
    first_write = next(v for v, op, _ in cursor_history if op == "WRITE")
    # each table was written once before the overwrite: the same version number in both
    assert first_write == next(v for v, op, _ in partition_history if op == "WRITE")
    first_write_time = next(ts for v, _, ts in cursor_history if v == first_write)

    _, now, _ = run(capsys, "internal-stats", "--warehouse", str(warehouse), "--topic", PLAIN)
    assert now[PLAIN]["cursors"]["sub"]["markDeletePosition"] == "10:2"

    for as_of in (str(first_write), first_write_time):
        code, then, err = run(
            capsys, "internal-stats", "--warehouse", str(warehouse), "--topic", PLAIN, "--as-of", as_of
        )
        assert code == 0, (as_of, err)
        assert then[PLAIN]["cursors"]["sub"]["markDeletePosition"] == "10:-1", as_of
        assert then[PLAIN]["cursors"]["sub"]["individuallyDeletedMessages"] == "[(10:1..10:2]]", as_of

    code, then, _ = run(capsys, "stats", "--warehouse", str(warehouse), "--as-of", str(first_write))
    assert code == 0
    assert then[f"{PARTITIONED}-partition-1"]["subscriptions"]["audit"]["type"] == "Failover"

    code, out, err = run(capsys, "stats", "--warehouse", str(warehouse), "--as-of", "99")
    assert (code, out) == (2, None)
    assert "cannot read table cursors as of '99'" in err


@pytest.mark.slow  # two processes of their own
def test_stats_in_processes_of_their_own_print_what_the_session_prints(
    spark: SparkSession,
    capsys: pytest.CaptureFixture[str],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> None:
    """``stats`` and ``internal-stats`` as users run them: each a cold process, with the
    interpreted expressions such a command gets (``jobs.cli.INTERPRETED_COMMANDS``). The
    conformance scenarios run their commands in the test session
    (``tests/conformance/in_session.py``); this keeps the two read commands' own process tested,
    on the session's generated demo warehouse."""
    demo = demo_warehouse(spark, tmp_path_factory.getbasetemp())
    for command in ("stats", "internal-stats"):
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", command, "--warehouse", str(demo)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        code, out, _ = run(capsys, command, "--warehouse", str(demo))
        assert code == 0
        assert json.loads(done.stdout) == out, command
        assert out, command  # the demo has topics: an empty answer would prove nothing
