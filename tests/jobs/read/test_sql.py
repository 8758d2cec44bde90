"""``ackstate sql`` over an ingested warehouse: the README's queries, output formats, time travel."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from delta.tables import DeltaTable

from jobs.cli import main
from jobs.platform.tables import read_table, table_path
from schemas.validation import REASONS
from tests.jobs.warehouse import append_rows, copy, demo_warehouse

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

README = Path(__file__).resolve().parents[3] / "README.md"
REDELIVERED = "persistent://acme/prod/orders-0"


def readme_queries() -> dict[str, str]:
    """The README's ```sql blocks, keyed by the title on their first line (``-- title``)."""
    blocks = re.findall(r"```sql\n(.*?)```", README.read_text(), flags=re.S)
    queries = {}
    for block in blocks:
        title, _, _ = block.partition("\n")
        assert title.startswith("-- "), block
        queries[title[3:].strip()] = block
    return queries


@pytest.fixture(scope="module")
def warehouse(spark, tmp_path_factory) -> Path:
    """The demo warehouse, plus redeliveries (the ingest does not write them yet)."""
    demo = demo_warehouse(spark, tmp_path_factory.getbasetemp())
    warehouse = copy(demo, tmp_path_factory.mktemp("sql") / "warehouse")
    key = {"topic": REDELIVERED, "partition": 0, "ledger_id": 11}
    rows = [
        {
            **key,
            "subscription": "analytics",
            "entry_id": 1,
            "redelivery_count": 1,
            "dead_letter": False,
            "due_at": 5,
        },
        {
            **key,
            "subscription": "analytics",
            "entry_id": 2,
            "redelivery_count": 1,
            "dead_letter": False,
            "due_at": 6,
        },
        {
            **key,
            "subscription": "analytics",
            "entry_id": 3,
            "redelivery_count": 3,
            "dead_letter": True,
            "due_at": 9,
        },
        {
            **key,
            "subscription": "billing",
            "entry_id": 4,
            "redelivery_count": 3,
            "dead_letter": True,
            "due_at": 7,
        },
        # delivered again already: history, not a candidate any more
        {
            **key,
            "subscription": "billing",
            "entry_id": 5,
            "redelivery_count": 3,
            "dead_letter": True,
            "delivered_at": 8,
        },
        {
            **key,
            "subscription": "billing",
            "entry_id": 6,
            "redelivery_count": 2,
            "dead_letter": False,
            "due_at": 4,
        },
    ]
    for row in rows:
        row["position"] = f"{row['ledger_id']}:{row['entry_id']}"
        row["reason"] = "NACK"
    append_rows(spark, warehouse, "redeliveries", rows)
    return warehouse


def sql(capsys, warehouse: Path, query: str, *options: str) -> list[dict]:
    code = main(["sql", "--warehouse", str(warehouse), "--format", "json", *options, query])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_the_readme_has_the_five_queries():
    assert list(readme_queries()) == [
        "backlog per subscription",
        "the subscriptions with the most ack holes",
        "redelivery-count histogram",
        "dead-letter candidates: due redeliveries whose next delivery reaches max_redeliver_count",
        "rejected events by reason",
    ]


def test_backlog_per_subscription(spark, capsys, warehouse):
    rows = sql(capsys, warehouse, readme_queries()["backlog per subscription"])
    cursors = read_table(spark, warehouse, "cursors").collect()
    expected: dict[tuple[str, str], int] = {}
    for c in cursors:
        expected[(c.topic, c.subscription)] = expected.get((c.topic, c.subscription), 0) + c.msg_backlog
    assert {(r["topic"], r["subscription"]): r["backlog_entries"] for r in rows} == expected
    assert [r["backlog_entries"] for r in rows] == sorted(expected.values(), reverse=True)
    assert sum(r["partitions"] for r in rows) == len(cursors)


def test_subscriptions_with_the_most_ack_holes(spark, capsys, warehouse):
    rows = sql(capsys, warehouse, readme_queries()["the subscriptions with the most ack holes"])
    ranges = read_table(spark, warehouse, "ack_ranges").collect()
    runs: dict[tuple[str, int, str], list[int]] = {}
    for r in ranges:
        runs.setdefault((r.topic, r.partition, r.subscription), []).append(r.entries)
    assert 0 < len(rows) <= 10
    holes = [r["ack_hole_ranges"] for r in rows]
    assert holes == sorted(holes, reverse=True) and holes[0] > 0
    for row in rows:
        mine = runs.get((row["topic"], row["partition"], row["subscription"]), [])
        assert row["ack_hole_ranges"] == len(mine)  # the projection holds one row per run
        assert row["entries_acked_above_mark_delete"] == sum(mine)


def test_redelivery_count_histogram(capsys, warehouse):
    rows = sql(capsys, warehouse, readme_queries()["redelivery-count histogram"])
    assert rows == [
        {"redelivery_count": 1, "positions": 2},
        {"redelivery_count": 2, "positions": 1},
        {"redelivery_count": 3, "positions": 3},
    ]


def test_dead_letter_candidates(capsys, warehouse):
    title = next(t for t in readme_queries() if t.startswith("dead-letter candidates"))
    rows = sql(capsys, warehouse, readme_queries()[title])
    assert [(r["subscription"], r["position"]) for r in rows] == [("billing", "11:4"), ("analytics", "11:3")]
    assert rows[0]["due_at"].startswith("1970-01-01T00:00:00.007")


def test_rejected_events_by_reason(spark, capsys, warehouse):
    rows = sql(capsys, warehouse, readme_queries()["rejected events by reason"])
    assert rows and {r["reason"] for r in rows} <= set(REASONS)
    assert sum(r["events"] for r in rows) == read_table(spark, warehouse, "rejected_events").count()
    assert all(r["first_seen"] <= r["last_seen"] for r in rows)


def test_table_and_csv_output(capsys, warehouse):
    query = (
        "SELECT subscription, state, mark_delete FROM cursors ORDER BY topic, partition, subscription LIMIT 2"
    )
    assert main(["sql", "--warehouse", str(warehouse), query]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"subscription +\| state +\| mark_delete", lines[0])
    assert re.search(r"\| <\d+ bytes> +\|", lines[2])  # binary is shown by its size
    assert lines[-1] == "(2 rows)"

    assert main(["sql", "--warehouse", str(warehouse), "--format", "csv", query]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0] == ["subscription", "state", "mark_delete"] and len(table) == 3
    assert re.fullmatch(r"[A-Za-z0-9+/=]+", table[1][1])  # base64


def test_as_of_reads_every_table_at_that_moment(spark, capsys, warehouse):
    history = DeltaTable.forPath(spark, table_path(warehouse, "ingest_batches")).history()
    (stamp,) = (
        history.where("operation = 'WRITE'")
        .orderBy("version")
        .selectExpr("date_format(timestamp, 'yyyy-MM-dd HH:mm:ss.SSS')")
        .first()
    )
    query = "SELECT COUNT(*) AS batches, SUM(input_rows) AS rows FROM ingest_batches"
    (then,) = sql(capsys, warehouse, query, "--as-of", stamp)
    (now,) = sql(capsys, warehouse, query)
    assert then["batches"] == 1 and now["batches"] > 1
    assert then["rows"] < now["rows"]
    (versioned,) = sql(capsys, warehouse, query, "--as-of", "1")  # version 1: the first append
    assert versioned == then


def test_statements_from_stdin_and_errors(capsys, monkeypatch, warehouse):
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT 'a;b' AS x;\nSELECT COUNT(*) AS n FROM ledgers;\n"))
    assert main(["sql", "--warehouse", str(warehouse), "--format", "json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0]) == {"x": "a;b"}
    assert json.loads(lines[1])["n"] > 0

    assert main(["sql", "--warehouse", str(warehouse), "SELECT nope FROM cursors"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ackstate: error: ") and "nope" in err and len(err.splitlines()) == 1
