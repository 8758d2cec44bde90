"""Warehouse table schemas: the registry, keys and the columns CONTRACT.md promises."""

from __future__ import annotations

import pytest
from pyspark.sql import types as T

from schemas.tables import (
    APPEND_ONLY,
    REJECTED_EVENT_COLUMNS,
    TABLE_CLUSTERING,
    TABLE_KEYS,
    TABLES,
)

EXPECTED_COLUMNS = {
    "topic_partitions": "topic partition last_seq last_event_time ledgers query_id batch_id updated_at "
    "producers_state",
    "cursors": "topic partition subscription sub_type mark_delete mark_delete_ledger_id mark_delete_entry_id "
    "state state_format msg_backlog non_contiguous_deleted_ranges partial_batch_entries last_seq "
    "last_event_time query_id batch_id updated_at subscription_state",
    "ack_ranges": "topic partition subscription ledger_id lower_entry_id upper_entry_id range entries",
    "batch_acks": "topic partition subscription ledger_id entry_id position batch_size ack_set acked_count",
    "ledgers": "topic partition ledger_id first_entry_id last_entry_id entries",
    "rejected_events": "event_id topic partition seq type subscription reason detail raw query_id batch_id "
    "rejected_at",
    "ingest_batches": "query_id batch_id input_rows applied_rows rejected_rows stale_rows duplicate_rows "
    "partitions_touched cursors_touched duration_ms rows_per_second started_at finished_at",
    "consumers": "topic partition subscription consumer_id consumer_name sub_type priority_level connected "
    "is_active unacked_messages blocked subscribed_at closed_at ack_timeout_ms negative_ack_delay_ms "
    "max_redeliver_count query_id batch_id updated_at attached_implicitly",
    "pending_acks": "topic partition subscription consumer_id ledger_id entry_id position batch_size "
    "unacked_messages dispatched_at redelivery_count sticky_key_hash ack_timeout_at",
    "redeliveries": "topic partition subscription ledger_id entry_id position consumer_id reason "
    "requested_at "
    "due_at redelivery_count dead_letter delivered_at query_id batch_id updated_at",
    "active_consumer_changes": "topic partition subscription seq event_time sub_type previous_consumer_id "
    "previous_consumer_name new_consumer_id new_consumer_name effective_at query_id batch_id updated_at",
    "producers": "topic partition producer_name highest_sequence_pushed highest_sequence_persisted "
    "msg_drop_count last_event_time query_id batch_id updated_at",
    "send_receipts": "topic partition event_id seq event_time producer_name sequence_id highest_sequence_id "
    "dedup_status receipt receipt_ledger_id receipt_entry_id error dropped query_id batch_id updated_at",
    "ledger_trims": "topic partition first_retained_ledger requested_by requested_at",
}


def test_registry_has_exactly_the_contract_tables() -> None:
    assert set(TABLES) == set(EXPECTED_COLUMNS)
    assert set(TABLE_KEYS) == set(TABLES)
    assert set(TABLE_CLUSTERING) == set(TABLES)
    assert set(APPEND_ONLY) <= set(TABLES)


@pytest.mark.parametrize("name", sorted(EXPECTED_COLUMNS))
def test_columns(name: str) -> None:
    assert TABLES[name].fieldNames() == EXPECTED_COLUMNS[name].split()


@pytest.mark.parametrize("name", sorted(EXPECTED_COLUMNS))
def test_keys_and_clustering_are_columns(name: str) -> None:
    columns = set(TABLES[name].fieldNames())
    assert set(TABLE_KEYS[name]) <= columns
    assert set(TABLE_CLUSTERING[name]) <= columns


def test_key_columns_of_state_tables_are_not_nullable() -> None:
    for name in ("topic_partitions", "cursors", "ack_ranges", "batch_acks", "ledgers"):
        schema = TABLES[name]
        for col in ("topic", "partition"):
            assert not schema[col].nullable, (name, col)
    for name in ("cursors", "ack_ranges", "batch_acks"):
        assert not TABLES[name]["subscription"].nullable


def test_reason_is_required() -> None:
    assert not TABLES["rejected_events"]["reason"].nullable


def test_positions_are_string_and_long_pairs() -> None:
    cursors = TABLES["cursors"]
    assert cursors["mark_delete"].dataType == T.StringType()
    assert cursors["mark_delete_ledger_id"].dataType == T.LongType()
    assert cursors["mark_delete_entry_id"].dataType == T.LongType()
    assert TABLES["batch_acks"]["ack_set"].dataType == T.ArrayType(T.LongType())
    assert TABLES["batch_acks"]["position"].dataType == T.StringType()


def test_rejected_columns_produced_by_validation() -> None:
    assert REJECTED_EVENT_COLUMNS == (
        "event_id",
        "topic",
        "partition",
        "seq",
        "type",
        "subscription",
        "reason",
        "detail",
        "raw",
    )
