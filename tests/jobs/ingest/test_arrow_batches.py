"""The apply's Arrow batch settings (``jobs.ingest.arrow_batches``): a batch keeps Spark's row
limit unless rows that large would pass the session's byte limit, and the size bounds hold for
the largest rows either side of the UDF can send."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobs.ingest.arrow_batches import (
    MAX_BYTES,
    MAX_RECORDS,
    UNCHECKED_BYTES,
    apply_settings,
    batch_settings,
    event_row_bytes,
    state_row_bytes,
)
from jobs.ingest.counts import classified_summary
from jobs.ingest.validate import classify, valid_records
from schemas.udf import APPLY_EVENT_COLUMNS, CURSOR, PARTITION, STATE_INPUT

MIB = 2**20
TOPIC = "persistent://public/default/arrow-batches"


def test_typical_rows_keep_the_sessions_row_limit() -> None:
    settings = batch_settings(4096, 10_000, 64 * MIB)
    assert settings == {MAX_BYTES: str(UNCHECKED_BYTES), MAX_RECORDS: "10000"}


def test_large_rows_send_fewer_rows_a_batch_and_never_none() -> None:
    assert batch_settings(MIB, 10_000, 64 * MIB)[MAX_RECORDS] == "64"
    assert batch_settings(100 * MIB, 10_000, 64 * MIB)[MAX_RECORDS] == "1"
    assert batch_settings(0, 10_000, 64 * MIB)[MAX_RECORDS] == "10000"


def test_a_session_without_a_row_limit_gets_the_byte_limits_rows() -> None:
    assert batch_settings(MIB, 0, 64 * MIB)[MAX_RECORDS] == "64"
    assert batch_settings(MIB, -1, 64 * MIB)[MAX_RECORDS] == "64"


def test_a_session_that_checks_no_byte_limit_keeps_its_settings() -> None:
    assert batch_settings(MIB, 10_000, UNCHECKED_BYTES) == {}


@pytest.mark.spark
@pytest.mark.parametrize(("setting", "records"), [("1m", "512"), ("2mb", "1024"), ("4194304", "2048")])
def test_the_sessions_byte_limit_is_read_as_spark_reads_it(spark: Any, setting: str, records: str) -> None:
    """Spark's own parsing of the setting (``SQLConf``), whichever of its forms the user wrote."""
    spark.conf.set(MAX_BYTES, setting)
    try:
        assert apply_settings(spark, 2048) == {MAX_BYTES: str(UNCHECKED_BYTES), MAX_RECORDS: records}
    finally:
        spark.conf.unset(MAX_BYTES)
    assert apply_settings(spark, 2048)[MAX_RECORDS] == "10000"  # 64 MiB and 10,000 rows: Spark's


def _arrow_row_bytes(frame: Any) -> list[int]:
    """Each row's Arrow bytes, as a batch of that row alone."""
    table = frame.toArrow()
    return [table.take([i]).nbytes for i in range(table.num_rows)]


@pytest.mark.spark
def test_no_state_row_is_larger_than_its_bound(spark: Any) -> None:
    state = spark.createDataFrame(
        [
            (TOPIC, 0, PARTITION, None, b"\x01" * MIB, 7, 1_000, None, b"\x02" * 300, None),
            (TOPIC, 0, CURSOR, "s", b"\x03" * 5_000, None, None, b"\x04" * 70_000, None, None),
            (TOPIC, 1, PARTITION, None, None, None, None, None, None, 12),
        ],
        STATE_INPUT,
    )
    bound = state_row_bytes(state)
    assert max(_arrow_row_bytes(state)) <= bound < MIB + 1_000
    assert state_row_bytes(state.limit(0)) == 0


def _ack(event_id: str, ids: list[dict[str, Any]]) -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "seq": 1,
            "event_time": 1_000,
            "topic": TOPIC,
            "type": "ACK",
            "subscription": "s",
            "consumer_id": 1,
            "ack_type": "Individual",
            "message_ids": ids,
        },
        separators=(",", ":"),
    )


@pytest.mark.spark
def test_no_event_row_is_larger_than_its_records_bound(spark: Any) -> None:
    """Records whose parsed values are large against their text: many short message ids (their
    defaults fill fields the text lacks) and long ack sets of one-digit words (8 bytes for 2
    octets)."""
    records = [
        _ack("short-ids", [{"ledger_id": 1, "entry_id": i % 10} for i in range(2_000)]),
        _ack(
            "ack-sets",
            [
                {
                    "ledger_id": 1,
                    "entry_id": 2,
                    "batch_index": 0,
                    "batch_size": 64 * 5_000,
                    "ack_set": [0] * 5_000,
                }
            ],
        ),
        _ack("one", [{"ledger_id": 1, "entry_id": 2}]),
    ]
    raw = spark.createDataFrame([(r,) for r in records], "value string")
    valid = valid_records(classify(raw)).selectExpr("0L AS _row", "*")
    events = valid.select(*APPLY_EVENT_COLUMNS).orderBy("event_id")
    ids = [r["event_id"] for r in events.select("event_id").collect()]
    sizes = dict(zip(ids, _arrow_row_bytes(events), strict=True))
    assert len(sizes) == len(records)
    for record in records:
        assert sizes[json.loads(record)["event_id"]] <= event_row_bytes(len(record.encode()))


@pytest.mark.spark
def test_the_longest_record_is_a_valid_ones(spark: Any) -> None:
    valid = _ack("valid", [{"ledger_id": 1, "entry_id": 2}])
    rejected = json.dumps({"event_id": "bad", "type": "NOT_A_TYPE", "padding": "x" * 10_000})
    raw = spark.createDataFrame([(valid,), (rejected,), ("not json",)], "value string")
    summary = classified_summary(classify(raw))
    assert summary.longest_record == len(valid.encode())
    nothing_valid = spark.createDataFrame([(rejected,)], "value string")
    assert classified_summary(classify(nothing_valid)).longest_record == 0
