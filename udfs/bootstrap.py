"""A topic partition's starting state (``ackstate bootstrap``) as the apply UDF's output rows.

A thin adapter like ``udfs.trim``: ``engine.bootstrap`` builds the state from the admin API's
answers, and this module emits it as ``schemas.udf.APPLY_OUTPUT`` rows of the kinds the ingest
writes (the partition with its ledgers, every cursor with its projections, the ledgers), so
the one batch writer puts it in the tables. Rows are differences against the state a previous
bootstrap of the same partition wrote (none on the first): a range that closed since is deleted.
"""

from __future__ import annotations

import pyarrow as pa

from engine import EngineSettings, Ledgers, PartitionState, TrimResult
from schemas.udf import LEDGER, PARTITION, UPSERT
from udfs.apply import OutputRows, emit_cursor, emit_ledger_deletes


def bootstrap_rows(
    state: PartitionState, encoded_before: dict[str, bytes], ledgers_before: Ledgers | None
) -> pa.Table:
    """The rows that make ``state`` the partition's state in the tables.

    ``encoded_before``: each cursor's encoded state as a previous bootstrap wrote it;
    ``ledgers_before``: that bootstrap's ledgers (None on the first).
    """
    out = OutputRows(state.topic, state.partition)
    out.add(
        PARTITION,
        UPSERT,
        1,
        last_seq=[state.last_seq],
        last_event_time=[state.last_event_time],
        ledgers=[state.ledgers.encode()],
        applied=[0],
        stale=[0],
        producers_state=[state.producers.encode()],
    )
    for name in sorted(state.cursors):
        # no consumer exists yet, so no engine setting shapes these rows: the defaults serve
        emit_cursor(out, state, name, encoded_before, True, EngineSettings())
    now = dict(state.ledgers)
    gone = [(lid, last) for lid, last in (ledgers_before or []) if lid not in now]
    emit_ledger_deletes(out, TrimResult(removed=gone))
    ledgers = list(state.ledgers)
    out.add(
        LEDGER,
        UPSERT,
        len(ledgers),
        ledger_id=[lid for lid, _ in ledgers],
        first_entry_id=[0] * len(ledgers),
        last_entry_id=[last for _, last in ledgers],
        entries=[last + 1 for _, last in ledgers],
    )
    return out.table()
