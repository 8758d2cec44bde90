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
import pyarrow.compute as pc

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


def _col(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _ints(array: pa.Array, fill: int) -> np.ndarray:
    return np.asarray(array.fill_null(fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def failover_partition(key: tuple[Any, ...], consumers: pa.Table, settings: FailoverSettings) -> pa.Table:
    """Active consumer of every Exclusive/Failover subscription of one topic partition."""
    topic, partition = key[0].as_py(), int(key[1].as_py())
    n = consumers.num_rows
    sub_type = _col(consumers, "sub_type")
    single = pc.fill_null(pc.is_in(sub_type, value_set=pa.array(SINGLE_ACTIVE_TYPES)), False)
    eligible = np.asarray(
        pc.and_(single, pc.fill_null(_col(consumers, "connected"), False)).to_numpy(zero_copy_only=False),
        dtype=bool,
    )
    is_active = np.zeros(n, dtype=bool)
    rows = np.flatnonzero(eligible)
    if rows.size:
        subs = _col(consumers, "subscription").dictionary_encode()
        sub_code = _ints(subs.indices, -1)[rows]
        subscribed_at = _ints(_col(consumers, "subscribed_at"), np.iinfo(np.int64).min)[rows]
        consumer_id = _ints(_col(consumers, "consumer_id"), -1)[rows]
        # subscription order within each subscription (see the module docstring)
        rows = rows[np.lexsort((consumer_id, subscribed_at, sub_code))]
        exclusive = np.asarray(
            pc.equal(sub_type, "Exclusive").fill_null(False).to_numpy(zero_copy_only=False), dtype=bool
        )
        part = np.where(exclusive[rows], 0, dispatcher_partition_index(topic, partition))
        names = _col(consumers, "consumer_name").fill_null("").to_pylist()  # ServerCnx: "" if unset
        selection = select_active_many(
            group=_ints(subs.indices, -1)[rows],
            priority=_ints(_col(consumers, "priority_level"), 0)[rows],
            name=[names[i] for i in rows.tolist()],
            partition_index=part,
            topic_name=[pulsar_topic_name(topic, partition)] * rows.size,
            consistent_hashing=settings.active_consumer_failover_consistent_hashing,
        )
        is_active[rows[selection.rows]] = True
    return pa.Table.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array(np.full(n, partition, dtype=np.int32)),
            _col(consumers, "subscription"),
            _col(consumers, "consumer_id"),
            pa.array(is_active, mask=~np.asarray(single.to_numpy(zero_copy_only=False), dtype=bool)),
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
