"""A batch's counts of the apply UDF's rows (``jobs.ingest.counts``): the driver's count of the
collected rows equals Spark's count of the same rows, and the validation summary names the
valid records' topic partitions and counts the rejected ones per reason."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from jobs.ingest.counts import KindCounts, counts_of_frame, counts_of_rows, input_summary
from schemas.udf import APPLY_OUTPUT, CURSOR, PARTITION, RANGE, REDELIVERY, REJECT, UNSUBSCRIBED
from udfs.apply import OUTPUT_ARROW

pytestmark = pytest.mark.spark

T1, T2 = "persistent://t/n/a", "persistent://t/n/b"


def _row(kind: str, topic: str = T1, partition: int = 0, **values: Any) -> dict[str, Any]:
    return {"kind": kind, "op": "upsert", "topic": topic, "partition": partition, **values}


ROWS = [
    _row(PARTITION, applied=7, stale=2),
    _row(PARTITION, T2, 3, applied=5, stale=None),
    _row(PARTITION, T2, 4, applied=None, stale=None),
    _row(CURSOR, subscription="s1", state_changed=True),
    _row(CURSOR, subscription="s2", state_changed=False),
    _row(CURSOR, subscription="s3", state_changed=None),
    _row(CURSOR, T2, 3, subscription="gone", op="delete"),
    _row(RANGE, subscription="s1", ledger_id=1, lower_entry_id=0, upper_entry_id=4),
    _row(REDELIVERY, subscription="s1", reason="nack"),
    _row(REJECT, row=11, reason="unknown_consumer", detail="d"),
    _row(REJECT, T2, 3, row=12, reason="unknown_consumer", detail="d"),
    _row(REJECT, row=13, reason="stale_seq", detail="d"),
    _row(UNSUBSCRIBED, T2, 3, subscription="gone"),
]


def test_counting_the_collected_rows_gives_what_spark_counts(spark: Any) -> None:
    rows = pa.Table.from_pylist(ROWS, schema=OUTPUT_ARROW)
    frame = spark.createDataFrame(rows, APPLY_OUTPUT)
    in_driver, in_spark = counts_of_rows(rows), counts_of_frame(frame)
    assert in_driver == in_spark
    assert in_driver.kinds[PARTITION] == KindCounts(rows=3, applied=12, stale=2, changed=0)
    assert in_driver.kinds[CURSOR] == KindCounts(rows=4, applied=0, stale=0, changed=1)
    assert in_driver.refusals == {"unknown_consumer": 2, "stale_seq": 1}
    assert in_driver.unsubscribed == [(T2, 3, "gone")]
    assert set(in_driver.kinds) == {PARTITION, CURSOR, RANGE, REDELIVERY, REJECT, UNSUBSCRIBED}


def test_no_rows_count_nothing(spark: Any) -> None:
    rows = pa.Table.from_pylist([], schema=OUTPUT_ARROW)
    frame = spark.createDataFrame(rows, APPLY_OUTPUT)
    assert counts_of_rows(rows) == counts_of_frame(frame)
    assert counts_of_rows(rows).kinds == {} and counts_of_rows(rows).unsubscribed == []


def test_the_summary_names_valid_partitions_and_counts_rejections(spark: Any) -> None:
    marked = spark.createDataFrame(
        [
            (T1, 0, None),
            (T1, 0, None),
            (T2, 3, None),
            (T2, 5, "invalid_value"),
            (None, None, "malformed_json"),
            (T1, 1, "duplicate_event_id"),
            (T1, 1, "duplicate_event_id"),
        ],
        "topic string, partition int, reason string",
    )
    touched, reasons = input_summary(marked)
    assert sorted(touched) == [(T1, 0), (T2, 3)]  # T2/5 and T1/1 only have rejected records
    assert reasons == {"invalid_value": 1, "malformed_json": 1, "duplicate_event_id": 2}
