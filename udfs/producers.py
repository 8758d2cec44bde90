"""The producer side of the apply UDF: Arrow producer fields in, ``producer``/``receipt`` rows out.

A thin adapter like ``udfs.apply``: the SEND fields of the grouped events become an
``engine.events.SendColumns`` (no loop per event), and what ``engine.dedup`` decided comes back
as ``schemas.udf.APPLY_OUTPUT`` rows: one ``producer`` row per producer the batch changed, one
``receipt`` row per SEND of the batch (with its ``event_id``), and one ``late_receipt`` row per
earlier SEND the batch answered (only ``seq`` and the answer: the ingest matches it by ``seq``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from engine.events import SendColumns
from schemas.udf import DELETE, LATE_RECEIPT, PRODUCER, RECEIPT, UPSERT
from udfs.columns import column, int_column

if TYPE_CHECKING:
    from engine import ApplyResult, PartitionState


def send_columns(events: pa.Table) -> SendColumns:
    """The producer fields of the events, columnar (absent numbers -1, ``num_messages`` 1)."""

    def ints(name: str, fill: int, dtype: Any) -> np.ndarray:
        return int_column(column(events, name), fill, dtype)

    names = column(events, "producer_name").dictionary_encode()
    return SendColumns(
        producer_code=int_column(names.indices, -1, np.int32),
        producer_names=names.dictionary.to_pylist(),
        sequence_id=ints("sequence_id", -1, np.int64),
        highest_sequence_id=ints("highest_sequence_id", -1, np.int64),
        num_messages=ints("num_messages", 1, np.int32),
        connection_id=ints("connection_id", -1, np.int64),
        completed_at=ints("completed_at", -1, np.int64),
        chunk_id=ints("chunk_id", -1, np.int32),
        num_chunks_from_msg=ints("num_chunks_from_msg", -1, np.int32),
        marker=np.asarray(
            column(events, "marker").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool
        ),
    )


def emit_producer_rows(out: Any, state: PartitionState, result: ApplyResult, events: pa.Table) -> None:
    """Append the ``producer`` and ``receipt`` rows of one applied batch to ``out`` (``OutputRows``).

    A receipt carries its SEND's ``event_id``, looked up by row id in ``events`` (the batch the
    engine applied), so that the ingest appends it without joining the input again.
    """
    gone = sorted(result.deleted_producers - state.producers.by_name.keys())
    if gone:  # a DELETE_TOPIC deleted them, and they did not send again
        out.add(PRODUCER, DELETE, len(gone), producer_name=gone)
    rows = state.producers.rows(result.sends.changed)
    if rows:
        out.add(
            PRODUCER,
            UPSERT,
            len(rows),
            producer_name=[name for name, _ in rows],
            highest_sequence_pushed=[p.pushed for _, p in rows],
            highest_sequence_persisted=[p.persisted for _, p in rows],
            msg_drop_count=[p.msg_drop_count for _, p in rows],
            last_event_time=[p.last_event_time for _, p in rows],
        )
    receipts = [r for r in result.sends.receipts if r.row >= 0]
    if receipts:
        out.add(
            RECEIPT,
            UPSERT,
            len(receipts),
            row=[r.row for r in receipts],
            seq=[r.seq for r in receipts],
            event_time=[r.event_time for r in receipts],
            producer_name=[r.producer_name for r in receipts],
            sequence_id=[r.sequence_id for r in receipts],
            highest_sequence_id=[r.highest_sequence_id for r in receipts],
            dedup_status=[r.status for r in receipts],
            ledger_id=[None if r.position is None else r.position[0] for r in receipts],
            entry_id=[None if r.position is None else r.position[1] for r in receipts],
            error=[r.error for r in receipts],
            dropped=[r.dropped for r in receipts],
            event_id=_event_ids(events, [r.row for r in receipts]),
        )
    late = [r for r in result.sends.receipts if r.row < 0]
    if late:
        out.add(
            LATE_RECEIPT,
            UPSERT,
            len(late),
            seq=[r.seq for r in late],
            ledger_id=[None if r.position is None else r.position[0] for r in late],
            entry_id=[None if r.position is None else r.position[1] for r in late],
            error=[r.error for r in late],
        )


def _event_ids(events: pa.Table, rows: list[int]) -> list[str]:
    """The ``event_id`` of each row id (``_row``) of ``events``."""
    ids = np.asarray(events.column("_row").combine_chunks().to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    at = order[np.searchsorted(ids[order], np.asarray(rows, dtype=np.int64))]
    return events.column("event_id").combine_chunks().take(pa.array(at)).to_pylist()
