"""``ackstate stats`` and ``ackstate internal-stats``: the warehouse as ``pulsar-admin`` shows it.

Two layers, so that the JSON shape can be tested in milliseconds and the Spark part stays thin:

* pure functions (no Spark): ``TopicFilter``, ``build_stats`` and
  ``build_internal_stats`` turn plain rows (a ``pyarrow.Table``, dicts or Spark ``Row``s) into
  the dict that is printed;
* command functions (``stats_command``, ``internal_stats_command``): read the ``cursors`` and
  ``topic_partitions`` tables (and ``producers`` for ``publishers[]``) with Spark, optionally
  time-travelled (``--as-of``), select only the columns the output needs, convert once with
  Arrow, and print one JSON object.

Output is one JSON object keyed by topic name as Pulsar names it (CONTRACT.md section 3):
``persistent://t/ns/x`` for a non-partitioned topic (partition -1), ``persistent://t/ns/x-partition-N``
for partition N. Only fields ackstate knows exactly are printed; fields Pulsar computes from
broker memory (rates, ``entriesAddedCounter``, sizes) are left out rather than guessed.

Exit status: 0 with the JSON on stdout; 1 when ``--topic``/``--subscription`` name something the
warehouse does not hold (one line on stderr); 2 when the warehouse has no ackstate tables or
``--as-of`` names a version or time the tables do not have (``AckstateError``, printed by the CLI).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import CorruptState, Cursor, Ledgers, position_text
from engine.topic import complete_name, is_non_persistent, partition_name, split_partition
from jobs.platform.errors import (
    AsOfError,
    CorruptCursorStateError,
    NotFoundError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
    WarehouseNotInitializedError,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("ackstate.stats")

Rows = Any
"""What the builders accept: a ``pyarrow.Table``, or an iterable of mappings / Spark ``Row``s."""

STATS_CURSOR_COLUMNS: tuple[str, ...] = (
    "topic",
    "partition",
    "subscription",
    "sub_type",
    "msg_backlog",
    "non_contiguous_deleted_ranges",
)
"""What ``stats`` reads from ``cursors``: never ``state``, so 100,000 subscriptions stay cheap."""

PRODUCER_COLUMNS: tuple[str, ...] = ("topic", "partition", "producer_name", "msg_drop_count")
"""What ``stats`` reads from ``producers`` for ``publishers[]``."""

INTERNAL_CURSOR_COLUMNS: tuple[str, ...] = ("topic", "partition", "subscription", "state")
PARTITION_COLUMNS: tuple[str, ...] = ("topic", "partition")
# connected consumers, for unackedMessages, consumers[] and activeConsumerName
STATS_CONSUMER_COLUMNS: tuple[str, ...] = (
    "topic",
    "partition",
    "subscription",
    "consumer_id",
    "consumer_name",
    "priority_level",
    "unacked_messages",
    "blocked",
    "is_active",
    "subscribed_at",
)
INTERNAL_PARTITION_COLUMNS: tuple[str, ...] = ("topic", "partition", "ledgers")

# Pulsar tracks unacked messages per consumer only where several consumers share the entries.
_UNACKED_TRACKING_TYPES = frozenset({"Shared", "Key_Shared"})


# ---- topic names ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TopicFilter:
    """What ``--topic`` selects: a topic with all its partitions, or one partition.

    ``name`` matches the ``topic`` column (a non-partitioned topic, or every partition of a
    partitioned one); a name ending in ``-partition-N`` also matches partition N of its base.
    """

    name: str
    base: str | None = None
    partition: int | None = None

    @classmethod
    def parse(cls, text: str) -> TopicFilter:
        name = complete_name(text)
        base, partition = split_partition(name)
        if partition is None:
            return cls(name)
        return cls(name, base, partition)

    def matches(self, topic: str, partition: int) -> bool:
        return topic == self.name or (topic == self.base and partition == self.partition)

    def spark_condition(self) -> Column:
        """The same test as ``matches``, as a predicate Delta can use to skip files."""
        from pyspark.sql import functions as F

        condition = F.col("topic") == self.name
        if self.base is not None:
            condition = condition | ((F.col("topic") == self.base) & (F.col("partition") == self.partition))
        return condition


def _topic_filter(topic: str | TopicFilter | None) -> TopicFilter | None:
    if topic is None or isinstance(topic, TopicFilter):
        return topic
    return TopicFilter.parse(topic)


# ---- pure builders --------------------------------------------------------------------------
def build_stats(
    cursor_rows: Rows,
    partition_rows: Rows | None = None,
    *,
    topic: str | TopicFilter | None = None,
    subscription: str | None = None,
    consumer_rows: Rows | None = None,
    producer_rows: Rows | None = None,
) -> dict[str, Any]:
    """``pulsar-admin topics stats`` for every selected topic partition, keyed by topic name.

    ``cursor_rows`` needs the ``STATS_CURSOR_COLUMNS``; ``partition_rows`` (``topic``,
    ``partition``) adds topics that have entries but no subscription, as Pulsar lists them with
    ``"subscriptions": {}``. With ``subscription``, only topics holding it are listed.
    ``consumer_rows`` (``STATS_CONSUMER_COLUMNS``, connected consumers) fill the consumer fields;
    without them (a warehouse older than the consumers table) those fields are left out.
    ``producer_rows`` (``PRODUCER_COLUMNS``) fill ``publishers`` of the topics listed.
    """
    consumers = _consumers_by_subscription(consumer_rows) if consumer_rows is not None else None
    selected = _topic_filter(topic)
    result: dict[str, Any] = {}
    names: dict[tuple[str, int], str] = {}

    def entry(t: str, p: int) -> dict[str, Any]:
        key = (t, p)
        name = names.get(key)
        if name is None:
            name = names[key] = partition_name(t, p)
        found = result.get(name)
        if found is None:
            found = result[name] = {"subscriptions": {}}
        return found

    if partition_rows is not None and subscription is None:
        cols = _columns(partition_rows, PARTITION_COLUMNS)
        for t, p in zip(cols["topic"], cols["partition"], strict=True):
            if selected is None or selected.matches(t, p):
                entry(t, p)

    cols = _columns(cursor_rows, STATS_CURSOR_COLUMNS)
    for t, p, sub, sub_type, backlog, ranges in zip(*(cols[c] for c in STATS_CURSOR_COLUMNS), strict=True):
        if (selected is not None and not selected.matches(t, p)) or (
            subscription is not None and sub != subscription
        ):
            continue
        members = None if consumers is None else consumers.get((t, p, sub), [])
        if is_non_persistent(t) and members is not None and not members:
            # a non-persistent subscription is removed with its last consumer
            # (NonPersistentTopic.unsubscribe after NonPersistentSubscription.removeConsumer)
            continue
        stats = subscription_stats(sub_type, backlog, ranges, members)
        if is_non_persistent(t):
            # NonPersistentSubscription.getStats never sets activeConsumerName
            stats.pop("activeConsumerName", None)
        entry(t, p)["subscriptions"][sub] = stats
    if producer_rows is not None:
        _add_publishers(result, producer_rows, selected, subscription is None, entry)
    return result


def _add_publishers(
    result: dict[str, Any], rows: Rows, selected: TopicFilter | None, add_topics: bool, entry: Any
) -> None:
    """``publishers[]`` of each listed topic partition, by producer name.

    ackstate knows a producer from its SEND events (no producer open or close is in the event
    contract), so a topic lists the producers that ever sent to it, and a topic none sent to
    has no ``publishers`` key rather than a possibly wrong empty list.
    """
    cols = _columns(rows, PRODUCER_COLUMNS)
    found: dict[str, list[dict[str, Any]]] = {}
    for t, p, name, drops in zip(*(cols[c] for c in PRODUCER_COLUMNS), strict=True):
        if selected is not None and not selected.matches(t, p):
            continue
        key = partition_name(t, p)
        if key not in result and not add_topics:
            continue
        entry(t, p)
        found.setdefault(key, []).append(publisher_stats(t, name, drops))
    for key, publishers in found.items():
        result[key]["publishers"] = sorted(publishers, key=lambda s: s["producerName"])


def publisher_stats(topic: str, producer_name: str, msg_drop_count: int | None) -> dict[str, Any]:
    """One ``publishers[]`` item (PublisherStatsImpl). On a non-persistent topic Pulsar reports
    ``msgDropRate`` (NonPersistentPublisherStatsImpl, a rate over the stats interval); ackstate
    knows the exact count of dropped messages and prints that as ``msgDropCount``."""
    stats: dict[str, Any] = {"producerName": producer_name}
    if is_non_persistent(topic):
        stats["msgDropCount"] = msg_drop_count or 0
    return stats


def _consumers_by_subscription(rows: Rows) -> dict[tuple[str, int, str], list[dict[str, Any]]]:
    cols = _columns(rows, STATS_CONSUMER_COLUMNS)
    grouped: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for values in zip(*(cols[c] for c in STATS_CONSUMER_COLUMNS), strict=True):
        row = dict(zip(STATS_CONSUMER_COLUMNS, values, strict=True))
        grouped.setdefault((row["topic"], row["partition"], row["subscription"]), []).append(row)
    for members in grouped.values():  # subscription order, as the dispatcher lists them
        members.sort(key=lambda r: (r["subscribed_at"] or 0, r["consumer_id"]))
    return grouped


def subscription_stats(
    sub_type: str,
    msg_backlog: int | None,
    ranges: int | None,
    consumers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One ``subscriptions.<name>`` object of ``topics stats`` (SubscriptionStatsImpl)."""
    stats: dict[str, Any] = {
        "msgBacklog": msg_backlog,
        "type": sub_type,
        # SubscriptionStats.nonContiguousDeletedMessagesRanges: the number of ack holes' ranges
        "nonContiguousDeletedMessagesRanges": ranges,
    }
    stats.update(consumer_fields(sub_type, consumers))
    return stats


def consumer_fields(sub_type: str, consumers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The consumer-dependent fields of a subscription's stats: the one place they are filled.

    Pulsar counts ``unackedMessages`` only for Shared and Key_Shared (Consumer.addAndGetUnAckedMsgs
    is skipped otherwise), so Exclusive and Failover always show 0; the subscription's number is
    the sum over its consumers. ``activeConsumerName`` exists only for the single-active
    dispatchers (Exclusive, Failover) and only while one is active. Without consumer rows (a
    warehouse written before the consumers table existed) Shared/Key_Shared leave the fields out
    rather than print them wrong.
    """
    tracking = sub_type in _UNACKED_TRACKING_TYPES
    if consumers is None:
        return {} if tracking else {"unackedMessages": 0}
    listed = [
        {
            "consumerName": c["consumer_name"],
            "unackedMessages": int(c["unacked_messages"] or 0) if tracking else 0,
            "blockedConsumerOnUnackedMsgs": bool(c["blocked"]) if tracking else False,
            "priorityLevel": int(c["priority_level"] or 0),
        }
        for c in consumers
    ]
    fields: dict[str, Any] = {
        "unackedMessages": sum(c["unackedMessages"] for c in listed),
        "consumers": listed,
    }
    if not tracking:
        active = [c["consumer_name"] for c in consumers if c["is_active"]]
        if active:
            fields["activeConsumerName"] = active[0]
    return fields


def build_internal_stats(
    partition_rows: Rows,
    cursor_rows: Rows,
    *,
    topic: str | TopicFilter | None = None,
    subscription: str | None = None,
) -> dict[str, Any]:
    """``pulsar-admin topics stats-internal`` for every selected topic partition.

    ``partition_rows`` needs ``topic``, ``partition``, ``ledgers`` (``Ledgers``-encoded);
    ``cursor_rows`` needs ``topic``, ``partition``, ``subscription``, ``state``
    (``Cursor``-encoded). Only the states of the cursors that are printed are decoded.
    """
    selected = _topic_filter(topic)

    def wanted(t: str, p: int) -> bool:
        return selected is None or selected.matches(t, p)

    ledgers: dict[tuple[str, int], Ledgers] = {}
    cols = _columns(partition_rows, INTERNAL_PARTITION_COLUMNS)
    for t, p, blob in zip(cols["topic"], cols["partition"], cols["ledgers"], strict=True):
        if wanted(t, p):
            ledgers[(t, p)] = _decode(Ledgers.decode, blob, f"ledgers of {partition_name(t, p)}")

    states: dict[tuple[str, int], dict[str, bytes]] = {}
    cols = _columns(cursor_rows, INTERNAL_CURSOR_COLUMNS)
    for t, p, sub, state in zip(*(cols[c] for c in INTERNAL_CURSOR_COLUMNS), strict=True):
        if wanted(t, p) and (subscription is None or sub == subscription):
            states.setdefault((t, p), {})[sub] = state

    keys = set(states) if subscription is not None else set(states) | set(ledgers)
    result: dict[str, Any] = {}
    for t, p in keys:
        name = partition_name(t, p)
        cursors = {
            sub: _decode(Cursor.decode, state, f"cursor state of {name} subscription {sub}")
            for sub, state in states.get((t, p), {}).items()
        }
        result[name] = partition_internal_stats(ledgers.get((t, p)) or Ledgers(), cursors)
    return result


def partition_internal_stats(ledgers: Ledgers, cursors: Mapping[str, Cursor]) -> dict[str, Any]:
    """One topic partition of ``stats-internal`` (ManagedLedgerInternalStats), exact fields only.

    ``numberOfEntries`` counts the entries of the ledgers known from PUBLISH events, less the
    ledgers ``ackstate compact --trim-ledgers-before`` deleted: Pulsar's value as long as every
    ledger its retention deleted was trimmed here too.
    """
    return {
        "numberOfEntries": ledgers.total_entries,
        "lastConfirmedEntry": position_text(ledgers.last_position),  # "-1:-1" when nothing was published
        "ledgers": [{"ledgerId": ledger_id, "entries": last + 1} for ledger_id, last in ledgers],
        "cursors": {sub: cursor_internal_stats(cursor, ledgers) for sub, cursor in cursors.items()},
    }


def cursor_internal_stats(cursor: Cursor, ledgers: Ledgers) -> dict[str, Any]:
    """One ``cursors.<name>`` object of ``stats-internal`` (CursorStats).

    ``readPosition`` is where the cursor reads after a rewind (ManagedCursorImpl.rewind:
    getNextValidPosition(markDeletePosition)), i.e. after a reconnect or redeliver-all; a live
    broker's dispatcher may have read further ahead, which the events do not say.
    """
    return {
        "markDeletePosition": position_text(cursor.mark_delete),
        "readPosition": position_text(ledgers.next_valid(cursor.mark_delete)),
        "individuallyDeletedMessages": cursor.individually_deleted_messages,
        "totalNonContiguousDeletedMessagesRange": cursor.non_contiguous_deleted_ranges,
    }


def require_found(
    result: Mapping[str, Any], topic: str | TopicFilter | None, subscription: str | None
) -> None:
    """Raise ``NotFoundError`` when a filter was given and selected nothing.

    An unfiltered empty result is a valid answer (an empty warehouse prints ``{}``); a filter
    that matches nothing is almost always a typo, so it fails instead of printing ``{}``.
    """
    if result:
        return
    selected = _topic_filter(topic)
    if subscription is not None:
        where = f" on topic {selected.name}" if selected is not None else ""
        raise SubscriptionNotFoundError(f"subscription {subscription} not found{where}")
    if selected is not None:
        raise TopicNotFoundError(f"topic {selected.name} not found")


def _columns(rows: Rows, names: Sequence[str]) -> dict[str, list[Any]]:
    """Rows as one Python list per column: Arrow converts a column in one call, which is what
    keeps 100,000 subscriptions fast; dicts and ``Row``s are for tests and small callers."""
    if rows is None:
        return {name: [] for name in names}
    if hasattr(rows, "column_names") and hasattr(rows, "column"):  # pyarrow.Table / RecordBatch
        return {name: _pylist(rows.column(name)) for name in names}
    out: dict[str, list[Any]] = {name: [] for name in names}
    for row in rows:
        mapping = row.asDict() if hasattr(row, "asDict") else row
        for name in names:
            out[name].append(mapping[name])
    return out


def _pylist(column: Any) -> list[Any]:
    """An Arrow column as Python objects; through NumPy, ten times faster than ``to_pylist``,
    except that NumPy would turn an integer column with nulls into floats."""
    if column.null_count:
        return column.to_pylist()
    return column.to_numpy(zero_copy_only=False).tolist()


def _decode(decoder: Any, blob: bytes | None, what: str) -> Any:
    if blob is None and decoder is Cursor.decode:
        raise CorruptCursorStateError(f"{what} is null; re-run `ackstate ingest` to rewrite it")
    try:
        return decoder(bytes(blob) if blob is not None else None)
    except CorruptState as exc:
        raise CorruptCursorStateError(
            f"{what} cannot be decoded ({exc}): written by a newer ackstate, or damaged"
        ) from exc


# ---- Spark side -----------------------------------------------------------------------------
def stats_command(args: argparse.Namespace) -> int:
    """``ackstate stats``: JSON shaped like ``pulsar-admin topics stats``."""
    return _run(args, read_stats)


def internal_stats_command(args: argparse.Namespace) -> int:
    """``ackstate internal-stats``: JSON shaped like ``pulsar-admin topics stats-internal``."""
    return _run(args, read_internal_stats)


def _run(args: argparse.Namespace, read: Any) -> int:
    from jobs.platform.session import get_spark

    selected = _topic_filter(getattr(args, "topic", None))
    subscription = getattr(args, "subscription", None)
    as_of = getattr(args, "as_of", None)
    spark = get_spark(args.config)
    started = time.perf_counter()
    result = read(spark, args.warehouse, selected, subscription, as_of)
    try:
        require_found(result, selected, subscription)
    except NotFoundError as exc:
        suffix = f" (as of {as_of})" if as_of is not None else ""
        print(f"ackstate: error: {exc}{suffix}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=2, sort_keys=True)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    log.debug("%d topic(s) in %.3f s", len(result), time.perf_counter() - started)
    return 0


def read_stats(
    spark: SparkSession,
    warehouse: str,
    selected: TopicFilter | None,
    subscription: str | None,
    as_of: str | None,
) -> dict[str, Any]:
    """Read for ``stats``: never the ``state`` column, and both tables in one Spark job.

    Each Spark query costs a fixed overhead (Delta snapshot check, planning, a job), which is
    as large as converting 100,000 cursor rows; so the ``topic_partitions`` rows (topics that
    have no subscription) ride in the same query as a union, with ``subscription`` null.
    """
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    _require_tables(spark, warehouse, ("cursors", "topic_partitions"))
    part = F.lit("cursor").alias("_part")
    df = _frame(spark, warehouse, "cursors", selected, subscription, as_of).select(
        *STATS_CURSOR_COLUMNS, part
    )
    if subscription is None:
        partitions = _frame(spark, warehouse, "topic_partitions", selected, None, as_of)
        df = df.unionByName(
            partitions.select(*PARTITION_COLUMNS, F.lit("partition").alias("_part")), allowMissingColumns=True
        )
    with_consumers = not str(as_of or "").isdigit() and _has_table(spark, warehouse, "consumers")
    if with_consumers:
        members = _frame(spark, warehouse, "consumers", selected, subscription, as_of).where("connected")
        df = df.unionByName(
            members.select(*STATS_CONSUMER_COLUMNS, F.lit("consumer").alias("_part")),
            allowMissingColumns=True,
        )
    # absent in older warehouses; a version number is per table and the producers table is not
    # written with every batch, so publishers are shown for the latest state or a timestamp only
    with_producers = not str(as_of or "").isdigit() and _has_table(spark, warehouse, "producers")
    if with_producers:
        producers = _frame(spark, warehouse, "producers", selected, None, as_of)
        df = df.unionByName(
            producers.select(*PRODUCER_COLUMNS, F.lit("producer").alias("_part")), allowMissingColumns=True
        )
    table = _to_arrow(df, ("cursors", "topic_partitions", "consumers", "producers"), as_of)
    cursors = table.filter(pc.equal(table["_part"], "cursor"))
    consumers = table.filter(pc.equal(table["_part"], "consumer")) if with_consumers else None
    producer_rows = table.filter(pc.equal(table["_part"], "producer")) if with_producers else None
    if subscription is not None:
        return build_stats(
            cursors,
            topic=selected,
            subscription=subscription,
            consumer_rows=consumers,
            producer_rows=producer_rows,
        )
    partitions_rows = table.filter(pc.equal(table["_part"], "partition")).select(list(PARTITION_COLUMNS))
    return build_stats(
        cursors, partitions_rows, topic=selected, consumer_rows=consumers, producer_rows=producer_rows
    )


def read_internal_stats(
    spark: SparkSession,
    warehouse: str,
    selected: TopicFilter | None,
    subscription: str | None,
    as_of: str | None,
) -> dict[str, Any]:
    _require_tables(spark, warehouse, ("cursors", "topic_partitions"))
    cursors = _frame(spark, warehouse, "cursors", selected, subscription, as_of)
    partitions = _frame(spark, warehouse, "topic_partitions", selected, None, as_of)
    return build_internal_stats(
        _to_arrow(partitions.select(*INTERNAL_PARTITION_COLUMNS), ("topic_partitions",), as_of),
        _to_arrow(cursors.select(*INTERNAL_CURSOR_COLUMNS), ("cursors",), as_of),
        topic=selected,
        subscription=subscription,
    )


def _has_table(spark: SparkSession, warehouse: str, name: str) -> bool:
    from delta.tables import DeltaTable

    from jobs.platform.tables import table_path

    return bool(DeltaTable.isDeltaTable(spark, table_path(warehouse, name)))


def _require_tables(spark: SparkSession, warehouse: str, names: Iterable[str]) -> None:
    from delta.tables import DeltaTable

    from jobs.platform.tables import table_path

    missing = [name for name in names if not DeltaTable.isDeltaTable(spark, table_path(warehouse, name))]
    if missing:
        raise WarehouseNotInitializedError(
            f"warehouse {warehouse} has no {' or '.join(missing)} table: "
            "run `ackstate init` and `ackstate ingest` with this --warehouse first"
        )


def _frame(
    spark: SparkSession,
    warehouse: str,
    name: str,
    selected: TopicFilter | None,
    subscription: str | None,
    as_of: str | None,
) -> DataFrame:
    """One table, time-travelled and filtered where Delta can skip files (clustered by topic).

    ``as_of`` is passed to each table as it is. A timestamp is one moment for both tables; a
    version number is per table, so it names the same moment only while both tables were
    committed together (each ingest batch writes both).
    """
    with as_of_errors((name,), as_of):
        df = read_as_of(spark, warehouse, name, as_of)
    if selected is not None:
        df = df.where(selected.spark_condition())
    if subscription is not None:
        df = df.where(df["subscription"] == subscription)
    return df


def _to_arrow(df: DataFrame, names: Sequence[str], as_of: str | None) -> pa.Table:
    """One Arrow conversion of the selected columns: no per-row ``Row`` objects on the driver."""
    with as_of_errors(names, as_of):
        return df.toArrow()


@contextmanager
def as_of_errors(names: Sequence[str], as_of: str | None) -> Iterator[None]:
    """Turn Delta's time-travel failures (no such version, a time before the first commit, files
    removed by VACUUM) into one line; without ``--as-of`` a Spark error is a real failure."""
    from pyspark.errors import PySparkException

    try:
        yield
    except PySparkException as exc:
        if as_of is None:
            raise
        message = str(exc).strip()
        first_line = message.splitlines()[0] if message else type(exc).__name__
        tables = " and ".join(names)
        raise AsOfError(f"cannot read table {tables} as of {as_of!r}: {first_line}") from exc


def read_as_of(spark: SparkSession, warehouse: str, name: str, as_of: str | None) -> DataFrame:
    """``read_table``, except that a time after a table's last commit reads its latest version.

    Delta refuses such a time (DELTA_TIMESTAMP_GREATER_THAN_COMMIT), but "the state at 10:00"
    of a table last written at 09:59 is its latest version, and the two tables are not
    committed at the same instant, so asking for the time of a ``cursors`` commit would
    otherwise fail on ``topic_partitions``.
    """
    from pyspark.errors import PySparkException

    from jobs.platform.tables import read_table

    try:
        return read_table(spark, warehouse, name, as_of=as_of)
    except PySparkException as exc:
        if as_of is None or _condition(exc) != "DELTA_TIMESTAMP_GREATER_THAN_COMMIT":
            raise
        log.debug("%s has no commit after %s: reading its latest version", name, as_of)
        return read_table(spark, warehouse, name)


def _condition(exc: Exception) -> str | None:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return get() if callable(get) else None


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit jobs/read/stats.py [internal-stats|stats] [options]`` (default: stats)."""
    from jobs.cli import main as cli_main

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("stats", "internal-stats"):
        args.insert(0, "stats")
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
