"""``ackstate bench --engine``: the engine alone, no Spark, on one core.

Apply throughput of an ack-heavy stream and of the generated mix (``jobs.bench.generate``), and
the exact state size of a cursor with 10,000,000 ack holes.
"""

from __future__ import annotations

import time

import numpy as np

from engine import Cursor, EngineSettings, EventBatch, Ledgers, PartitionState
from engine.events import ACK, ACK_INDIVIDUAL, PUBLISH, SUBSCRIBE
from jobs.bench.figures import Figure, median_of

ENGINE_TARGET_EVENTS_PER_S = 1_000_000
MIX_TARGET_EVENTS_PER_S = 500_000
HOLE_TARGET_BYTES = 4.0


# ---- engine ---------------------------------------------------------------------------
def ack_heavy_batch(entries: int, subscriptions: int, window: int, seed: int) -> EventBatch:
    """One partition: ``entries`` publishes, then every subscription acks every entry once, in an
    order shuffled within windows of ``window`` entries (out-of-order acks: transient holes).
    Events: subscribes + publishes + entries * subscriptions individual acks."""
    rng = np.random.default_rng(seed)
    n_acks = entries * subscriptions
    n = subscriptions + entries + n_acks
    types = np.empty(n, dtype=np.int8)
    sub_code = np.full(n, -1, dtype=np.int32)
    types[:subscriptions] = SUBSCRIBE
    sub_code[:subscriptions] = np.arange(subscriptions)
    types[subscriptions : subscriptions + entries] = PUBLISH
    types[subscriptions + entries :] = ACK
    ack_entries = np.tile(np.arange(entries), subscriptions)
    for start in range(0, n_acks, window):
        rng.shuffle(ack_entries[start : start + window])
    sub_code[subscriptions + entries :] = np.repeat(np.arange(subscriptions), entries)
    # interleave the subscriptions' acks as they would arrive
    order = rng.permutation(n_acks)
    order = order[np.argsort(ack_entries[order] // window, kind="stable")]
    ack_entries, ack_subs = ack_entries[order], sub_code[subscriptions + entries :][order]
    sub_code[subscriptions + entries :] = ack_subs
    ledger_id = np.full(n, -1, dtype=np.int64)
    entry_id = np.full(n, -1, dtype=np.int64)
    ledger_id[subscriptions : subscriptions + entries] = 10 + np.arange(entries) // 50_000
    entry_id[subscriptions : subscriptions + entries] = np.arange(entries) % 50_000
    counts = np.zeros(n, dtype=np.int64)
    counts[subscriptions + entries :] = 1
    return EventBatch(
        seq=np.arange(1, n + 1, dtype=np.int64),
        event_time=np.arange(n, dtype=np.int64),
        type=types,
        sub_code=sub_code,
        sub_names=[f"sub-{i}" for i in range(subscriptions)],
        ack_type=np.where(types == ACK, ACK_INDIVIDUAL, -1).astype(np.int8),
        ledger_id=ledger_id,
        entry_id=entry_id,
        batch_size=np.ones(n, dtype=np.int32),
        sub_type=np.asarray(["Shared"] * subscriptions + [None] * (n - subscriptions), dtype=object),
        initial_position=np.asarray(["Earliest"] * n, dtype=object),
        msg_offsets=np.concatenate(([0], np.cumsum(counts))),
        msg_ledger=10 + ack_entries // 50_000,
        msg_entry=ack_entries % 50_000,
        msg_batch_size=np.ones(n_acks, dtype=np.int32),
        ackset_offsets=np.zeros(n_acks + 1, dtype=np.int64),
        ackset_words=np.empty(0, dtype=np.int64),
    )


def bench_engine_apply(runs: int, quick: bool) -> Figure:
    entries, subs = (20_000, 5) if quick else (100_000, 10)
    batch = ack_heavy_batch(entries, subs, window=1_000, seed=1)

    def measure() -> float:
        state = PartitionState("persistent://bench/ns/topic", -1)
        started = time.perf_counter()
        state.apply(batch, EngineSettings())
        elapsed = time.perf_counter() - started
        drained = all(c.backlog(state.ledgers) == 0 for c in state.cursors.values())
        assert drained, "bench stream must ack everything"
        return len(batch) / elapsed

    value, values = median_of(runs, measure)
    return Figure(
        f"engine apply, ack-heavy ({len(batch):,} events)",
        value,
        "events/s",
        f">= {ENGINE_TARGET_EVENTS_PER_S:,}",
        values,
    )


def generated_mix(events: int, seed: int) -> list[tuple[str, int, EventBatch]]:
    """``ackstate generate``'s workload, one batch per topic partition (as the apply UDF gets it)."""
    from collections import defaultdict

    from jobs.bench.generate import generate_records

    by_partition: dict[tuple[str, int], list[dict[str, object]]] = defaultdict(list)
    for record in generate_records(events, seed=seed):
        by_partition[(str(record["topic"]), int(record.get("partition", -1)))].append(record)  # type: ignore[call-overload]
    return [(t, p, EventBatch.from_records(rows)) for (t, p), rows in sorted(by_partition.items())]


def bench_engine_mix(runs: int, quick: bool) -> Figure:
    """The engine on the generated mix (about half DISPATCH, a third ACK, the rest PUBLISH and
    consumer events), every topic partition applied from an empty state, as one micro-batch."""
    batches = generated_mix(50_000 if quick else 400_000, seed=3)
    events = sum(len(batch) for _, _, batch in batches)
    settings = EngineSettings()

    def measure() -> float:
        states = [(PartitionState(t, p), batch) for t, p, batch in batches]
        started = time.perf_counter()
        for state, batch in states:
            state.apply(batch, settings)
        return events / (time.perf_counter() - started)

    value, values = median_of(runs, measure)
    return Figure(
        f"engine apply, generated mix ({events:,} events)",
        value,
        "events/s",
        f">= {MIX_TARGET_EVENTS_PER_S:,}",
        values,
    )


def holes_cursor(holes: int, seed: int) -> tuple[Cursor, Ledgers]:
    """A cursor whose acked entries are separated by 1..3 unacked ones: ``holes`` ack holes."""
    rng = np.random.default_rng(seed)
    acked = np.cumsum(rng.integers(2, 5, size=holes)).astype(np.int64)
    ledgers = Ledgers()
    ledgers.publish((10, int(acked[-1]) + 1))
    cursor = Cursor("Shared", (10, -1))
    cursor.acked.add_entries(10, acked)
    return cursor, ledgers


def bench_holes(runs: int, quick: bool) -> list[Figure]:
    holes = 1_000_000 if quick else 10_000_000
    cursor, _ = holes_cursor(holes, seed=2)
    data = cursor.encode()
    assert Cursor.decode(data) == cursor

    def measure() -> float:
        started = time.perf_counter()
        Cursor.decode(cursor.encode())
        return (time.perf_counter() - started) * 1000

    value, values = median_of(runs, measure)
    return [
        Figure(
            f"state size, {holes:,} ack holes", len(data) / holes, "bytes/hole", f"< {HOLE_TARGET_BYTES}", []
        ),
        Figure(f"encode + decode, {holes:,} ack holes", value, "ms", "(of < 2 s)", values),
    ]
