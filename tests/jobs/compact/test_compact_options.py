"""``ackstate compact`` options, ``ackstate sql`` text handling and the report's pure part: no JVM.

The Spark side of each is in tests/jobs (compact/test_compact.py, read/test_sql.py, read/test_report.py).
"""

from __future__ import annotations

import argparse
import os
import struct
from pathlib import Path

import pytest

from jobs.cli import build_parser, main
from jobs.compact.compaction import (
    DELTA_MIN_RETENTION_HOURS,
    SMALL_WAREHOUSE_BYTES,
    CompactOptions,
    LedgerTrim,
)
from jobs.platform.config import load_config
from jobs.platform.errors import CompactError
from jobs.platform.java import QUICK_JIT
from jobs.platform.retry import is_conflict, retry_on_conflict
from jobs.read.report import Series, bucket_redeliveries, build_series, render_html, render_png, spread
from jobs.read.sql import format_table, split_statements, tables_named

TOPIC = "persistent://acme/prod/orders"


# ---- compact options ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (f"{TOPIC}=12", LedgerTrim(TOPIC, None, 12)),
        (f"{TOPIC}:3=12", LedgerTrim(TOPIC, 3, 12)),
        (f"{TOPIC}-partition-3=12", LedgerTrim(TOPIC, 3, 12)),
        ("orders:0=7", LedgerTrim("persistent://public/default/orders", 0, 7)),
        ("acme/prod/orders=7", LedgerTrim(TOPIC, None, 7)),
        (f"{TOPIC}:-1=5", LedgerTrim(TOPIC, -1, 5)),
    ],
)
def test_trim_spec_names_topics_as_pulsar_does(spec, expected):
    assert LedgerTrim.parse(spec) == expected


@pytest.mark.parametrize("spec", [TOPIC, f"{TOPIC}=", f"{TOPIC}=x", "=12", f"{TOPIC}:1=-3"])
def test_a_malformed_trim_spec_is_refused_with_the_expected_form(spec):
    with pytest.raises(CompactError, match=r"TOPIC\[:PARTITION\]=LEDGER_ID"):
        LedgerTrim.parse(spec)


def test_trim_spec_matches_one_partition_or_all():
    assert LedgerTrim(TOPIC, 3, 1).matches(TOPIC, 3)
    assert not LedgerTrim(TOPIC, 3, 1).matches(TOPIC, 2)
    assert LedgerTrim(TOPIC, None, 1).matches(TOPIC, 2)
    assert not LedgerTrim(TOPIC, None, 1).matches(TOPIC + "-2", 2)


def _args(*argv: str, conf: Path | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(["compact", *argv])
    args.config = load_config(conf)
    args.warehouse = Path("/tmp/wh")
    return args


def test_defaults_come_from_the_compact_table_of_the_configuration():
    options = CompactOptions.from_args(_args())
    assert options.vacuum_retention_hours == DELTA_MIN_RETENTION_HOURS
    assert (options.optimize, options.vacuum, options.checkpoint) == (True, True, True)
    assert options.retention_days == {
        "ingest_batches": 30,
        "rejected_events": 90,
        "active_consumer_changes": 90,
        "send_receipts": 7,
        "redeliveries": 30,
    }
    assert options.trims == ()


def test_command_line_overrides_the_configuration(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text(
        '[compact]\nrejected_events_retention_days = 5\ntrim_ledgers_before = ["orders:1=9"]\n'
        "vacuum_retention_hours = 200\n"
    )
    options = CompactOptions.from_args(
        _args(
            "--retention",
            "send_receipts=0",
            "--trim-ledgers-before",
            f"{TOPIC}:2=4",
            "--no-checkpoint",
            "--tables",
            "cursors,ledgers",
            conf=conf,
        )
    )
    assert options.retention_days["rejected_events"] == 5
    assert options.retention_days["send_receipts"] == 0
    assert options.vacuum_retention_hours == 200
    assert options.trims == (
        LedgerTrim("persistent://public/default/orders", 1, 9),
        LedgerTrim(TOPIC, 2, 4),
    )
    assert not options.checkpoint
    assert options.tables == ("cursors", "ledgers")


def test_a_vacuum_retention_below_deltas_minimum_needs_an_explicit_allowance():
    with pytest.raises(CompactError, match="below Delta's safety minimum of 168"):
        CompactOptions.from_args(_args("--vacuum-retention-hours", "1"))
    assert CompactOptions.from_args(_args("--vacuum-retention-hours", "1", "--allow-short-retention"))
    # without VACUUM there is nothing to refuse
    assert CompactOptions.from_args(_args("--vacuum-retention-hours", "1", "--no-vacuum"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--retention", "cursors=3"], "cursors is not a history table"),
        (["--retention", "rejected_events"], "expected TABLE=DAYS"),
        (["--tables", "cursors,nope"], "unknown table"),
    ],
)
def test_unusable_options_are_refused_in_one_sentence(argv, message):
    with pytest.raises(CompactError, match=message):
        CompactOptions.from_args(_args(*argv))


# ---- retry ----------------------------------------------------------------------------------
class _Conflict(Exception):
    pass


def test_retry_runs_again_only_after_a_delta_conflict():
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _Conflict("[DELTA_CONCURRENT_APPEND.WITHOUT_HINT] Transaction conflict detected.")
        return "done"

    assert retry_on_conflict(flaky, what="test", base_delay=0.001) == "done"
    assert len(calls) == 3

    def broken() -> None:
        raise ValueError("[DELTA_SOMETHING_ELSE] not a conflict")

    with pytest.raises(ValueError):
        retry_on_conflict(broken, what="test", base_delay=0.001)
    assert is_conflict(_Conflict("[DELTA_CONCURRENT_DELETE_READ] x"))
    assert not is_conflict(_Conflict("plain"))


def test_retry_gives_up_after_its_attempts():
    calls = []

    def always() -> None:
        calls.append(1)
        raise _Conflict("[DELTA_CONCURRENT_TRANSACTION] again")

    with pytest.raises(_Conflict):
        retry_on_conflict(always, what="test", attempts=3, base_delay=0.001)
    assert len(calls) == 3


# ---- sql text -------------------------------------------------------------------------------
def test_statements_split_on_semicolons_outside_quotes_and_comments():
    script = "SELECT 'a;b' AS x; -- a comment; with a semicolon\nSELECT \"c;d\";\n\n;SELECT `e;f` FROM t"
    assert split_statements(script) == ["SELECT 'a;b' AS x", 'SELECT "c;d"', "SELECT `e;f` FROM t"]


def test_only_the_tables_a_statement_names_are_loaded():
    assert tables_named("SELECT * FROM cursors c JOIN ack_ranges r USING (topic)") == [
        "cursors",
        "ack_ranges",
    ]
    assert tables_named("SELECT 'cursors' AS word FROM my_cursors") == []
    assert tables_named("select count(*) from REJECTED_EVENTS") == ["rejected_events"]


def test_table_output_aligns_columns_and_shows_nulls():
    text = format_table(["name", "n"], [("a", "1"), ("long name", None), ("b", "-20")], more=True)
    assert text.splitlines() == [
        "name      | n",
        "----------+-----",
        "a         |    1",
        "long name | NULL",
        "b         |  -20",
        "(3 rows, more not shown)",
    ]


# ---- report ---------------------------------------------------------------------------------
def _cursor(topic: str, partition: int, sub: str, when: int, backlog: int, holes: int) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "subscription": sub,
        "last_event_time": when,
        "msg_backlog": backlog,
        "non_contiguous_deleted_ranges": holes,
    }


def test_series_keep_one_point_per_event_time_and_the_top_subscriptions():
    rows = [
        _cursor(TOPIC, 0, "a", 1_000, 5, 1),
        _cursor(TOPIC, 0, "a", 1_000, 5, 1),  # the same row read at two versions
        _cursor(TOPIC, 0, "a", 2_000, 9, 2),
        _cursor(TOPIC, 0, "b", 1_500, 1, 0),
        _cursor(TOPIC, 1, "a", 1_500, 50, 0),
        _cursor(TOPIC, 1, "c", None, 99, 0),  # no event time: never applied, not drawn
    ]
    series = build_series(rows, top=2)
    assert [s.name for s in series] == [f"{TOPIC}-partition-1 a", f"{TOPIC}-partition-0 a"]
    assert (series[1].times, series[1].backlog, series[1].holes) == ([1_000, 2_000], [5, 9], [1, 2])
    only_b = build_series(rows, subscription="b")
    assert [s.name for s in only_b] == [f"{TOPIC}-partition-0 b"]


def test_redeliveries_count_each_request_once_in_its_time_bucket():
    def r(sub: str, entry: int, at: int) -> dict:
        return {
            "topic": TOPIC,
            "partition": 0,
            "subscription": sub,
            "ledger_id": 7,
            "entry_id": entry,
            "requested_at": at,
        }

    rows = [r("a", 1, 1_000), r("a", 1, 1_000), r("a", 2, 1_500), r("b", 3, 70_000), r("a", 1, 65_000)]
    starts, counts, width = bucket_redeliveries(rows, [f"{TOPIC}-partition-0 a"], buckets=40)
    assert width == 5_000
    assert starts[0] == 0 and starts[-1] == 70_000
    assert sum(counts[f"{TOPIC}-partition-0 a"]) == 3  # 1:1000 twice is one request
    assert sum(counts["other"]) == 1
    assert bucket_redeliveries([], ["x"]) == ([], {}, 0)


def test_spread_keeps_the_first_and_last_version():
    assert spread(list(range(10)), 4) == [0, 3, 6, 9]
    assert spread([1, 2], 5) == [1, 2]
    assert spread([1, 2, 3], 1) == [3]
    assert spread([], 3) == []


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_chart_renders_even_without_data(tmp_path):
    series = [Series("t s", [1_700_000_000_000, 1_700_000_060_000], [3, 1], [1, 0])]
    png = render_png(series, ([], {}, 0), tmp_path / "a.png", title="t")
    assert png_size(png) == (1200, 900)
    empty = render_png([], ([], {}, 0), tmp_path / "b.png", title="empty")
    assert png_size(empty) == (1200, 900)
    page = render_html(png, series, title="t <x>", facts={"warehouse": "/w"})
    assert "data:image/png;base64," in page and "t &lt;x&gt;" in page and "<td>t s</td>" in page


@pytest.mark.parametrize(("warehouse_bytes", "quick"), [(1000, True), (SMALL_WAREHOUSE_BYTES + 1, False)])
def test_compaction_of_a_small_local_warehouse_starts_with_c1_alone(
    session_requests: list[dict[str, str]], tmp_path: Path, warehouse_bytes: int, quick: bool
) -> None:
    """What ``ackstate compact`` asks of the session it starts (``SMALL_WAREHOUSE_BYTES``)."""
    table = tmp_path / "warehouse" / "cursors"
    table.mkdir(parents=True)
    (table / "part-0.parquet").touch()
    os.truncate(table / "part-0.parquet", warehouse_bytes)  # sparse: its size, not its blocks
    assert main(["compact", "--warehouse", str(tmp_path / "warehouse")]) == 2
    assert (session_requests[0].get("spark.driver.extraJavaOptions") == QUICK_JIT) is quick
