"""The v1 event schema: Spark and Arrow agree, and both follow CONTRACT.md section 1."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from schemas.events import (
    ACK_TYPES,
    EVENT_ARROW_SCHEMA,
    EVENT_DEFAULTS,
    EVENT_FIELD_NAMES,
    EVENT_SCHEMA,
    EVENT_TYPES,
    INITIAL_POSITIONS,
    MESSAGE_ID_DEFAULTS,
    SUB_TYPES,
)

CONTRACT_ORDER = [
    "event_id",
    "seq",
    "event_time",
    "type",
    "topic",
    "partition",
    "subscription",
    "consumer_id",
    "consumer_name",
    "sub_type",
    "priority_level",
    "ack_timeout_ms",
    "negative_ack_delay_ms",
    "max_redeliver_count",
    "initial_position",
    "ledger_id",
    "entry_id",
    "batch_size",
    "key",
    "ack_type",
    "message_ids",
    "producer_name",
    "sequence_id",
    "highest_sequence_id",
    "num_messages",
    # contract additions (README "Contract additions"), appended after the contract's fields
    "connection_id",
    "completed_at",
    "chunk_id",
    "num_chunks_from_msg",
    "marker",
]

_SPARK_TO_ARROW = {
    T.StringType(): pa.string(),
    T.LongType(): pa.int64(),
    T.IntegerType(): pa.int32(),
    T.BooleanType(): pa.bool_(),
}


def _arrow_of(spark_type: T.DataType) -> pa.DataType:
    if isinstance(spark_type, T.ArrayType):
        return pa.list_(_arrow_of(spark_type.elementType))
    if isinstance(spark_type, T.StructType):
        return pa.struct([pa.field(f.name, _arrow_of(f.dataType)) for f in spark_type.fields])
    return _SPARK_TO_ARROW[spark_type]


def test_fields_are_in_contract_order() -> None:
    assert list(EVENT_SCHEMA.fieldNames()) == CONTRACT_ORDER
    assert EVENT_ARROW_SCHEMA.names == CONTRACT_ORDER
    assert list(EVENT_FIELD_NAMES) == CONTRACT_ORDER


def test_spark_and_arrow_schemas_agree_field_by_field() -> None:
    for spark_field, arrow_field in zip(EVENT_SCHEMA.fields, EVENT_ARROW_SCHEMA, strict=True):
        assert spark_field.name == arrow_field.name
        assert _arrow_of(spark_field.dataType) == arrow_field.type, spark_field.name
        assert spark_field.nullable and arrow_field.nullable


def test_message_ids_shape() -> None:
    element = EVENT_SCHEMA["message_ids"].dataType.elementType
    assert [(f.name, f.dataType) for f in element.fields] == [
        ("ledger_id", T.LongType()),
        ("entry_id", T.LongType()),
        ("batch_index", T.IntegerType()),
        ("batch_size", T.IntegerType()),
        ("ack_set", T.ArrayType(T.LongType())),
    ]


@pytest.mark.parametrize(
    ("name", "spark_type"),
    [
        ("seq", T.LongType()),
        ("event_time", T.LongType()),
        ("partition", T.IntegerType()),
        ("consumer_id", T.LongType()),
        ("priority_level", T.IntegerType()),
        ("ack_timeout_ms", T.LongType()),
        ("negative_ack_delay_ms", T.LongType()),
        ("max_redeliver_count", T.IntegerType()),
        ("batch_size", T.IntegerType()),
        ("sequence_id", T.LongType()),
        ("highest_sequence_id", T.LongType()),
        ("num_messages", T.IntegerType()),
    ],
)
def test_numeric_types_follow_the_contract(name: str, spark_type: T.DataType) -> None:
    assert EVENT_SCHEMA[name].dataType == spark_type


def test_enumerations() -> None:
    assert EVENT_TYPES == (
        "SUBSCRIBE",
        "CLOSE_CONSUMER",
        "PUBLISH",
        "SEND",
        "SEND_FAILED",
        "DISPATCH",
        "ACK",
        "NACK",
        "REDELIVER",
        "RESET_CURSOR",  # contract additions
        "MARK_DELETE",
        "UNSUBSCRIBE",
        "LOAD_TOPIC",
        "DELETE_TOPIC",
        "CREATE_SUBSCRIPTION",
    )
    assert set(SUB_TYPES) == {"Exclusive", "Failover", "Shared", "Key_Shared"}
    assert set(ACK_TYPES) == {"Individual", "Cumulative"}
    assert set(INITIAL_POSITIONS) == {"Latest", "Earliest"}


def test_defaults_are_the_contract_ones() -> None:
    assert EVENT_DEFAULTS == {
        "partition": -1,
        "batch_size": 1,
        "priority_level": 0,
        "ack_timeout_ms": 0,
        "negative_ack_delay_ms": 60_000,
        "max_redeliver_count": 0,
        "initial_position": "Latest",
        "num_messages": 1,
        "marker": False,  # contract addition (CommandSend.marker)
    }
    assert MESSAGE_ID_DEFAULTS == {"batch_index": -1}
    assert set(EVENT_DEFAULTS) <= set(EVENT_FIELD_NAMES)
