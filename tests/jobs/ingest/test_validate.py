"""Splitting raw records into valid events and rejected records, on real Spark.

Every case of the module goes through Spark once (one small DataFrame, one collect per
output), and the tests look their row up: the JVM round trips, not the rules, are what cost.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.ingest.validate import classify, mark_duplicates, parse_and_validate, split
from schemas import validation as V
from schemas.events import EVENT_SCHEMA
from schemas.tables import REJECTED_EVENT_COLUMNS, TABLES
from tests.schemas.shared_tools import SCENARIOS, load_runner, load_scenario

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

TOPIC = "persistent://public/default/validate"


_DROP = object()  # a field value that removes the field from the record
_SUB = {"subscription": "sub", "consumer_id": 1}


def _line(event_id: str, /, **fields: Any) -> str:
    """One JSON line; `fields` override the header (``_DROP`` removes a field)."""
    record: dict[str, Any] = {"event_id": event_id, "seq": 1, "event_time": 1_000, "topic": TOPIC}
    record.update(fields)
    return json.dumps({k: v for k, v in record.items() if v is not _DROP})


def _ack(event_id: str, /, *ids: dict[str, Any] | None, **fields: Any) -> str:
    return _line(
        event_id, **{"type": "ACK", **_SUB, "ack_type": "Individual", "message_ids": list(ids), **fields}
    )


def _publish(event_id: str, /, **fields: Any) -> str:
    base = {"type": "PUBLISH", "ledger_id": 10, "entry_id": 0, "producer_name": "p", "sequence_id": 0}
    return _line(event_id, **{**base, **fields})


def _send(event_id: str, /, **fields: Any) -> str:
    return _line(event_id, **{"type": "SEND", "producer_name": "p", "sequence_id": 4, **fields})


def _subscribe(event_id: str, /, **fields: Any) -> str:
    base = {"type": "SUBSCRIBE", **_SUB, "consumer_name": "c1", "sub_type": "Shared"}
    return _line(event_id, **{**base, **fields})


# case name -> (input line, expected reason or None for valid, expected detail fragment or None)
CASES: dict[str, tuple[str | None, str | None, str | None]] = {
    # malformed_json
    "truncated": ('{"type": "ACK", "message_ids": [', V.MALFORMED_JSON, "not a JSON object"),
    "array": ("[1, 2]", V.MALFORMED_JSON, "not a JSON object"),
    "scalar": ("42", V.MALFORMED_JSON, "not a JSON object"),
    "json_null": ("null", V.MALFORMED_JSON, "not a JSON object"),
    "blank": ("   ", V.MALFORMED_JSON, "empty line"),
    "null_value": (None, V.MALFORMED_JSON, "the record is null"),
    "empty_object": ("{}", V.MALFORMED_JSON, "no field of the v1 event schema"),
    "only_unknown_fields": ('{"colour": "blue"}', V.MALFORMED_JSON, "no field"),
    "string_seq": (_publish("m-seq", seq="12"), V.MALFORMED_JSON, "seq"),
    "boolean_seq": (_publish("m-bool", seq=True), V.MALFORMED_JSON, "seq"),
    "fractional_time": (_publish("m-frac", event_time=1.5), V.MALFORMED_JSON, "event_time"),
    "partition_overflow": (_publish("m-int", partition=3_000_000_000), V.MALFORMED_JSON, "partition"),
    "message_ids_object": (
        _line("m-ids", type="ACK", **_SUB, ack_type="Individual", message_ids={"ledger_id": 1}),
        V.MALFORMED_JSON,
        "message_ids",
    ),
    "nested_wrong_type": (
        _ack("m-nested", {"ledger_id": "ten", "entry_id": 0}),
        V.MALFORMED_JSON,
        "message_ids",
    ),
    # missing_field, common
    "no_event_id": (_publish("x", event_id=_DROP, seq=3), V.MISSING_FIELD, "missing event_id"),
    "no_topic_no_seq": (_publish("mf-common", topic=_DROP, seq=_DROP), V.MISSING_FIELD, "missing seq, topic"),
    "no_type": (_line("mf-type", subscription="s"), V.MISSING_FIELD, "missing type"),
    "null_event_time": (_publish("mf-null", event_time=None), V.MISSING_FIELD, "event_time"),
    # unknown_type
    "teleport": (_line("ut-1", type="TELEPORT", **_SUB), V.UNKNOWN_TYPE, "TELEPORT"),
    "lower_case_type": (_line("ut-2", type="ack"), V.UNKNOWN_TYPE, "'ack'"),
    # missing_field, per type
    "subscribe_without_sub_type": (
        _subscribe("mf-1", sub_type=_DROP),
        V.MISSING_FIELD,
        "SUBSCRIBE needs sub_type",
    ),
    "ack_without_ack_type": (
        _ack("mf-2", {"ledger_id": 1, "entry_id": 0}, ack_type=_DROP),
        V.MISSING_FIELD,
        "ack_type",
    ),
    "ack_without_message_ids": (
        _ack("mf-3", message_ids=_DROP),
        V.MISSING_FIELD,
        "ACK needs message_ids",
    ),
    "publish_without_producer": (
        _publish("mf-4", producer_name=_DROP, sequence_id=_DROP),
        V.MISSING_FIELD,
        "PUBLISH needs producer_name, sequence_id",
    ),
    "dispatch_without_position": (
        _line("mf-5", type="DISPATCH", **_SUB, ledger_id=3),
        V.MISSING_FIELD,
        "entry_id",
    ),
    "message_id_without_entry": (_ack("mf-6", {"ledger_id": 1}), V.MISSING_FIELD, "message_ids[0] needs"),
    "null_message_id": (
        _ack("mf-7", {"ledger_id": 1, "entry_id": 0}, None),
        V.MISSING_FIELD,
        "message_ids[1]",
    ),
    "send_without_sequence": (_line("mf-8", type="SEND", producer_name="p"), V.MISSING_FIELD, "sequence_id"),
    # invalid_value
    "bad_sub_type": (_subscribe("iv-1", sub_type="Fanout"), V.INVALID_VALUE, "sub_type 'Fanout'"),
    "bad_ack_type": (_ack("iv-2", {"ledger_id": 1, "entry_id": 0}, ack_type="Bulk"), V.INVALID_VALUE, "Bulk"),
    "bad_initial_position": (_subscribe("iv-3", initial_position="Middle"), V.INVALID_VALUE, "Middle"),
    "bare_topic": (_publish("iv-4", topic="orders"), V.INVALID_VALUE, "topic 'orders'"),
    "topic_without_namespace": (_publish("iv-5", topic="persistent://t/orders"), V.INVALID_VALUE, "topic"),
    "topic_of_five_parts": (_publish("iv-5b", topic="persistent://p/c/ns/x/y"), V.INVALID_VALUE, "topic"),
    "partition_suffix": (
        _publish("iv-6", topic=TOPIC + "-partition-3", partition=3),
        V.INVALID_VALUE,
        "-partition-N",
    ),
    "partition_below_minus_one": (_publish("iv-7", partition=-2), V.INVALID_VALUE, "partition -2"),
    "negative_seq": (_publish("iv-8", seq=-1), V.INVALID_VALUE, "seq -1"),
    "negative_event_time": (_publish("iv-9", event_time=-5), V.INVALID_VALUE, "event_time -5"),
    "zero_batch_size": (_publish("iv-10", batch_size=0), V.INVALID_VALUE, "batch_size 0"),
    "zero_num_messages": (
        _line("iv-11", type="SEND", producer_name="p", sequence_id=1, num_messages=0),
        V.INVALID_VALUE,
        "num_messages",
    ),
    "negative_priority": (_subscribe("iv-12", priority_level=-1), V.INVALID_VALUE, "priority_level"),
    "ack_without_ids": (_ack("iv-13"), V.INVALID_VALUE, "ACK needs at least one message id"),
    "nack_without_ids": (_line("iv-14", type="NACK", **_SUB, message_ids=[]), V.INVALID_VALUE, "NACK needs"),
    "message_id_zero_batch": (
        _ack("iv-15", {"ledger_id": 1, "entry_id": 0, "batch_size": 0}),
        V.INVALID_VALUE,
        "message_ids[0].batch_size 0",
    ),
    "null_ack_set_word": (
        _ack("iv-16", {"ledger_id": 1, "entry_id": 0, "batch_size": 4, "ack_set": [1, None]}),
        V.INVALID_VALUE,
        "null word",
    ),
    # negative_position
    "publish_negative_entry": (_publish("np-1", entry_id=-1), V.NEGATIVE_POSITION, "entry_id -1"),
    "dispatch_negative_ledger": (
        _line("np-2", type="DISPATCH", **_SUB, ledger_id=-3, entry_id=0),
        V.NEGATIVE_POSITION,
        "ledger_id -3",
    ),
    "message_id_negative_entry": (
        _ack("np-3", {"ledger_id": 10, "entry_id": 0}, {"ledger_id": 10, "entry_id": -1}),
        V.NEGATIVE_POSITION,
        "message_ids[1] position 10:-1",
    ),
    "reset_cursor_before_entry_minus_one": (
        _line("np-4", type="RESET_CURSOR", subscription="s", ledger_id=10, entry_id=-2),
        V.NEGATIVE_POSITION,
        "entry_id -2 < 0",
    ),
    "mark_delete_negative_ledger": (
        _line("np-5", type="MARK_DELETE", subscription="s", ledger_id=-1, entry_id=-1),
        V.NEGATIVE_POSITION,
        "ledger_id -1 < 0",
    ),
    # cursor operations (contract additions)
    "reset_cursor_without_position": (
        _line("co-1", type="RESET_CURSOR", subscription="s", ledger_id=10),
        V.MISSING_FIELD,
        "RESET_CURSOR needs entry_id",
    ),
    "mark_delete_without_subscription": (
        _line("co-2", type="MARK_DELETE", ledger_id=10, entry_id=3),
        V.MISSING_FIELD,
        "MARK_DELETE needs subscription",
    ),
    # batch_index_out_of_range
    "batch_index_past_size": (
        _ack("bi-1", {"ledger_id": 10, "entry_id": 1, "batch_index": 7, "batch_size": 4}),
        V.BATCH_INDEX_OUT_OF_RANGE,
        "batch_index 7 outside [0, 4)",
    ),
    "batch_index_without_size": (
        _ack("bi-2", {"ledger_id": 10, "entry_id": 1, "batch_index": 0}),
        V.BATCH_INDEX_OUT_OF_RANGE,
        "no batch_size",
    ),
    "batch_index_negative": (
        _ack("bi-3", {"ledger_id": 10, "entry_id": 1, "batch_index": -2, "batch_size": 4}),
        V.BATCH_INDEX_OUT_OF_RANGE,
        "-2",
    ),
    # ack_set_too_long
    "ack_set_two_words_for_four": (
        _ack("as-1", {"ledger_id": 10, "entry_id": 2, "batch_size": 4, "ack_set": [1, 1]}),
        V.ACK_SET_TOO_LONG,
        "2 words; batch_size 4",
    ),
    "ack_set_three_words_for_65": (
        _ack("as-4", {"ledger_id": 10, "entry_id": 2, "batch_size": 65, "ack_set": [1, 1, 1]}),
        V.ACK_SET_TOO_LONG,
        None,
    ),
    # precedence: the first failing rule wins, the detail lists every failure of that rule
    "invalid_value_before_negative_position": (
        _subscribe("pr-1", sub_type="Fanout", partition=-9, ledger_id=-1),
        V.INVALID_VALUE,
        "sub_type 'Fanout' is not one of Exclusive, Failover, Shared, Key_Shared; partition -9 < -1",
    ),
    "missing_before_unknown_type": (_line("pr-2", type="TELEPORT", topic=None), V.MISSING_FIELD, "topic"),
    "negative_before_batch_index": (
        _ack("pr-3", {"ledger_id": 10, "entry_id": -1, "batch_index": 9, "batch_size": 2}),
        V.NEGATIVE_POSITION,
        None,
    ),
    # malformed sends (producer fields and the contract additions)
    "send_without_producer": (
        _send("sd-1", producer_name=_DROP),
        V.MISSING_FIELD,
        "SEND needs producer_name",
    ),
    "send_without_sequence_id": (_send("sd-2", sequence_id=None), V.MISSING_FIELD, "SEND needs sequence_id"),
    "send_negative_sequence_id": (_send("sd-3", sequence_id=-1), V.INVALID_VALUE, "sequence_id -1 < 0"),
    "send_negative_highest": (
        _send("sd-4", highest_sequence_id=-5),
        V.INVALID_VALUE,
        "highest_sequence_id -5 < 0",
    ),
    "send_no_messages": (_send("sd-5", num_messages=0), V.INVALID_VALUE, "num_messages 0 < 1"),
    "send_completed_before_received": (
        _send("sd-6", topic="non-persistent://t/ns/x", completed_at=999),
        V.INVALID_VALUE,
        "completed_at 999 is before event_time 1000",
    ),
    "send_negative_connection": (_send("sd-7", connection_id=-2), V.INVALID_VALUE, "connection_id -2 < 0"),
    "send_chunk_without_count": (
        _send("sd-8", chunk_id=0),
        V.INVALID_VALUE,
        "chunk_id 0 needs num_chunks_from_msg",
    ),
    "send_chunk_outside_message": (
        _send("sd-9", chunk_id=3, num_chunks_from_msg=3),
        V.INVALID_VALUE,
        "chunk_id 3 outside [0, num_chunks_from_msg 3)",
    ),
    "send_marker_not_boolean": (_send("sd-10", marker="yes"), V.MALFORMED_JSON, "marker"),
    "send_failed_non_persistent": (
        _line("sd-11", type="SEND_FAILED", topic="non-persistent://t/ns/x"),
        V.INVALID_VALUE,
        "SEND_FAILED on a non-persistent topic",
    ),
    "create_subscription_non_persistent": (
        _line(
            "cs-1",
            type="CREATE_SUBSCRIPTION",
            topic="non-persistent://t/ns/x",
            subscription="s",
            ledger_id=0,
            entry_id=0,
        ),
        V.INVALID_VALUE,
        "CREATE_SUBSCRIPTION on a non-persistent topic",
    ),
    "create_subscription_without_position": (
        _line("cs-2", type="CREATE_SUBSCRIPTION", subscription="s", ledger_id=10),
        V.MISSING_FIELD,
        "CREATE_SUBSCRIPTION needs entry_id",
    ),
    # valid
    "subscribe_with_defaults": (_subscribe("ok-sub"), None, None),
    "reset_cursor_before_first_entry": (
        _line("ok-reset", type="RESET_CURSOR", subscription="s", ledger_id=10, entry_id=-1),
        None,
        None,
    ),
    "mark_delete": (
        _line("ok-md", type="MARK_DELETE", subscription="s", ledger_id=10, entry_id=4),
        None,
        None,
    ),
    "create_subscription_before_first_entry": (
        _line("ok-create", type="CREATE_SUBSCRIPTION", subscription="s", ledger_id=10, entry_id=-1),
        None,
        None,
    ),
    "load_topic": (_line("ok-load", type="LOAD_TOPIC"), None, None),
    "delete_topic": (_line("ok-delete", type="DELETE_TOPIC"), None, None),
    "v1_topic_name": (_publish("ok-v1", topic="persistent://p/c/ns/x"), None, None),
    "publish_batch": (
        _publish("ok-pub", batch_size=8, sequence_id=3, highest_sequence_id=10, key="k"),
        None,
        None,
    ),
    "publish_plain": (_publish("ok-pub-plain", sequence_id=7), None, None),
    "dispatch": (
        _line("ok-dispatch", type="DISPATCH", **_SUB, ledger_id=10, entry_id=0, batch_size=8),
        None,
        None,
    ),
    "batch_index_ack": (
        _ack("ok-bi", {"ledger_id": 10, "entry_id": 0, "batch_index": 3, "batch_size": 4}),
        None,
        None,
    ),
    "ack_set_ack": (
        _ack("ok-as", {"ledger_id": 10, "entry_id": 0, "batch_size": 8, "ack_set": [249]}),
        None,
        None,
    ),
    "ack_set_two_words_for_65": (
        _ack("ok-as65", {"ledger_id": 10, "entry_id": 0, "batch_size": 65, "ack_set": [-1, 1]}),
        None,
        None,
    ),
    "cumulative_ack": (_ack("ok-cum", {"ledger_id": 10, "entry_id": 5}, ack_type="Cumulative"), None, None),
    "redeliver_all": (_line("ok-redeliver", type="REDELIVER", **_SUB, message_ids=[]), None, None),
    "close_consumer": (_line("ok-close", type="CLOSE_CONSUMER", **_SUB), None, None),
    "send_failed": (_line("ok-send-failed", type="SEND_FAILED"), None, None),
    "send": (_line("ok-send", type="SEND", producer_name="p", sequence_id=4, num_messages=2), None, None),
    "send_with_every_producer_field": (
        _send(
            "ok-send-full",
            topic="non-persistent://t/ns/x",
            highest_sequence_id=9,
            num_messages=6,
            connection_id=3,
            completed_at=1_500,
            chunk_id=1,
            num_chunks_from_msg=2,
            marker=False,
        ),
        None,
        None,
    ),
    "non_persistent_partitioned": (
        _publish("ok-np", topic="non-persistent://t/ns/x", partition=2),
        None,
        None,
    ),
    "unknown_field_ignored": (_publish("ok-extra", colour="blue"), None, None),
    "seq_zero": (_publish("ok-seq0", seq=0, event_time=0), None, None),
}

# In-batch duplicates: the lowest seq is kept, then the first in input order; a broken copy
# is rejected for its own reason and does not count.
DUPLICATES = [
    ("dup-a", _publish("dup", seq=7, entry_id=7), V.DUPLICATE_EVENT_ID),
    ("dup-b", _publish("dup", seq=5, entry_id=5), None),
    ("dup-c", _publish("dup", seq=5, entry_id=6), V.DUPLICATE_EVENT_ID),
    ("dup-d", _publish("dup", seq=1, entry_id=-1), V.NEGATIVE_POSITION),
    ("dup-e", _publish("dup", seq=9, entry_id=9), V.DUPLICATE_EVENT_ID),
]


def _frame(spark: SparkSession, lines: list[str | None]) -> DataFrame:
    return spark.createDataFrame([(line,) for line in lines], "value string")


@pytest.fixture(scope="module")
def outcome(spark: SparkSession) -> dict[str, Any]:
    lines = [line for line, _, _ in CASES.values()] + [line for _, line, _ in DUPLICATES]
    valid, rejected = parse_and_validate(_frame(spark, lines))
    return {
        "lines": lines,
        "valid": [r.asDict(recursive=True) for r in valid.collect()],
        "rejected": [r.asDict(recursive=True) for r in rejected.collect()],
        "valid_schema": valid.schema,
        "rejected_schema": rejected.schema,
    }


def _rejected_by_raw(outcome: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {row["raw"]: row for row in outcome["rejected"]}


def _valid_by_id(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["event_id"]: row for row in outcome["valid"]}


@pytest.mark.parametrize("case", sorted(name for name, (_, reason, _) in CASES.items() if reason))
def test_rejected_with_reason(outcome: dict[str, Any], case: str) -> None:
    line, reason, fragment = CASES[case]
    rows = [row for row in outcome["rejected"] if row["raw"] == line]
    assert len(rows) == 1, f"{case}: expected one rejected row for {line!r}"
    row = rows[0]
    assert row["reason"] == reason, f"{case}: {row['reason']} ({row['detail']})"
    assert row["detail"], case
    if fragment:
        assert fragment in row["detail"], f"{case}: {row['detail']!r}"


@pytest.mark.parametrize("case", sorted(name for name, (_, reason, _) in CASES.items() if not reason))
def test_valid_records_pass(outcome: dict[str, Any], case: str) -> None:
    line, _, _ = CASES[case]
    assert line is not None
    event_id = json.loads(line)["event_id"]
    assert event_id in _valid_by_id(outcome), f"{case} was rejected: {_rejected_by_raw(outcome).get(line)}"


def test_every_validation_reason_is_exercised() -> None:
    exercised = {reason for _, reason, _ in CASES.values()} | {reason for _, _, reason in DUPLICATES}
    assert set(V.VALIDATION_ORDER) <= exercised


def test_every_input_row_ends_up_in_exactly_one_output(outcome: dict[str, Any]) -> None:
    lines = outcome["lines"]
    assert len(set(lines)) == len(lines)  # the cases are distinct lines
    assert len(outcome["valid"]) + len(outcome["rejected"]) == len(lines)
    rejected_raw = [r["raw"] for r in outcome["rejected"]]
    assert len(set(rejected_raw)) == len(rejected_raw)
    assert set(rejected_raw) <= set(lines)
    expected_rejected = {line for line, reason, _ in CASES.values() if reason} | {
        line for _, line, reason in DUPLICATES if reason
    }
    assert set(rejected_raw) == expected_rejected


def test_defaults_are_applied(outcome: dict[str, Any]) -> None:
    valid = _valid_by_id(outcome)
    sub = valid["ok-sub"]
    assert sub["partition"] == -1
    assert sub["priority_level"] == 0
    assert sub["ack_timeout_ms"] == 0
    assert sub["negative_ack_delay_ms"] == 60_000
    assert sub["max_redeliver_count"] == 0
    assert sub["initial_position"] == "Latest"
    assert sub["batch_size"] == 1
    assert sub["num_messages"] == 1
    assert valid["ok-pub-plain"]["highest_sequence_id"] == 7
    assert valid["ok-pub"]["highest_sequence_id"] == 10
    assert valid["ok-cum"]["message_ids"] == [
        {"ledger_id": 10, "entry_id": 5, "batch_index": -1, "batch_size": None, "ack_set": None}
    ]
    assert valid["ok-bi"]["message_ids"][0]["batch_index"] == 3
    assert valid["ok-redeliver"]["message_ids"] == []
    assert valid["ok-np"]["partition"] == 2
    assert valid["ok-as65"]["message_ids"][0]["ack_set"] == [-1, 1]


def test_explicit_values_are_kept(spark: SparkSession) -> None:
    line = _subscribe(
        "explicit",
        partition=4,
        priority_level=2,
        ack_timeout_ms=30_000,
        negative_ack_delay_ms=1000,
        max_redeliver_count=3,
        initial_position="Earliest",
    )
    valid, rejected = parse_and_validate(_frame(spark, [line]))
    assert rejected.count() == 0
    row = valid.first()
    assert row is not None
    assert (row.partition, row.priority_level, row.ack_timeout_ms) == (4, 2, 30_000)
    assert (row.negative_ack_delay_ms, row.max_redeliver_count, row.initial_position) == (1000, 3, "Earliest")


def test_duplicates_keep_the_lowest_seq_first_in_input_order(outcome: dict[str, Any]) -> None:
    kept = [row for row in outcome["valid"] if row["event_id"] == "dup"]
    assert [(row["seq"], row["entry_id"]) for row in kept] == [(5, 5)]
    rejected = _rejected_by_raw(outcome)
    for _, line, reason in DUPLICATES:
        if reason is None:
            assert line not in rejected
        else:
            assert rejected[line]["reason"] == reason
            if reason == V.DUPLICATE_EVENT_ID:
                assert "seq 5" in rejected[line]["detail"]


def test_malformed_records_are_kept_raw(outcome: dict[str, Any]) -> None:
    rejected = _rejected_by_raw(outcome)
    for name in ("truncated", "array", "scalar", "blank", "string_seq"):
        line = CASES[name][0]
        row = rejected[line]
        assert row["raw"] == line
        assert row["reason"] == V.MALFORMED_JSON
    assert rejected[None]["reason"] == V.MALFORMED_JSON


def test_rejected_rows_carry_what_could_be_read(outcome: dict[str, Any]) -> None:
    rejected = _rejected_by_raw(outcome)
    row = rejected[CASES["teleport"][0]]
    assert (
        row["event_id"],
        row["topic"],
        row["partition"],
        row["seq"],
        row["type"],
        row["subscription"],
    ) == (
        "ut-1",
        TOPIC,
        -1,
        1,
        "TELEPORT",
        "sub",
    )
    wrong_type = rejected[CASES["string_seq"][0]]
    assert wrong_type["event_id"] == "m-seq" and wrong_type["seq"] is None
    truncated = rejected[CASES["truncated"][0]]
    assert truncated["event_id"] is None and truncated["partition"] is None


def _strip_nullability(data_type: T.DataType) -> T.DataType:
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, _strip_nullability(f.dataType)) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_strip_nullability(data_type.elementType))
    return data_type


def test_output_schemas(outcome: dict[str, Any]) -> None:
    assert _strip_nullability(outcome["valid_schema"]) == _strip_nullability(EVENT_SCHEMA)
    rejected_schema = outcome["rejected_schema"]
    assert tuple(rejected_schema.fieldNames()) == REJECTED_EVENT_COLUMNS
    table = TABLES["rejected_events"]
    for field in rejected_schema.fields:
        assert field.dataType == table[field.name].dataType, field.name


def test_steps_compose_like_parse_and_validate(spark: SparkSession) -> None:
    lines = [CASES["teleport"][0], CASES["subscribe_with_defaults"][0], DUPLICATES[0][1], DUPLICATES[1][1]]
    marked = mark_duplicates(classify(_frame(spark, lines)))
    valid, rejected = split(marked)
    assert sorted(r.event_id for r in valid.collect()) == ["dup", "ok-sub"]
    assert sorted(r.reason for r in rejected.collect()) == [V.DUPLICATE_EVENT_ID, V.UNKNOWN_TYPE]


def test_a_batch_in_one_partition_marks_and_rejects_what_a_spread_one_does(
    spark: SparkSession, outcome: dict[str, Any]
) -> None:
    """``mark_duplicates_in_partition`` (a window over the one partition, in classify's own job)
    gives every row, reason and detail that ``mark_duplicates`` (an aggregate and a broadcast
    join) gives; the rows then pass through the driver as the ingest job's do."""
    from jobs.ingest.counts import input_summary, input_summary_of_rows
    from jobs.ingest.validate import mark_duplicates_in_partition
    from jobs.platform.tables import local_copy_and_rows

    raw = _frame(spark, outcome["lines"]).coalesce(1)
    marked = mark_duplicates_in_partition(classify(raw))
    marked, rows = local_copy_and_rows(spark, marked, marked.schema)
    valid, rejected = split(marked)

    def key(row: dict[str, Any]) -> str:
        return json.dumps(row, sort_keys=True, default=str)

    assert sorted(map(key, (r.asDict(recursive=True) for r in valid.collect()))) == sorted(
        map(key, outcome["valid"])
    )
    assert sorted(map(key, (r.asDict(recursive=True) for r in rejected.collect()))) == sorted(
        map(key, outcome["rejected"])
    )
    dups = [r for r in outcome["rejected"] if r["reason"] == V.DUPLICATE_EVENT_ID]
    assert len(dups) == 3 and all("seq 5" in r["detail"] for r in dups)
    touched, reasons = input_summary_of_rows(rows)
    spread_touched, spread_reasons = input_summary(mark_duplicates(classify(_frame(spark, outcome["lines"]))))
    assert sorted(touched) == sorted(spread_touched) and touched
    assert reasons == spread_reasons
    assert reasons[V.DUPLICATE_EVENT_ID] == 3 and sum(reasons.values()) == len(outcome["rejected"])


def test_the_summary_before_marking_is_the_marked_one_when_no_event_id_repeats(spark: SparkSession) -> None:
    """``classified_summary`` (one job, before duplicates are marked) names the topic partitions
    and counts the reasons ``input_summary`` finds after marking when no valid row's event-id
    hash repeats; with duplicates it counts their hashes, and the caller summarises again."""
    from jobs.ingest.counts import classified_summary, input_summary

    singles = [line for line, _, _ in CASES.values()]
    classified = classify(_frame(spark, singles))
    summary = classified_summary(classified)
    touched, reasons = input_summary(mark_duplicates(classified))
    assert summary.repeated_hashes == 0
    assert sorted(summary.touched) == sorted(touched) and touched
    assert summary.rejections == reasons and len(reasons) > 3

    with_duplicates = classify(_frame(spark, singles + [line for _, line, _ in DUPLICATES]))
    summary = classified_summary(with_duplicates)
    touched, reasons = input_summary(mark_duplicates(with_duplicates))
    assert summary.repeated_hashes == 1  # "dup", carried by four valid rows
    assert V.DUPLICATE_EVENT_ID not in summary.rejections and reasons[V.DUPLICATE_EVENT_ID] == 3


def test_delta_source_round_trip(spark: SparkSession, outcome: dict[str, Any]) -> None:
    """A Delta source builds `value` with to_json(struct(*)); valid events survive it unchanged."""
    valid = spark.createDataFrame(outcome["valid"], EVENT_SCHEMA)
    again, rejected = parse_and_validate(valid.select(F.to_json(F.struct("*")).alias("value")))
    assert rejected.count() == 0
    key = ["event_id", "seq", "entry_id"]
    assert sorted(again.collect(), key=lambda r: tuple(str(r[k]) for k in key)) == sorted(
        valid.collect(), key=lambda r: tuple(str(r[k]) for k in key)
    )


# --------------------------------------------------------------------------- shared scenarios


def _scenario_lines(scenario: dict[str, Any]) -> list[str]:
    runner = load_runner()
    s = runner.Scenario(path=scenario["name"], data=scenario)
    return list(runner.event_records(s, len(scenario["events"])))


def test_rejected_records_scenario(spark: SparkSession) -> None:
    scenario = load_scenario("rejected-records-do-not-stop-stream")
    lines = _scenario_lines(scenario)
    valid, rejected = parse_and_validate(_frame(spark, lines))
    name = scenario["name"]
    after = len(scenario["events"])
    reasons = {r.raw: r.reason for r in rejected.collect()}
    by_event = {i: lines[i - 1] for i in range(1, len(lines) + 1)}
    assert {i: reasons.get(by_event[i]) for i in (6, 7, 8, 9, 12)} == {
        6: V.NEGATIVE_POSITION,
        7: V.UNKNOWN_TYPE,
        8: V.MALFORMED_JSON,
        9: V.BATCH_INDEX_OUT_OF_RANGE,
        12: V.ACK_SET_TOO_LONG,
    }
    # The replay (event 10, seq 5) is valid here: stale_seq is the ingest job's to decide.
    assert sorted(r.event_id for r in valid.collect()) == sorted(
        f"{name}-cp{after}-{i}" for i in (1, 2, 3, 4, 5, 10, 11, 13)
    )


def test_every_shared_scenario_event_is_classified_as_its_file_says(spark: SparkSession) -> None:
    """Events the runner accepts pass; events marked invalid are rejected (all files, one batch)."""
    files = sorted(SCENARIOS.glob("*.json"))
    assert files, f"no scenario files under {SCENARIOS}"
    lines: list[str] = []
    expected_valid: set[str] = set()
    for path in files:
        scenario = json.loads(path.read_text(encoding="utf-8"))
        scenario_lines = _scenario_lines(scenario)
        lines.extend(scenario_lines)
        for i, event in enumerate(scenario["events"]):
            if not event.get("invalid"):
                expected_valid.add(json.loads(scenario_lines[i])["event_id"])
    valid, rejected = parse_and_validate(_frame(spark, lines))
    valid_ids = {r.event_id for r in valid.select("event_id").collect()}
    wrongly_rejected = [
        (r.event_id, r.reason, r.detail) for r in rejected.collect() if r.event_id in expected_valid
    ]
    assert not wrongly_rejected
    assert valid_ids == expected_valid
    assert valid.count() + rejected.count() == len(lines)


def test_one_set_of_expressions_serves_every_batch(spark: SparkSession) -> None:
    """classify reuses its column expressions (building them is ~1 s of py4j calls per batch);
    two frames classified with the same expressions keep their own rows and input order."""
    from jobs.ingest.validate import classify_stages

    assert classify_stages() is classify_stages()
    first = classify(_frame(spark, [_subscribe("a"), "not json"])).collect()
    second = classify(_frame(spark, [_subscribe("b")])).collect()
    assert [(r["event_id"], r["reason"]) for r in first] == [("a", None), (None, V.MALFORMED_JSON)]
    assert [(r["event_id"], r["reason"]) for r in second] == [("b", None)]
    orders = [r["_input_order"] for r in first]
    assert orders == sorted(set(orders))


def test_ack_set_without_batch_size_is_valid(spark: SparkSession) -> None:
    """The Python client's batch-index acks carry ``ack_set`` and no ``batch_size`` (seen from a
    real 4.0.7 broker's ``CommandAck``); Consumer.getBatchSize takes the size from the pending ack."""
    lines = [
        _ack("as-2", {"ledger_id": 10, "entry_id": 2, "ack_set": [23]}),
        _ack("as-3", {"ledger_id": 10, "entry_id": 3, "ack_set": []}),
    ]
    valid, rejected = parse_and_validate(_frame(spark, lines))
    assert rejected.count() == 0
    assert sorted(r.event_id for r in valid.collect()) == ["as-2", "as-3"]


def test_the_optimizer_settles_classify_in_a_few_passes(spark: SparkSession) -> None:
    """Catalyst re-runs its operator rules until the plan stops changing (up to
    ``spark.sql.optimizer.maxIterations``, 100), each pass over all of classify's expressions.
    ``NOT (f1 IS NOT NULL OR f2 IS NOT NULL OR ...)`` over the ~30 event fields made
    BooleanSimplification push the NOT through one OR per pass: ~30 passes, 0.2 s of every
    batch's planning. No rule may rewrite classify's plan more than a few times."""
    frame = classify(_frame(spark, [_subscribe("a"), "not json"]))
    execution = frame._jdf.queryExecution()
    execution.optimizedPlan()
    converters = spark._jvm.scala.jdk.javaapi.CollectionConverters
    rules = converters.asJava(execution.tracker().rules())
    optimizer = {
        name.rsplit(".", 1)[-1]: summary.numEffectiveInvocations()
        for name, summary in rules.items()
        if ".optimizer." in name
    }
    assert optimizer, "the planning tracker recorded no optimizer rule"
    assert max(optimizer.values()) <= 3, sorted(optimizer.items(), key=lambda kv: -kv[1])[:5]
