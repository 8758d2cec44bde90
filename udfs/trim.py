"""The ledger-trim UDF: one topic partition's state -> its state after deleting ledgers.

A thin adapter like ``udfs.apply``: the state rows of one topic partition (``STATE_INPUT`` plus
the ``first_retained_ledger`` column) are decoded, ``PartitionState.trim_ledgers`` decides what
moves, and the result comes back as ``schemas.udf.APPLY_OUTPUT`` rows of the same kinds the
ingest writes: the partition (re-encoded ledgers), every cursor that moved (with its
subscription state), and the projection changes (ack ranges and batch entries as
upserts/deletes against the state read, the replays its subscription forgot as
``redelivery`` deletes, deleted ledgers as ``ledger`` deletes). A partition that loses no
ledger produces no rows.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from engine import EngineSettings
from schemas.udf import DELETE, LEDGER, PARTITION, UPSERT
from udfs.apply import _Rows, emit_cursor, state_from_arrow

FIRST_RETAINED = "first_retained_ledger"
"""The extra input column: the first ledger the topic partition keeps."""


def trim_partition(key: tuple[Any, ...], state: pa.Table) -> pa.Table:
    """Grouped-by-(topic, partition) function for ``applyInArrow``."""
    topic, partition = key[0].as_py(), int(key[1].as_py())
    out = _Rows(topic, partition)
    first_retained = state.column(FIRST_RETAINED).combine_chunks()
    if len(first_retained) == 0 or first_retained.null_count == len(first_retained):
        return out.table()
    current, encoded_before = state_from_arrow(topic, partition, state.drop_columns([FIRST_RETAINED]))
    result = current.trim_ledgers(int(first_retained.drop_null()[0].as_py()))
    if not result.removed:
        return out.table()

    out.add(
        PARTITION,
        UPSERT,
        1,
        last_seq=[current.last_seq],
        last_event_time=[current.last_event_time],
        ledgers=[current.ledgers.encode()],
        applied=[0],
        stale=[0],
    )
    for name in sorted(result.advanced):
        # only redelivery deletes change in a subscription (Subscription.forget_deleted): no
        # engine setting shapes those rows, so the defaults serve
        emit_cursor(out, current, name, encoded_before, True, EngineSettings())
    out.add(
        LEDGER,
        DELETE,
        len(result.removed),
        ledger_id=[lid for lid, _ in result.removed],
        upper_entry_id=[last for _, last in result.removed],
        entries=[last + 1 for _, last in result.removed],
    )
    return out.table()
