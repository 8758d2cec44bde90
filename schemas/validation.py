"""Validation rules of the v1 event, as data: what is required, what is allowed, and why a
record is rejected.

This module only states the rules; `jobs.ingest.validate` turns them into Spark column expressions
and the engine raises its own refusals (`engine.errors`). Keeping the rules here, free of Spark
logic, lets tests, the scenario format and the docs read the same list.
"""

from __future__ import annotations

from typing import Final

from schemas.events import ACK_TYPES, EVENT_TYPES, INITIAL_POSITIONS, SUB_TYPES

# Every record, whatever its type, needs these (CONTRACT.md section 1, "required for: all").
COMMON_REQUIRED: Final[tuple[str, ...]] = ("event_id", "seq", "event_time", "type", "topic")

# Per type, the contract's "required for" column (the scenario runner's REQUIRED, verbatim).
REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "SUBSCRIBE": ("subscription", "consumer_id", "consumer_name", "sub_type"),
    "CLOSE_CONSUMER": ("subscription", "consumer_id"),
    "PUBLISH": ("ledger_id", "entry_id", "producer_name", "sequence_id"),
    "SEND": ("producer_name", "sequence_id"),
    "SEND_FAILED": (),
    "DISPATCH": ("subscription", "consumer_id", "ledger_id", "entry_id"),
    "ACK": ("subscription", "consumer_id", "ack_type", "message_ids"),
    "NACK": ("subscription", "consumer_id", "message_ids"),
    "REDELIVER": ("subscription", "consumer_id", "message_ids"),
    # contract additions: the broker moved the cursor itself (README, "Contract additions")
    "RESET_CURSOR": ("subscription", "ledger_id", "entry_id"),
    "MARK_DELETE": ("subscription", "ledger_id", "entry_id"),
    "UNSUBSCRIBE": ("subscription",),
    # contract additions: the broker loaded the topic partition afresh, or deleted it
    "LOAD_TOPIC": (),
    "DELETE_TOPIC": (),
    # contract addition: the admin API made a subscription, its cursor at (ledger_id, entry_id)
    "CREATE_SUBSCRIPTION": ("subscription", "ledger_id", "entry_id"),
}
# Every element of `message_ids` names an entry.
MESSAGE_ID_REQUIRED: Final[tuple[str, ...]] = ("ledger_id", "entry_id")
# Types whose `message_ids` may not be empty (an empty REDELIVER means "all unacked").
NON_EMPTY_MESSAGE_IDS: Final[tuple[str, ...]] = ("ACK", "NACK")

# Enumerated string fields and their allowed values (case-sensitive, as on the wire).
ENUMS: Final[dict[str, tuple[str, ...]]] = {
    "type": EVENT_TYPES,
    "sub_type": SUB_TYPES,
    "ack_type": ACK_TYPES,
    "initial_position": INITIAL_POSITIONS,
}

# Lower bounds of numeric fields (checked after defaults; a null is "not given").
MIN_VALUES: Final[dict[str, int]] = {
    "seq": 0,
    "event_time": 0,
    "partition": -1,
    "batch_size": 1,
    "num_messages": 1,
    "priority_level": 0,
    "ack_timeout_ms": 0,
    "negative_ack_delay_ms": 0,
    "max_redeliver_count": 0,
    # producer sequence ids are uint64 on the wire (CommandSend), as are connection and chunk ids
    "sequence_id": 0,
    "highest_sequence_id": 0,
    "connection_id": 0,
    "completed_at": 0,
    "chunk_id": 0,
    "num_chunks_from_msg": 1,
}
# Rules between fields (invalid_value): the SQL condition that fails a record, and the detail as
# a format_string pattern over the columns named after it. A null condition never fails.
FIELD_RELATIONS: Final[tuple[tuple[str, str, tuple[str, ...]], ...]] = (
    (
        "completed_at < event_time",
        "completed_at %d is before event_time %d: a send completes after it is received",
        ("completed_at", "event_time"),
    ),
    (
        "chunk_id IS NOT NULL AND num_chunks_from_msg IS NULL",
        "chunk_id %d needs num_chunks_from_msg",
        ("chunk_id",),
    ),
    (
        "chunk_id >= num_chunks_from_msg",
        "chunk_id %d outside [0, num_chunks_from_msg %d)",
        ("chunk_id", "num_chunks_from_msg"),
    ),
    (
        "type = 'SEND_FAILED' AND topic LIKE 'non-persistent://%'",
        "SEND_FAILED on a non-persistent topic: nothing is persisted there to fail",
        (),
    ),
    (
        "type = 'CREATE_SUBSCRIPTION' AND topic LIKE 'non-persistent://%'",
        "CREATE_SUBSCRIPTION on a non-persistent topic: the broker makes those subscriptions only"
        " for a consumer",
        (),
    ),
)
MESSAGE_ID_MIN_VALUES: Final[dict[str, int]] = {"batch_size": 1}
# Positions have their own reason code (negative_position), not invalid_value.
POSITION_FIELDS: Final[tuple[str, ...]] = ("ledger_id", "entry_id")
# Types whose position is a mark-delete position, which may be ``L:-1``: before the first entry
# of ledger L (where a cursor sits before anything in L is acked), as internalStats prints it.
MARK_DELETE_POSITION_TYPES: Final[tuple[str, ...]] = ("RESET_CURSOR", "MARK_DELETE", "CREATE_SUBSCRIPTION")

# Full topic name without the partition suffix: the scenario runner's v2 names
# (``tenant/namespace/name``), and, a contract addition, v1 names
# (``property/cluster/namespace/name``), which Pulsar still serves (TopicName: four parts).
TOPIC_PATTERN: Final = r"^(persistent|non-persistent)://[^/\s]+/[^/\s]+(/[^/\s]+)?/[^/\s]+$"
PARTITION_SUFFIX_PATTERN: Final = r"-partition-[0-9]+$"
ACK_SET_WORD_BITS: Final = 64

# --------------------------------------------------------------------------- reason codes
# Input validation (jobs.ingest.validate, in this order of precedence: a record gets the first).
MALFORMED_JSON: Final = "malformed_json"
UNKNOWN_TYPE: Final = "unknown_type"
MISSING_FIELD: Final = "missing_field"
INVALID_VALUE: Final = "invalid_value"
NEGATIVE_POSITION: Final = "negative_position"
BATCH_INDEX_OUT_OF_RANGE: Final = "batch_index_out_of_range"
ACK_SET_TOO_LONG: Final = "ack_set_too_long"
DUPLICATE_EVENT_ID: Final = "duplicate_event_id"
# Ingest job: replays.
STALE_SEQ: Final = "stale_seq"
# Engine refusals (engine.errors): commands the broker itself refuses or ignores.
ACK_BEYOND_LAST_PUBLISHED: Final = "ack_beyond_last_published"
MARK_DELETE_BEFORE_MARK_DELETE: Final = "mark_delete_before_mark_delete"
UNKNOWN_SUBSCRIPTION: Final = "unknown_subscription"
CUMULATIVE_ACK_NOT_ALLOWED: Final = "cumulative_ack_not_allowed"
CUMULATIVE_ACK_MULTIPLE_IDS: Final = "cumulative_ack_multiple_ids"
EXCLUSIVE_CONSUMER_BUSY: Final = "exclusive_consumer_busy"
UNKNOWN_CONSUMER: Final = "unknown_consumer"
PUBLISH_OUT_OF_ORDER: Final = "publish_out_of_order"
SUBSCRIPTION_TYPE_MISMATCH: Final = "subscription_type_mismatch"
CONSUMER_ID_IN_USE: Final = "consumer_id_in_use"
CONSUMER_NOT_CONNECTED: Final = "consumer_not_connected"
REDELIVER_NOT_ACTIVE_CONSUMER: Final = "redeliver_not_active_consumer"
REDELIVER_DURING_FAILOVER_SWITCH: Final = "redeliver_during_failover_switch"
DISPATCH_BEYOND_LAST_PUBLISHED: Final = "dispatch_beyond_last_published"
DISPATCH_OF_ACKED_ENTRY: Final = "dispatch_of_acked_entry"

REASONS: Final[dict[str, str]] = {
    MALFORMED_JSON: "the line is not a JSON object, or a field has a JSON type the v1 schema "
    "cannot read (e.g. a string seq), or no v1 field is present",
    MISSING_FIELD: "a field required for all events or for this type is absent or null; detail "
    "names the field(s)",
    UNKNOWN_TYPE: "type is not one of the v1 event types (upper case)",
    INVALID_VALUE: "a value outside its domain: bad enum, bad topic name, partition < -1, "
    "negative seq/event_time/sequence ids, batch_size < 1, an empty ACK/NACK message_ids, a send "
    "completed before it was received, a chunk id outside its message, ...",
    NEGATIVE_POSITION: "ledger_id or entry_id < 0, in the event or in one of its message ids",
    BATCH_INDEX_OUT_OF_RANGE: "a message id's batch_index is neither -1 nor in [0, batch_size)",
    ACK_SET_TOO_LONG: "a message id's ack_set has more words than ceil(batch_size / 64)",
    DUPLICATE_EVENT_ID: "another valid record of the same input batch has this event_id and a "
    "lower seq (or the same seq and came first); only that one is applied",
    STALE_SEQ: "seq is not above the last applied seq of its topic partition (a replay)",
    ACK_BEYOND_LAST_PUBLISHED: "an ack names a position after the last published entry",
    MARK_DELETE_BEFORE_MARK_DELETE: "a cumulative ack at or before the current mark-delete position",
    UNKNOWN_SUBSCRIPTION: "a consumer command for a subscription that never saw a SUBSCRIBE",
    CUMULATIVE_ACK_NOT_ALLOWED: "a cumulative ack on a Shared or Key_Shared subscription",
    CUMULATIVE_ACK_MULTIPLE_IDS: "a cumulative ack that carries more than one message id",
    EXCLUSIVE_CONSUMER_BUSY: "a second consumer on an Exclusive subscription",
    UNKNOWN_CONSUMER: "a command from a consumer id that never subscribed (or has left)",
    PUBLISH_OUT_OF_ORDER: "a PUBLISH at or before the last published entry of the partition",
    SUBSCRIPTION_TYPE_MISMATCH: "a SUBSCRIBE with another type while consumers of the subscription's "
    'type are connected ("Subscription is of different type")',
    CONSUMER_ID_IN_USE: "a SUBSCRIBE with a consumer id already connected to the subscription",
    CONSUMER_NOT_CONNECTED: "a CLOSE_CONSUMER for a consumer that is not connected "
    '("Consumer was not connected")',
    REDELIVER_NOT_ACTIVE_CONSUMER: "a redeliver request from a Failover consumer that is not the active "
    'one ("Only the active consumer can call resend")',
    REDELIVER_DURING_FAILOVER_SWITCH: "a redeliver request while a Failover switch is still pending "
    "(activeConsumerFailoverDelayTimeMillis)",
    DISPATCH_BEYOND_LAST_PUBLISHED: "a DISPATCH of a position after the last published entry",
    DISPATCH_OF_ACKED_ENTRY: "a DISPATCH of an entry the cursor has already acknowledged",
}

# The order in which jobs.ingest.validate checks a record; the first failing rule is its reason.
# missing_field appears twice: the common fields are checked before the type (a record
# without a type cannot have an unknown one), the per-type fields after it.
VALIDATION_ORDER: Final[tuple[str, ...]] = (
    MALFORMED_JSON,
    MISSING_FIELD,  # COMMON_REQUIRED
    UNKNOWN_TYPE,
    MISSING_FIELD,  # REQUIRED[type] and MESSAGE_ID_REQUIRED
    INVALID_VALUE,
    NEGATIVE_POSITION,
    BATCH_INDEX_OUT_OF_RANGE,
    ACK_SET_TOO_LONG,
    DUPLICATE_EVENT_ID,  # only among records that passed every other rule
)
# Produced by jobs.ingest.validate; the others come from the ingest job and the engine.
VALIDATION_REASONS: Final[frozenset[str]] = frozenset(VALIDATION_ORDER)
ENGINE_REASONS: Final[frozenset[str]] = frozenset(
    {
        ACK_BEYOND_LAST_PUBLISHED,
        MARK_DELETE_BEFORE_MARK_DELETE,
        UNKNOWN_SUBSCRIPTION,
        CUMULATIVE_ACK_NOT_ALLOWED,
        CUMULATIVE_ACK_MULTIPLE_IDS,
        EXCLUSIVE_CONSUMER_BUSY,
        UNKNOWN_CONSUMER,
        PUBLISH_OUT_OF_ORDER,
        SUBSCRIPTION_TYPE_MISMATCH,
        CONSUMER_ID_IN_USE,
        CONSUMER_NOT_CONNECTED,
        REDELIVER_NOT_ACTIVE_CONSUMER,
        REDELIVER_DURING_FAILOVER_SWITCH,
        DISPATCH_BEYOND_LAST_PUBLISHED,
        DISPATCH_OF_ACKED_ENTRY,
    }
)
