"""The state a micro-batch committed, kept for the next one: ``WarmState``.

Every batch starts from the state of the topic partitions it touches, ``cursors`` and
``topic_partitions`` rows as the apply UDF reads them (``schemas.udf.STATE_INPUT``). Reading
them from Delta is a fixed cost of each batch: Delta rebuilds the snapshot of the version the
previous batch committed, scans the files and semi-joins them with the touched partitions,
about 1.5 s of a warm 1,000-event batch on two cores. Yet when a batch ends its new state is
known without reading: the rows it started from with its own changes over them, which is
exactly what its MERGEs committed (``jobs.ingest.projections.cursor_write`` and ``upsert``).

So ``BatchWriter`` keeps those rows, materialised, with the versions of the two tables they
equal, and the next batch takes its state from them instead of from Delta when

* both tables are still at those versions: no other writer (``ackstate compact``, a ledger
  trim, a second query, a repair) has committed to them since; and
* every topic partition the batch touches is among the kept ones.

Anything else reads Delta as before. The versions are checked by count: a batch that read
version v of a table and committed to it c times (one MERGE or none) expects v + c after its
writes; a commit by anyone else moves the table further, and the kept rows are dropped.

Exactly once is unchanged: a batch computes the same rows from the same state whichever way
it got them, and the warm rows live in the query's process only. A restarted query, and the
repeat of a batch a crashed run began (which reads the versions that run read), start from
Delta. The rows of partitions that later batches no longer touch stay kept (a partition
quiet for a batch is not read again when it wakes), up to ``MAX_PARTITIONS`` of them; past
that only the last batch's partitions are kept, so that keeping them never costs more than
the reads it saves.

Where the rows are kept follows the batch that kept them. A batch spread over the executors
keeps them there (``localCheckpoint``). A batch that runs in one partition
(``jobs.ingest.batch.SINGLE_PARTITION``) collects its state into the driver anyway, so it keeps
them there as Arrow (``keep_table``): the next such batch takes them with no Spark job, and the
changes that go over them are taken from the apply's rows, which are in the driver too
(``state_changes_table``). Each form is handed
to a batch of the other kind when the batch size changes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.ingest.projections import PROJECTION, STATE_SOURCES, state_input
from jobs.ingest.recovery import STATE_TABLES
from jobs.platform.columns import built_once
from jobs.platform.tables import release
from schemas.udf import CURSOR, DELETE, PARTITION, STATE_INPUT

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

log = logging.getLogger("ackstate.ingest")

MAX_PARTITIONS = 10_000
"""Topic partitions whose state a query keeps between batches (beyond it: the last batch's)."""

PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class _Kept:
    rows: DataFrame | pa.Table
    """``STATE_INPUT`` rows (no ledger trim requested) of ``partitions``: materialised in Spark,
    or held in the driver as Arrow (kept by a batch that ran in one partition, ``keep_table``)."""
    partitions: frozenset[PartitionKey]
    versions: Mapping[str, int]
    """The versions of ``STATE_TABLES`` these rows equal."""


class WarmState:
    """The state rows the last batches committed, and when they may stand in for a read."""

    def __init__(self) -> None:
        self._kept: _Kept | None = None
        self.hits = 0
        """Batches that took their state from here (the tests read it)."""

    def _replace(self, kept: _Kept | None) -> None:
        """Keep ``kept`` (None: nothing) in place of the rows kept so far, and free those if
        they are checkpointed in Spark (``release``): nothing reads them any more."""
        before, self._kept = self._kept, kept
        if before is not None and not _in_driver(before.rows):
            release(before.rows)

    def _current(self, versions: Mapping[str, int]) -> _Kept | None:
        """The kept rows if both state tables are still at the versions they equal."""
        kept = self._kept
        if kept is None or any(kept.versions[t] != versions.get(t) for t in STATE_TABLES):
            return None
        return kept

    def rows_for(
        self, versions: Mapping[str, int], touched: Collection[PartitionKey], keys: DataFrame
    ) -> DataFrame | None:
        """The kept rows of the ``touched`` partitions (``keys``: their topic and partition),
        materialised; None: read Delta. Kept rows live in the executors' block managers; if
        they are gone (an executor lost between batches), they are dropped and Delta is read."""
        return self._take(versions, touched, keys, in_driver=False)

    def table_for(
        self, versions: Mapping[str, int], touched: Collection[PartitionKey], keys: DataFrame
    ) -> pa.Table | None:
        """``rows_for`` as an Arrow table in the driver (for a batch that runs in one partition):
        no Spark job when the last batch kept them there."""
        return self._take(versions, touched, keys, in_driver=True)

    def _take(
        self,
        versions: Mapping[str, int],
        touched: Collection[PartitionKey],
        keys: DataFrame,
        *,
        in_driver: bool,
    ) -> Any:
        """``rows_for`` (a materialised frame) or ``table_for`` (``in_driver``: Arrow), from
        rows kept in either form."""
        from py4j.protocol import Py4JJavaError

        kept = self._current(versions)
        if kept is None or not kept.partitions.issuperset(touched):
            return None
        if _in_driver(kept.rows):
            rows = of_partitions(kept.rows, touched)
            taken = rows if in_driver else keys.sparkSession.createDataFrame(rows, STATE_INPUT)
        else:
            try:
                semi = kept.rows.join(keys, ["topic", "partition"], "left_semi")
                taken = state_table(semi.toArrow()) if in_driver else semi.localCheckpoint(eager=True)
            except Py4JJavaError as exc:
                log.warning("the state kept from the last batch is lost, reading it: %s", _first_line(exc))
                self._replace(None)
                return None
        self.hits += 1
        return taken

    def _moved(self, latest: Mapping[str, int], expected: Mapping[str, int]) -> bool:
        """Whether the state tables are not at the versions a batch expects after its writes
        (another writer committed): then nothing is kept."""
        if all(latest.get(t) == expected.get(t) for t in STATE_TABLES):
            return False
        if self._kept is not None:
            log.debug("state tables at %s, not %s: another writer; next batch reads", latest, expected)
        self._replace(None)
        return True

    def keep_table(
        self,
        base: pa.Table,
        changes: pa.Table,
        touched: Collection[PartitionKey],
        read: Mapping[str, int],
        expected: Mapping[str, int],
        latest: Mapping[str, int],
    ) -> None:
        """``keep`` for a batch that ran in one partition, in the driver: ``base`` (Arrow) is the
        state it started from and ``changes`` its ``state_changes_table``. The rows are
        kept as Arrow, so the next batch takes its state with no Spark job."""
        from py4j.protocol import Py4JJavaError

        if self._moved(latest, expected):
            return
        previous = self._current(read)
        partitions = frozenset(touched)
        rows = base  # cast with the rest by overlay_table (concat_state)
        if previous is not None and (
            previous.partitions.issuperset(partitions)
            or len(previous.partitions | partitions) <= MAX_PARTITIONS
        ):
            before = previous.rows
            if not _in_driver(before):
                try:
                    before = before.toArrow()
                except Py4JJavaError as exc:  # the rows kept before are gone: keep this batch's
                    log.warning("the state kept from the last batch is lost: %s", _first_line(exc))
                    before = None
            if before is not None and previous.partitions.issuperset(partitions):
                rows, partitions = before, previous.partitions  # base was taken from them
            elif before is not None:
                others = of_partitions(before, partitions, keep=False)
                rows, partitions = concat_state([others, rows]), previous.partitions | partitions
        self._replace(_Kept(overlay_table(rows, changes), partitions, dict(expected)))

    def keep(
        self,
        base: DataFrame,
        out: DataFrame,
        lineage: list[Column],
        touched: Collection[PartitionKey],
        touched_keys: DataFrame,
        read: Mapping[str, int],
        expected: Mapping[str, int],
        latest: Mapping[str, int],
        *,
        single_partition: bool = False,
    ) -> None:
        """After a batch's writes: keep the state rows it started from (``base``, those of its
        ``touched`` partitions, ``touched_keys`` as a frame) with its changes in ``out`` over
        them, if the state tables are at the ``expected`` versions (the ``read`` ones plus the
        batch's own commits); else keep nothing. The rows kept of partitions the batch did not
        touch stay if they equalled the versions it read. A batch that ran in one partition
        (``jobs.ingest.batch.SINGLE_PARTITION``) keeps them in one, which the next such batch
        joins with its own without a shuffle."""
        from py4j.protocol import Py4JJavaError

        if self._moved(latest, expected):
            return
        previous = self._current(read)
        if previous is not None and _in_driver(previous.rows):
            spark = base.sparkSession
            previous = _Kept(
                spark.createDataFrame(previous.rows, STATE_INPUT), previous.partitions, previous.versions
            )
        partitions = frozenset(touched)
        rows = base
        if previous is not None and previous.partitions.issuperset(partitions):
            rows, partitions = previous.rows, previous.partitions  # base was taken from them
        elif previous is not None and len(previous.partitions | partitions) <= MAX_PARTITIONS:
            others = previous.rows.join(touched_keys, ["topic", "partition"], "left_anti")
            rows, partitions = others.unionByName(base), previous.partitions | partitions
        try:
            rows = overlay(rows, changed_state(out, lineage), removed_cursors(out))
            if single_partition:
                rows = rows.coalesce(1)
            rows = rows.localCheckpoint(eager=True)
        except Py4JJavaError as exc:  # the rows kept before are gone: keep nothing
            log.warning("the state kept from the last batch is lost: %s", _first_line(exc))
            self._replace(None)
            return
        self._replace(_Kept(rows, partitions, dict(expected)))


def changed_state(out: DataFrame, lineage: list[Column]) -> DataFrame:
    """The ``STATE_INPUT`` rows a batch's MERGEs change: every topic partition row it writes,
    and the cursors it writes whole (``state_changed``; the others keep their state)."""
    partitions = PROJECTION[PARTITION].rows(out, lineage)
    cursors = PROJECTION[CURSOR].rows(out, lineage).filter(_columns().state_changed)
    return state_input(partitions, cursors)


def removed_cursors(out: DataFrame) -> DataFrame:
    """The cursors a batch's MERGE deletes (a subscription an UNSUBSCRIBE deleted), as
    ``STATE_INPUT`` keys: topic, partition, kind and subscription."""
    columns = _columns()
    return out.filter(columns.is_removed_cursor).select(*columns.key)


@dataclass(frozen=True)
class _Columns:
    """The column expressions of this module, built once per JVM (``jobs.platform.columns``)."""

    state_changed: Column
    is_removed_cursor: Column
    key: list[Column]


def _columns() -> _Columns:
    def build() -> _Columns:
        from pyspark.sql import functions as F

        return _Columns(
            state_changed=F.col("state_changed"),
            is_removed_cursor=(F.col("kind") == CURSOR) & (F.col("op") == DELETE),
            key=[F.col(n) for n in _KEY],
        )

    return built_once("warm.columns", build)


def overlay(base: DataFrame, changed: DataFrame, removed: DataFrame) -> DataFrame:
    """``base`` with each row that ``changed`` has (same topic, partition, kind and
    subscription; none for a partition row) replaced by it, ``changed``'s new rows added, and
    the rows ``removed`` names (the same keys) left out."""
    from pyspark.sql import functions as F

    base = base.join(removed, ["topic", "partition", "kind", "subscription"], "left_anti")
    b, c = base.alias("b"), changed.alias("c")
    same = (
        (F.col("b.topic") == F.col("c.topic"))
        & (F.col("b.partition") == F.col("c.partition"))
        & (F.col("b.kind") == F.col("c.kind"))
        & F.col("b.subscription").eqNullSafe(F.col("c.subscription"))
    )
    kept = b.join(c, same, "left_anti").select(*[F.col(f"b.{n}") for n in STATE_INPUT.fieldNames()])
    return kept.unionByName(changed.select(*STATE_INPUT.fieldNames()))


def state_changes_table(out: pa.Table) -> pa.Table:
    """``changed_state`` and ``removed_cursors`` (``REMOVED`` true on the second) of the apply's
    rows collected into the driver (``APPLY_OUTPUT`` as Arrow), with no Spark job: the same
    rows, each column taken from ``out`` as ``state_input`` takes it (``STATE_SOURCES``).
    Spark's filters drop a row whose condition is null, and so do these."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = out.column("kind")
    partitions = out.filter(pc.equal(kind, PARTITION))
    cursors = out.filter(pc.and_(pc.equal(kind, CURSOR), out.column("state_changed")))
    removed = out.filter(pc.and_(pc.equal(kind, CURSOR), pc.equal(out.column("op"), DELETE)))
    arrow = state_arrow()

    def shaped(rows: pa.Table, sources: Mapping[str, str], flag: bool) -> pa.Table:
        """``rows`` as ``STATE_INPUT`` (each column from its source, else null) and
        ``REMOVED`` = ``flag``."""
        sources = {**sources, "kind": "kind"}
        values = {
            f.name: rows.column(sources[f.name]).cast(f.type)
            if f.name in sources
            else pa.nulls(rows.num_rows, f.type)
            for f in arrow
        }
        values[REMOVED] = pa.array([flag] * rows.num_rows, pa.bool_())
        return pa.table(values)

    removed_key = {n: n for n in _KEY if n != "kind"}
    return pa.concat_tables(
        [
            shaped(partitions, STATE_SOURCES[PARTITION], False),
            shaped(cursors, STATE_SOURCES[CURSOR], False),
            shaped(removed, removed_key, True),
        ]
    )


REMOVED = "_removed"
"""``state_changes_table``'s column that tells a removed cursor's key from a changed row."""

_KEY = ("topic", "partition", "kind", "subscription")


def state_arrow() -> pa.Schema:
    """``STATE_INPUT`` as Arrow, as Spark converts it: tables collected from different plans
    (whose nullability Spark marks by plan) are cast to it, so that they concatenate."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(STATE_INPUT)


def state_table(rows: pa.Table) -> pa.Table:
    """``rows``' ``STATE_INPUT`` columns, in order, as ``state_arrow``."""
    return rows.select(STATE_INPUT.fieldNames()).cast(state_arrow())


def concat_state(tables: list[pa.Table]) -> pa.Table:
    import pyarrow as pa

    return pa.concat_tables([state_table(t) for t in tables])


def of_partitions(rows: pa.Table, partitions: Collection[PartitionKey], *, keep: bool = True) -> pa.Table:
    """The rows of ``partitions`` (``keep``), or of every other topic partition."""
    import pyarrow as pa

    wanted = set(partitions)
    keys = zip(rows.column("topic").to_pylist(), rows.column("partition").to_pylist(), strict=True)
    return rows.filter(pa.array([(key in wanted) == keep for key in keys], pa.bool_()))


def overlay_table(base: pa.Table, changes: pa.Table) -> pa.Table:
    """``overlay`` in the driver: ``base`` without the cursors ``changes`` removes and without
    the rows it changes, then its changed rows. Keys as ``overlay`` compares them: a removal
    names a cursor (a null subscription matches nothing), a change matches null with null."""
    import pyarrow as pa
    import pyarrow.compute as pc

    removed_mask = changes.column(REMOVED).combine_chunks()
    changed = changes.filter(pc.invert(removed_mask))
    removed = {k for k in _keys(changes.filter(removed_mask)) if k[3] is not None}
    replaced = set(_keys(changed))
    kept = pa.array([k not in removed and k not in replaced for k in _keys(base)], pa.bool_())
    return concat_state([base.filter(kept), changed])


def _keys(rows: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(rows.column(n).to_pylist() for n in _KEY), strict=True))


def _in_driver(rows: object) -> bool:
    """Whether kept rows are an Arrow table in the driver (else a Spark frame)."""
    import pyarrow as pa

    return isinstance(rows, pa.Table)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
