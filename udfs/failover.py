"""The active-consumer UDF: one topic partition's consumers -> who is active in each subscription.

A thin adapter (DESIGN.md: ``udfs/`` only converts) from ``consumers`` table rows
(``schemas.udf.FAILOVER_INPUT_COLUMNS``), grouped by (``topic``, ``partition``) (or by buckets
of topic partitions, see ``active_consumers``), to
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
    select_active_many,
)
from engine.topic import partition_name
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


def failover_rows(consumers: pa.Table, settings: FailoverSettings) -> pa.Table:
    """Active consumer of every Exclusive/Failover subscription among ``consumers`` rows, which
    may span any number of topic partitions (a subscription is a (topic, partition,
    subscription) triple)."""
    n = consumers.num_rows
    # a group holds few consumers, so its string columns go through Python lists: a handful of
    # Arrow compute calls would cost more than the whole selection
    sub_type = consumers.column("sub_type").to_pylist()
    connected = consumers.column("connected").to_pylist()
    single = np.fromiter((t in SINGLE_ACTIVE_TYPES for t in sub_type), dtype=bool, count=n)
    rows = np.flatnonzero(single & np.fromiter((c is True for c in connected), dtype=bool, count=n))
    is_active = np.zeros(n, dtype=bool)
    if rows.size:
        row_list = rows.tolist()
        topics = consumers.column("topic").to_pylist()
        partitions = consumers.column("partition").to_pylist()
        subscriptions = consumers.column("subscription").to_pylist()
        codes: dict[tuple[str, int, str], int] = {}
        sub_code = np.fromiter(
            (codes.setdefault((topics[i], partitions[i], subscriptions[i]), len(codes)) for i in row_list),
            dtype=np.int64,
            count=rows.size,
        )
        subscribed_at = _numbers(consumers.column("subscribed_at"), np.iinfo(np.int64).min)[rows]
        consumer_id = _numbers(consumers.column("consumer_id"), -1)[rows]
        # subscription order within each subscription (see the module docstring)
        order = np.lexsort((consumer_id, subscribed_at, sub_code))
        rows, sub_code, row_list = rows[order], sub_code[order], rows[order].tolist()
        names = consumers.column("consumer_name").to_pylist()
        dispatcher = {
            (t, p): (partition_name(t, p), dispatcher_partition_index(t, p))
            for t, p in {(topics[i], partitions[i]) for i in row_list}
        }
        selection = select_active_many(
            group=sub_code,
            priority_level=_numbers(consumers.column("priority_level"), 0)[rows],
            name=[names[i] if names[i] is not None else "" for i in row_list],  # ServerCnx: "" if unset
            partition_index=[
                0 if sub_type[i] == "Exclusive" else dispatcher[(topics[i], partitions[i])][1]
                for i in row_list
            ],
            topic_name=[dispatcher[(topics[i], partitions[i])][0] for i in row_list],
            consistent_hashing=settings.active_consumer_failover_consistent_hashing,
        )
        is_active[rows[selection.rows]] = True
    return pa.Table.from_arrays(
        [
            consumers.column("topic").combine_chunks(),
            consumers.column("partition").combine_chunks(),
            consumers.column("subscription").combine_chunks(),
            consumers.column("consumer_id").combine_chunks(),
            pa.array(is_active, mask=~single),
        ],
        schema=OUTPUT_ARROW,
    )


def failover_partition(key: tuple[Any, ...], consumers: pa.Table, settings: FailoverSettings) -> pa.Table:
    """The grouped-UDF body: ``key`` is the group's key (a topic partition, or a bucket of them
    with ``active_consumers(buckets=...)``); the rows say which topic partition they belong to."""
    return failover_rows(consumers, settings)


def active_consumers(
    consumers: DataFrame, settings: FailoverSettings, *, buckets: int | None = None
) -> DataFrame:
    """``consumers`` rows -> ``FAILOVER_OUTPUT`` rows through a grouped Arrow UDF.

    By default one UDF call per topic partition (``groupBy("topic", "partition")``). Spark
    charges a fixed cost per group (an Arrow stream to and from the Python worker), which
    dominates when topic partitions hold a few consumers each; ``buckets`` groups by
    ``pmod(hash(topic, partition), buckets)`` instead, so each call selects for many topic
    partitions at once (``engine.failover.select_active_many`` is built for that)."""
    from pyspark.sql import functions as F

    def select(key: Any, table: Any) -> Any:
        from udfs.failover import failover_partition

        return failover_partition(key, table, settings)

    rows = consumers.select(*FAILOVER_INPUT_COLUMNS)
    if buckets is None:
        grouped = rows.groupBy("topic", "partition")
    else:
        grouped = rows.groupBy(F.pmod(F.hash("topic", "partition"), F.lit(buckets)).alias("_bucket"))
    return grouped.applyInArrow(select, FAILOVER_OUTPUT)
