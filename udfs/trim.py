"""The ledger-trim UDF: one topic partition's state -> its state after deleting ledgers.

A thin adapter like ``udfs.apply``: the state rows of one topic partition (``STATE_INPUT``,
with the requested ``first_retained_ledger``) are decoded, ``PartitionState.trim_ledgers`` decides what
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
from schemas.udf import PARTITION, UPSERT
from udfs.apply import OutputRows, emit_cursor, emit_ledger_deletes, requested_trim, state_from_arrow


def trim_partition(key: tuple[Any, ...], state: pa.Table) -> pa.Table:
    """Grouped-by-(topic, partition) function for ``applyInArrow``."""
    topic, partition = key[0].as_py(), int(key[1].as_py())
    out = OutputRows(topic, partition)
    first_retained = requested_trim(state)
    if first_retained is None:
        return out.table()
    current, encoded_before = state_from_arrow(topic, partition, state)
    result = current.trim_ledgers(first_retained)
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
    emit_ledger_deletes(out, result)
    return out.table()
