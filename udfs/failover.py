"""The active-consumer UDF: one topic partition's consumers -> who is active in each subscription.

A thin adapter (DESIGN.md: ``udfs/`` only converts) from ``consumers`` table rows
(``schemas.udf.FAILOVER_INPUT_COLUMNS``), grouped by (``topic``, ``partition``), to
``engine.failover.select_active_many`` and back to ``schemas.udf.FAILOVER_OUTPUT``: one output
row per input row, so the result can be MERGEd into ``consumers.is_active`` as it is.

Subscription order. Pulsar picks among consumers in the order they were added to the
dispatcher (``consumers.add`` on every subscribe; a reconnect is a new add at the end), which
decides between consumers that share a priority level and a name. The ``consumers`` table keeps
that order as ``subscribed_at`` (event time of the SUBSCRIBE); equal times, which a stream can
carry, are broken by ``consumer_id`` (a client numbers its consumers in creation order), and a
null ``subscribed_at`` (a consumer attached implicitly, before the stream began) sorts first.

Which rows take part: connected consumers of Exclusive and Failover subscriptions. The
dispatcher's partition index is ``engine.failover.dispatcher_partition_index`` for Failover and
0 for Exclusive (``PersistentSubscription`` creates the Exclusive dispatcher with index 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from engine.failover import (
    FailoverSettings,
    dispatcher_partition_index,
    pulsar_topic_name,
    select_active_many,
)
from schemas.udf import FAILOVER_INPUT_COLUMNS, FAILOVER_OUTPUT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SINGLE_ACTIVE_TYPES = ("Exclusive", "Failover")

OUTPUT_ARROW = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("subscription", pa.string(), nullable=False),
        pa.field("consumer_id", pa.int64(), nullable=False),
        pa.field("is_active", pa.bool_()),
    ]
)


def _numbers(column: pa.ChunkedArray, fill: int) -> np.ndarray:
    return np.asarray(column.fill_null(fill).to_numpy(), dtype=np.int64)


def failover_partition(key: tuple[Any, ...], consumers: pa.Table, settings: FailoverSettings) -> pa.Table:
    """Active consumer of every Exclusive/Failover subscription of one topic partition."""
    topic, partition = key[0].as_py(), int(key[1].as_py())
    n = consumers.num_rows
    # a topic partition has few consumers, so its string columns go through Python lists: a
    # handful of Arrow compute calls would cost more than the whole selection
    sub_type = consumers.column("sub_type").to_pylist()
    connected = consumers.column("connected").to_pylist()
    single = np.fromiter((t in SINGLE_ACTIVE_TYPES for t in sub_type), dtype=bool, count=n)
    rows = np.flatnonzero(single & np.fromiter((c is True for c in connected), dtype=bool, count=n))
    is_active = np.zeros(n, dtype=bool)
    if rows.size:
        subscriptions = consumers.column("subscription").to_pylist()
        codes: dict[str, int] = {}
        sub_code = np.fromiter((codes.setdefault(s, len(codes)) for s in subscriptions), np.int64, count=n)
        subscribed_at = _numbers(consumers.column("subscribed_at"), np.iinfo(np.int64).min)
        consumer_id = _numbers(consumers.column("consumer_id"), -1)
        # subscription order within each subscription (see the module docstring)
        rows = rows[np.lexsort((consumer_id[rows], subscribed_at[rows], sub_code[rows]))]
        names = consumers.column("consumer_name").to_pylist()
        failover_index = dispatcher_partition_index(topic, partition)
        row_list = rows.tolist()
        selection = select_active_many(
            group=sub_code[rows],
            priority=_numbers(consumers.column("priority_level"), 0)[rows],
            name=[names[i] if names[i] is not None else "" for i in row_list],  # ServerCnx: "" if unset
            partition_index=[0 if sub_type[i] == "Exclusive" else failover_index for i in row_list],
            topic_name=[pulsar_topic_name(topic, partition)] * rows.size,
            consistent_hashing=settings.active_consumer_failover_consistent_hashing,
        )
        is_active[rows[selection.rows]] = True
    return pa.Table.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array(np.full(n, partition, dtype=np.int32)),
            consumers.column("subscription").combine_chunks(),
            consumers.column("consumer_id").combine_chunks(),
            pa.array(is_active, mask=~single),
        ],
        schema=OUTPUT_ARROW,
    )


def active_consumers(consumers: DataFrame, settings: FailoverSettings) -> DataFrame:
    """``consumers`` rows -> ``FAILOVER_OUTPUT`` rows, one grouped Arrow UDF call per topic
    partition (shaped for ``DataFrame.transform`` with ``functools.partial``)."""

    def select(key: Any, table: Any) -> Any:
        from udfs.failover import failover_partition

        return failover_partition(key, table, settings)

    return (
        consumers.select(*FAILOVER_INPUT_COLUMNS)
        .groupBy("topic", "partition")
        .applyInArrow(select, FAILOVER_OUTPUT)
    )
