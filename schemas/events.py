"""The v1 input event: CONTRACT.md section 1, as a Spark and as an Arrow schema.

One declaration (`_FIELDS`) feeds both schemas so that they cannot drift apart; the field
order is the contract table's, which is also the column order of the valid-event DataFrame
that `jobs.ingest.validate` hands to the engine. The contract only ever grows (new optional fields
at the end), so nothing here may be renamed or reordered.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyspark.sql import types as T

from engine.events import EVENT_DEFAULTS as ENGINE_EVENT_DEFAULTS
from engine.events import EVENT_TYPES as ENGINE_EVENT_TYPES

SCHEMA_VERSION: Final = 1

EVENT_TYPES: Final[tuple[str, ...]] = ENGINE_EVENT_TYPES  # one list, the engine's (it cannot import Spark)
# Events that a consumer of a subscription issues (they carry subscription and consumer_id).
CONSUMER_EVENT_TYPES: Final[tuple[str, ...]] = (
    "SUBSCRIBE",
    "CLOSE_CONSUMER",
    "DISPATCH",
    "ACK",
    "NACK",
    "REDELIVER",
)
SUB_TYPES: Final[tuple[str, ...]] = ("Exclusive", "Failover", "Shared", "Key_Shared")
ACK_TYPES: Final[tuple[str, ...]] = ("Individual", "Cumulative")
INITIAL_POSITIONS: Final[tuple[str, ...]] = ("Latest", "Earliest")

# Contract defaults (Pulsar 4.0 where Pulsar has one), declared in the engine. `highest_sequence_id`
# has no constant default: it defaults to the event's own `sequence_id` (HIGHEST_SEQUENCE_ID_DEFAULTS_TO).
EVENT_DEFAULTS: Final[dict[str, object]] = ENGINE_EVENT_DEFAULTS
# Defaults inside one element of `message_ids`; `batch_size` there has none on purpose: a
# message id without it names a whole entry, and a batch_index without it is out of range.
MESSAGE_ID_DEFAULTS: Final[dict[str, object]] = {"batch_index": -1}
HIGHEST_SEQUENCE_ID_DEFAULTS_TO: Final = "sequence_id"

# (name, kind) in contract order; kinds map to one Spark and one Arrow type below.
_MESSAGE_ID_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("ledger_id", "long"),
    ("entry_id", "long"),
    ("batch_index", "int"),
    ("batch_size", "int"),
    ("ack_set", "array<long>"),
)
_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("event_id", "string"),
    ("seq", "long"),
    ("event_time", "long"),
    ("type", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("subscription", "string"),
    ("consumer_id", "long"),
    ("consumer_name", "string"),
    ("sub_type", "string"),
    ("priority_level", "int"),
    ("ack_timeout_ms", "long"),
    ("negative_ack_delay_ms", "long"),
    ("max_redeliver_count", "int"),
    ("initial_position", "string"),
    ("ledger_id", "long"),
    ("entry_id", "long"),
    ("batch_size", "int"),
    ("key", "string"),
    ("ack_type", "string"),
    ("message_ids", "message_ids"),
    ("producer_name", "string"),
    ("sequence_id", "long"),
    ("highest_sequence_id", "long"),
    ("num_messages", "int"),
    # Contract additions (optional, README "Contract additions"): what the broker knows of a send
    # that dedup and the non-persistent limit need (ServerCnx, CommandSend, MessageMetadata).
    ("connection_id", "long"),  # SEND: the producer's connection (ServerCnx)
    ("completed_at", "long"),  # SEND, non-persistent: epoch ms its publish completed
    ("chunk_id", "int"),  # SEND: MessageMetadata.chunk_id of a chunked message
    ("num_chunks_from_msg", "int"),  # SEND: MessageMetadata.num_chunks_from_msg
    ("marker", "boolean"),  # SEND: CommandSend.marker
)

EVENT_FIELD_NAMES: Final[tuple[str, ...]] = tuple(name for name, _ in _FIELDS)
MESSAGE_ID_FIELD_NAMES: Final[tuple[str, ...]] = tuple(name for name, _ in _MESSAGE_ID_FIELDS)

_SPARK_SCALARS: Final[dict[str, T.DataType]] = {
    "string": T.StringType(),
    "long": T.LongType(),
    "int": T.IntegerType(),
    "array<long>": T.ArrayType(T.LongType(), containsNull=True),
    "boolean": T.BooleanType(),
}
_ARROW_SCALARS: Final[dict[str, pa.DataType]] = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "array<long>": pa.list_(pa.int64()),
    "boolean": pa.bool_(),
}

MESSAGE_ID_SCHEMA: Final = T.StructType(
    [T.StructField(name, _SPARK_SCALARS[kind], nullable=True) for name, kind in _MESSAGE_ID_FIELDS]
)
MESSAGE_ID_ARROW_TYPE: Final = pa.struct(
    [pa.field(name, _ARROW_SCALARS[kind], nullable=True) for name, kind in _MESSAGE_ID_FIELDS]
)


def _spark_type(kind: str) -> T.DataType:
    if kind == "message_ids":
        return T.ArrayType(MESSAGE_ID_SCHEMA, containsNull=True)
    return _SPARK_SCALARS[kind]


def _arrow_type(kind: str) -> pa.DataType:
    if kind == "message_ids":
        return pa.list_(MESSAGE_ID_ARROW_TYPE)
    return _ARROW_SCALARS[kind]


# Every field is nullable: the schema must accept what arrives so that validation, not the
# parser, decides what is wrong and records why (CONTRACT.md: bad input is never lost).
EVENT_SCHEMA: Final = T.StructType(
    [T.StructField(name, _spark_type(kind), nullable=True) for name, kind in _FIELDS]
)
EVENT_ARROW_SCHEMA: Final = pa.schema(
    [pa.field(name, _arrow_type(kind), nullable=True) for name, kind in _FIELDS]
)
