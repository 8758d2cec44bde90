"""``ackstate bench --subscriptions``, redelivery part: the Shared redelivery set of 1,000,000
pending acks.

Ten Shared consumers hold 1,000,000 dispatched, unacked entries between them (a tenth of them
already redelivered once, so counts vary); then every consumer asks to redeliver all
(``CommandRedeliverUnacknowledgedMessages`` without ids). Measured, median of ``runs``:

* ``engine``: the engine turning those pending acks into the redelivery set (replay positions
  after mark-delete, redelivery count +1, reason, due time, dead-letter flag);
* ``udf rows``: the same plus the apply UDF's Arrow rows for ``redeliveries``, ``pending_acks``
  and ``consumers`` (what one cogroup call returns for the partition);
* ``encode``: ``Subscription.encode`` of the state after the redeliver-all, which the batch
  writes too (``udfs.apply.emit_cursor``), the replays still held as columns;
* ``baseline``: numpy sorting the same 1,000,000 (ledger, entry) pairs, the least any
  implementation must do to produce a sorted set; reported as a ratio, as DESIGN asks.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from engine import Cursor, EngineSettings
from engine.subscription import REDELIVER, Consumer, Subscription


def _setup(pending: int, consumers: int) -> tuple[Cursor, Subscription, Any]:
    settings = EngineSettings(max_unacked_messages_per_consumer=0).for_partition("persistent://b/ns/t", 0)
    cursor = Cursor("Shared", (5, -1))
    sub = Subscription()
    for cid in range(consumers):
        sub.subscribe(
            cursor, Consumer(cid, f"c{cid}", 0, 0, 0, max_redeliver_count=3), "Shared", cid, settings
        )
    rng = np.random.default_rng(7)
    entries = rng.permutation(pending)
    ledgers = 5 + entries // 50_000
    for k, (ledger, entry) in enumerate(zip(ledgers.tolist(), (entries % 50_000).tolist(), strict=True)):
        sub.dispatch(cursor, k % consumers, (ledger, entry), 1, 0, 1_000, settings)
        if k % 10 == 0:
            sub.tracker[(ledger, entry)] = 1
    return cursor, sub, settings


def measure(runs: int = 3, pending: int = 1_000_000, consumers: int = 10) -> dict[str, Any]:
    """Medians (seconds) and rates of the measurements above."""
    from udfs.apply import OutputRows, emit_subscription_changes

    engine_s, udf_s, encode_s, base_s = [], [], [], []
    rows = 0
    for _ in range(runs):
        cursor, sub, settings = _setup(pending, consumers)
        sub.changes.__init__()  # type: ignore[misc]  # only the redelivery counts as the batch
        started = time.perf_counter()
        for cid in list(sub.consumers):
            sub.redeliver(cursor, cid, None, 2_000, REDELIVER, settings)
        engine_s.append(time.perf_counter() - started)
        # counted from the batch's changes: reading ``sub.redeliveries`` would fold the
        # redeliver-alls held as columns into the dictionaries (``engine.subscription.BulkReplay``)
        # before the rows below are measured
        assert len(sub.changes.all_redeliveries()) == pending
        out = OutputRows("persistent://b/ns/t", 0)
        started = time.perf_counter()
        emit_subscription_changes(out, "s", cursor, sub, EngineSettings())
        table = out.table()
        udf_s.append(engine_s[-1] + time.perf_counter() - started)
        rows = table.num_rows
        started = time.perf_counter()
        sub.encode()
        encode_s.append(time.perf_counter() - started)
        positions = np.asarray(list(sub.redeliveries), dtype=np.int64)  # (ledger, entry) rows
        started = time.perf_counter()
        np.lexsort((positions[:, 1], positions[:, 0]))
        base_s.append(time.perf_counter() - started)
    engine, udf, encode, base = (statistics.median(x) for x in (engine_s, udf_s, encode_s, base_s))
    return {
        "pending_acks": pending,
        "consumers": consumers,
        "engine_seconds": engine,
        "engine_pending_acks_per_second": pending / engine,
        "udf_rows_seconds": udf,
        "udf_rows": rows,
        "encode_seconds": encode,
        "baseline_sort_seconds": base,
        "ratio_engine_to_sort": engine / base,
        "runs": runs,
    }
