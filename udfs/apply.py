"""The apply UDF: one topic partition's events + its current state -> new state and projections.

A thin adapter (DESIGN.md: ``udfs/`` only converts): Arrow columns become an
``engine.EventBatch`` without a Python loop per event, the engine applies them, and the result
comes back as ``schemas.udf.APPLY_OUTPUT`` rows. Projections are emitted as differences against
the state the batch started from (upserts and deletes by key), so a cursor with millions of ack
ranges costs only its changed ranges per batch.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_not, itemgetter
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from engine import (
    Cursor,
    EngineSettings,
    EventBatch,
    Ledgers,
    PartitionState,
    Producers,
    TrimResult,
    collector,
)
from engine.ackset import mask_to_words, unacked_count
from engine.events import ACK_TYPE_CODE, CONSUMER_COLUMNS, EVENT_TYPES
from engine.position import (
    Position,
    packed_keys,
    position_columns,
    positions_of,
    sorted_columns,
    sorted_positions,
)
from engine.subscription import SINGLE_ACTIVE_MODES, Changes, PendingAck, Redelivery, Subscription
from schemas.udf import (
    ACTIVE_CHANGE,
    APPLY_OUTPUT,
    BATCH,
    CONSUMER,
    CURSOR,
    DELETE,
    KIND_COLUMNS,
    LEDGER,
    OUTPUT_KEY_COLUMNS,
    OUTPUT_SLOTS,
    PACKED_OUTPUT,
    PARTITION,
    PENDING,
    RANGE,
    REDELIVERY,
    REJECT,
    UNSUBSCRIBED,
    UPSERT,
)
from udfs.columns import by_partition, column, int_column, partitions_in_seq_order, unpacked_events
from udfs.producers import emit_producer_rows, send_columns

# the Arrow form of APPLY_OUTPUT, as Spark converts it (one definition of the row type), and of
# the same rows packed into typed slots (schemas.udf.PACKED_OUTPUT)
OUTPUT_ARROW = to_arrow_schema(APPLY_OUTPUT)
PACKED_ARROW = to_arrow_schema(PACKED_OUTPUT)


# ---- Arrow -> engine ------------------------------------------------------------------
# the code of a type name is its index in these (built once: a value set per call was a
# conversion of the list and a hash table each time)
_TYPE_LOOKUP = pc.SetLookupOptions(value_set=pa.array(EVENT_TYPES))
_ACK_TYPE_LOOKUP = pc.SetLookupOptions(value_set=pa.array(list(ACK_TYPE_CODE)))


def events_to_batch(events: pa.Table) -> EventBatch:
    """Columnar conversion: message ids and their ack_set words are flattened, not looped."""
    n = events.num_rows
    type_code = pc.index_in(column(events, "type"), options=_TYPE_LOOKUP)
    ack_code = pc.index_in(column(events, "ack_type"), options=_ACK_TYPE_LOOKUP)
    subs = column(events, "subscription").dictionary_encode()
    ids = column(events, "message_ids")
    counts = int_column(pc.list_value_length(ids), 0, np.int64)
    flat = ids.flatten()
    sets = flat.field("ack_set")
    set_counts = int_column(pc.list_value_length(sets), 0, np.int64)
    return EventBatch(
        seq=int_column(column(events, "seq"), -1, np.int64),
        event_time=int_column(column(events, "event_time"), 0, np.int64),
        type=int_column(type_code, -1, np.int8),
        sub_code=int_column(subs.indices, -1, np.int32),
        sub_names=subs.dictionary.to_pylist(),
        ack_type=int_column(ack_code, -1, np.int8),
        ledger_id=int_column(column(events, "ledger_id"), -1, np.int64),
        entry_id=int_column(column(events, "entry_id"), -1, np.int64),
        batch_size=int_column(column(events, "batch_size"), 1, np.int32),
        sub_type=column(events, "sub_type").to_numpy(zero_copy_only=False).reshape(n),
        initial_position=column(events, "initial_position").to_numpy(zero_copy_only=False).reshape(n),
        msg_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        msg_ledger=int_column(flat.field("ledger_id"), -1, np.int64),
        msg_entry=int_column(flat.field("entry_id"), -1, np.int64),
        msg_batch_size=int_column(flat.field("batch_size"), 0, np.int32),  # 0: not given (see PartitionState)
        ackset_offsets=np.concatenate(([0], np.cumsum(set_counts))).astype(np.int64),
        ackset_words=int_column(sets.flatten(), 0, np.int64),
        row=int_column(column(events, "_row"), -1, np.int64),
        # the contract's defaults (validation fills them in already; a batch built without it,
        # by a test or a tool, gets the same), as the record path fills them
        **{
            name: column(events, name).to_numpy(zero_copy_only=False).reshape(n)
            if dtype is object
            else int_column(column(events, name), default, dtype)
            for name, default, dtype in CONSUMER_COLUMNS
        },
        sends=send_columns(events),
    )


def in_seq_order(events: pa.Table) -> pa.Table:
    """``events`` by seq, and input order among equal seqs: the first is applied, a replay is
    stale. Spark's cogroup sorts a group's rows only by its key; they are in seq order already
    when the input splits holding them were read in file order. Checking that costs two column
    reads, where Arrow's sort and the take it makes were 3–4 % of the apply's time."""
    seq, row = column(events, "seq"), column(events, "_row")
    if seq.null_count == 0 and row.null_count == 0:
        seqs, rows = seq.to_numpy(), row.to_numpy()
        step = np.diff(seqs)
        if (step >= 0).all() and ((step > 0) | (np.diff(rows) > 0)).all():
            return events
    return events.sort_by([("seq", "ascending"), ("_row", "ascending")])


def state_from_arrow(topic: str, partition: int, state: pa.Table) -> tuple[PartitionState, dict[str, bytes]]:
    """Rebuild a partition's state from its ``STATE_INPUT`` rows (possibly none: a new one).

    Also returns each cursor's encoded state as read: decoding it again gives the "before" of a
    cursor the batch changes, without copying the cursors it does not.
    """
    result = PartitionState(topic, partition)
    encoded: dict[str, bytes] = {}
    if state.num_rows == 0:
        return result, encoded
    # column by column: a row dictionary each cost more than the few columns a row needs
    kinds = state.column("kind").to_pylist()
    states = state.column("state").to_pylist()
    names = state.column("subscription").to_pylist()
    subscription_states = _optional_column(state, "subscription_state")
    for i, kind in enumerate(kinds):
        if kind == PARTITION:
            last_seq, last_event_time = (
                state.column("last_seq")[i].as_py(),
                state.column("last_event_time")[i].as_py(),
            )
            result.ledgers = Ledgers.decode(states[i])
            result.last_seq = last_seq if last_seq is not None else -1
            result.last_event_time = last_event_time or 0
            result.producers = Producers.decode(_optional_column(state, "producers_state")[i])
        else:
            name = names[i]
            encoded[name] = states[i]
            result.cursors[name] = Cursor.decode(states[i])
            if subscription_states[i]:
                result.subscriptions[name] = Subscription.decode(subscription_states[i])
    return result, encoded


def _optional_column(state: pa.Table, name: str) -> list[Any]:
    """A ``STATE_INPUT`` column as Python values, all None where the table lacks it (state
    tables written before the column existed)."""
    if name in state.column_names:
        return state.column(name).to_pylist()
    return [None] * state.num_rows


FIRST_RETAINED = "first_retained_ledger"
"""The ``STATE_INPUT`` column of a requested ledger trim (on the partition's row)."""


def requested_trim(state: pa.Table) -> int | None:
    """The first ledger a requested trim keeps, or None: the largest request wins (trims only
    ever move forward, and applying one twice deletes nothing the second time)."""
    if FIRST_RETAINED not in state.column_names:
        return None
    value = pc.max(state.column(FIRST_RETAINED)).as_py()
    return int(value) if value is not None else None


# ---- engine -> Arrow -------------------------------------------------------------------
class Repeated(NamedTuple):
    """A column of ``n`` copies of one value (a kind, an op, a subscription name): Arrow
    repeats it, no Python list of ``n`` references is converted."""

    value: Any
    n: int


class OutputRows:
    """Output rows gathered column by column, turned into Arrow once per call.

    A partition's output is a few dozen ``add`` calls of a few rows each, over a wide row type
    (``APPLY_OUTPUT``) in which each kind fills a handful of columns. Building Arrow arrays per
    call (one per column, most of them nulls) cost more than the engine itself. Each column is
    kept as the chunks it was given (Python lists, or numpy arrays as they are: a redeliver-all
    emits millions of positions, which need no Python int each; or Arrow arrays, for a column
    with nulls built from numpy) and the row counts of the null gaps between them; ``table``
    converts each chunk once and concatenates.
    """

    def __init__(self, topic: str, partition: int, *, packed: bool = False) -> None:
        """``packed``: the rows as ``schemas.udf.PACKED_OUTPUT`` (the ingest's apply UDF), else as
        ``APPLY_OUTPUT``; the same ``add`` calls serve both."""
        # (topic, partition, first row) of each partition's rows (``start_partition``)
        self._partitions: list[tuple[str, int, int]] = [(topic, partition, 0)]
        self._schema, self._fields, self._targets = _PACKED if packed else _WIDE
        self.columns: dict[str, list[list[Any] | np.ndarray | pa.Array | Repeated | int]] = {
            name: [] for name, _, _ in self._fields
        }
        self.filled: dict[str, int] = {name: 0 for name, _, _ in self._fields}  # rows each column covers
        self.size = 0

    def start_partition(self, topic: str, partition: int) -> None:
        """The rows added from now on are of ``topic``'s ``partition``: one ``OutputRows``
        gathers a bucket of partitions (``apply_bucket``), and ``table`` converts once."""
        if self._partitions[-1][2] == self.size:  # the one before has no rows
            self._partitions.pop()
        self._partitions.append((topic, partition, self.size))

    @property
    def topic(self) -> str:
        """The topic of the rows added now."""
        return self._partitions[-1][0]

    @property
    def partition(self) -> int:
        """The partition of the rows added now."""
        return self._partitions[-1][1]

    def add(
        self, kind: str, op: str, n: int, **values: Iterable[Any] | np.ndarray | pa.Array | Repeated
    ) -> None:
        """``n`` rows of one kind; ``values`` holds a sequence of ``n`` per column it fills, which
        must be one of the kind's (``schemas.udf.KIND_COLUMNS``, or ``subscription``)."""
        if n == 0:
            return
        targets = self._targets[kind]
        values = {"kind": Repeated(kind, n), "op": Repeated(op, n), **values}
        for name, given in values.items():
            target = targets.get(name)
            if target is None:
                raise ValueError(f"{kind} rows have no column {name!r} (schemas.udf.KIND_COLUMNS)")
            chunks = self.columns[target]
            if self.filled[target] < self.size:
                chunks.append(self.size - self.filled[target])  # nulls for the rows before
            if isinstance(given, np.ndarray):
                # a few rows join the Python lists around them (one ``pa.array`` per column in
                # ``table``); a redeliver-all's millions stay numpy
                chunks.append(given.tolist() if given.size <= _SMALL else given)
            else:
                chunks.append(given if isinstance(given, (pa.Array, Repeated)) else list(given))
            self.filled[target] = self.size + n
        self.size += n

    @collector.paused()  # millions of rows as Python objects, no cycles (engine.collector)
    def table(self) -> pa.Table:
        if self.size == 0:
            return self._schema.empty_table()
        n = self.size
        # every all-null column shares one zeroed buffer (never written, so never paged in):
        # a redeliver-all's two million rows leave most of the 69 columns null, and a fresh
        # zeroed buffer each was most of this function's time, in the kernel
        zeros = pa.py_buffer(np.zeros((n + 1) * 8, dtype=np.uint8))
        arrays = []
        topics, partitions = self._key_columns()
        for name, type_, fixed in self._fields:
            if name == "topic":
                arrays.append(_arrow(topics, type_))
            elif name == "partition":
                arrays.append(_arrow(partitions, type_))
            elif not self.filled[name]:  # no rows of a kind that fills it
                arrays.append(_null_array(n, type_, zeros))
            else:
                chunks = [*self.columns[name], n - self.filled[name]]
                chunks = [chunk for chunk in chunks if not isinstance(chunk, int) or chunk > 0]
                merged = _merge_small(chunks)
                if len(merged) == 1:
                    arrays.append(_arrow(merged[0], type_))
                elif fixed:
                    arrays.append(_fixed_width(chunks, type_, n))
                else:
                    parts = [_arrow(chunk, type_) for chunk in merged]
                    arrays.append(pa.concat_arrays(parts))
        return pa.Table.from_arrays(arrays, schema=self._schema)

    def _key_columns(self) -> tuple[Repeated | np.ndarray, Repeated | np.ndarray]:
        """The topic and partition of every row: one repeat, or each partition's run of rows."""
        if len(self._partitions) == 1:
            return Repeated(self.topic, self.size), Repeated(self.partition, self.size)
        firsts = [first for _, _, first in self._partitions]
        rows = np.diff(np.asarray([*firsts, self.size], dtype=np.int64))
        topics = np.asarray([topic for topic, _, _ in self._partitions], dtype=object)
        partitions = np.asarray([partition for _, partition, _ in self._partitions], dtype=np.int32)
        return np.repeat(topics, rows), np.repeat(partitions, rows)


_SMALL = 1024
"""Rows up to which a repeated value or a null gap is cheaper as Python list items than as an
Arrow array of its own (``_merge_small``), and up to which ``_fixed_width`` checks a list's
items one by one in Python (``_exact``) rather than leave a long list to ``pa.array``."""


def _merge_small(chunks: list[Any]) -> list[Any]:
    """Runs of Python lists, small repeats and small null gaps as one Python list each.

    A partition's output is a few dozen ``add`` calls of a few rows each: converted chunk by
    chunk, a string column of a 1,000-event partition was some 40 ``pa.array`` calls and a
    concatenation, at about 5 us a call (over 1,250 partitions of a 1M-event batch, a few
    seconds of the UDF). Numpy and Arrow chunks, and large repeats and gaps (a redeliver-all's
    millions of rows), stay parts of their own.
    """
    merged: list[Any] = []
    run: list[Any] | None = None
    for chunk in chunks:
        if isinstance(chunk, list):
            pass
        elif isinstance(chunk, int) and chunk <= _SMALL:
            chunk = [None] * chunk
        elif isinstance(chunk, Repeated) and chunk.n <= _SMALL:
            chunk = [chunk.value] * chunk.n
        else:
            merged.append(chunk)
            run = None
            continue
        if run is None:
            run = list(chunk)
            merged.append(run)
        else:
            run.extend(chunk)
    return merged


# the Arrow types a column is assembled for in one numpy array (``_fixed_width``)
_FIXED_WIDTH = {pa.int64(): np.int64, pa.int32(): np.int32, pa.bool_(): np.bool_}


# (name, type, assembled in numpy) of each output column, read once: a schema's fields, names
# and types are new Python objects at each access, one of each per column per partition
def _fields(schema: pa.Schema) -> tuple[tuple[str, pa.DataType, bool], ...]:
    return tuple((f.name, f.type, f.type in _FIXED_WIDTH) for f in schema)


def _targets(slots: Mapping[str, Mapping[str, str]] | None) -> dict[str, dict[str, str]]:
    """Per kind, the column of the table that each column it fills is written to: the column
    itself, or its slot (``schemas.udf.OUTPUT_SLOTS``)."""
    return {
        kind: {
            **{name: name for name in OUTPUT_KEY_COLUMNS},
            **{name: name if slots is None else slots[kind][name] for name in columns},
        }
        for kind, columns in KIND_COLUMNS.items()
    }


_WIDE = (OUTPUT_ARROW, _fields(OUTPUT_ARROW), _targets(None))
_PACKED = (PACKED_ARROW, _fields(PACKED_ARROW), _targets(OUTPUT_SLOTS))


def _null_array(n: int, type_: pa.DataType, zeros: pa.Buffer) -> pa.Array:
    """``pa.nulls(n, type_)`` whose buffers are all ``zeros`` (at least (n + 1) * 8 bytes):
    all-zero validity, values and offsets, an empty child for a list."""
    if pa.types.is_list(type_):
        child = pa.array([], type=type_.value_type)
        return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n, children=[child])
    if pa.types.is_string(type_) or pa.types.is_binary(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros, zeros], null_count=n)
    return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n)


def _fixed_width(chunks: list[Any], type_: pa.DataType, n: int) -> pa.Array:
    """A fixed-width column of several chunks (int gaps are nulls) written into one numpy array
    allocated zeroed: ``pa.concat_arrays`` writes every slot, so a column holding ten consumer
    rows among two million nulls paged in all of it. Each chunk goes through ``_arrow`` unless
    it is a numpy array of the column's own type (so casts check ranges as before)."""
    dtype = _FIXED_WIDTH[type_]
    values = np.zeros(n, dtype=dtype)
    valid = np.zeros(n, dtype=bool)
    at = 0
    for chunk in chunks:
        if isinstance(chunk, int):
            at += chunk
            continue
        if isinstance(chunk, np.ndarray) and chunk.dtype == dtype:
            values[at : at + chunk.size] = chunk
            valid[at : at + chunk.size] = True
            at += chunk.size
            continue
        exact = _exact(chunk, dtype) if isinstance(chunk, list) and len(chunk) <= _SMALL else None
        if exact is not None:
            values[at : at + exact.size] = exact
            valid[at : at + exact.size] = True
            at += exact.size
            continue
        array = _arrow(chunk, type_)
        size = len(array)
        if array.null_count:
            valid[at : at + size] = array.is_valid().to_numpy(zero_copy_only=False)
            array = array.fill_null(False if dtype is np.bool_ else 0)
        else:
            valid[at : at + size] = True
        values[at : at + size] = array.to_numpy(zero_copy_only=False)
        at += size
    return pa.array(values, mask=~valid, type=type_)


def _exact(items: list[Any], dtype: Any) -> np.ndarray | None:
    """``items`` as ``dtype`` when each is a plain int (a bool for a bool column); None for
    anything else (a float, a numpy scalar, a null), which the caller converts with
    ``pa.array`` as before. An int the type cannot hold still fails the batch: numpy raises
    OverflowError where ``pa.array`` raised ArrowInvalid."""
    kind = bool if dtype is np.bool_ else int
    if not all(type(v) is kind for v in items):
        return None
    return np.asarray(items, dtype=dtype)


def _arrow(chunk: list[Any] | np.ndarray | pa.Array | Repeated | int, type_: pa.DataType) -> pa.Array:
    """One chunk of an ``OutputRows`` column as Arrow (an int is that many nulls)."""
    if isinstance(chunk, int):
        return pa.nulls(chunk, type=type_)
    if isinstance(chunk, pa.Array):
        return chunk if chunk.type == type_ else chunk.cast(type_)
    if isinstance(chunk, Repeated):
        return pa.repeat(pa.scalar(chunk.value, type=type_), chunk.n)
    return pa.array(chunk, type=type_)


_Runs = list[tuple[int, np.ndarray, np.ndarray]]


def _runs_of(cursor: Cursor | None) -> _Runs:
    """Per ledger ascending: (ledger, first entries, last entries) of the cursor's ack ranges."""
    return list(cursor.acked.runs()) if cursor is not None else []


def _run_columns(runs: _Runs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ledger, lower, upper) of every ack range, in Pulsar's order (ledger, then lower)."""
    parts = [(np.full(f.size, ledger, dtype=np.int64), f - 1, last) for ledger, f, last in runs]
    if not parts:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    return tuple(np.concatenate(cols) for cols in zip(*parts, strict=True))  # type: ignore[return-value]


def _run_rows(runs: _Runs) -> list[tuple[int, int, int]]:
    """(ledger, lower, upper) of every ack range as Python ints, in the same order."""
    rows: list[tuple[int, int, int]] = []
    for ledger, firsts, lasts in runs:
        rows.extend(zip(repeat(ledger, firsts.size), (firsts - 1).tolist(), lasts.tolist(), strict=True))
    return rows


def _keys(ledger: np.ndarray, lower: np.ndarray, ledgers: np.ndarray) -> np.ndarray:
    """(ledger, lower) as one sortable int64: ledger rank << 32 | lower + 1."""
    return (np.searchsorted(ledgers, ledger).astype(np.int64) << 32) | (lower + 1)


def emit_range_changes(
    out: OutputRows, sub: str, before: Cursor | None, after: Cursor, *, rows_up_to: int = _SMALL
) -> None:
    """Upsert the runs that are new or changed, delete the runs that are gone (by ledger, lower).

    Most cursors hold a few ranges, compared as Python tuples: the numpy comparison costs
    some 40 us of calls whatever the size, and ran for each of a 1M-event batch's 10,000
    changed cursors. More than ``rows_up_to`` ranges before and after together (a cursor with
    many holes) are compared as columns.
    """
    old_runs, new_runs = _runs_of(before), _runs_of(after)
    if sum(f.size for _, f, _ in old_runs) + sum(f.size for _, f, _ in new_runs) > rows_up_to:
        _emit_range_column_changes(out, sub, old_runs, new_runs)
        return
    old_rows, new_rows = _run_rows(old_runs), _run_rows(new_runs)
    old_upper = {(ledger, lower): upper for ledger, lower, upper in old_rows}
    upserts = [row for row in new_rows if old_upper.get(row[:2]) != row[2]]
    new_keys = {(ledger, lower) for ledger, lower, _ in new_rows}
    gone = [(ledger, lower) for ledger, lower, _ in old_rows if (ledger, lower) not in new_keys]
    _add_ranges(
        out,
        sub,
        [ledger for ledger, _, _ in upserts],
        [lower for _, lower, _ in upserts],
        [upper for _, _, upper in upserts],
        [upper - lower for _, lower, upper in upserts],
        [ledger for ledger, _ in gone],
        [lower for _, lower in gone],
    )


def _emit_range_column_changes(out: OutputRows, sub: str, old_runs: _Runs, new_runs: _Runs) -> None:
    """``emit_range_changes`` for many ranges: the same rows, compared as sorted keys."""
    old_l, old_lo, old_up = _run_columns(old_runs)
    new_l, new_lo, new_up = _run_columns(new_runs)
    ledgers = np.unique(np.concatenate((old_l, new_l)))
    old_k, new_k = _keys(old_l, old_lo, ledgers), _keys(new_l, new_lo, ledgers)  # both sorted
    at = np.minimum(np.searchsorted(old_k, new_k), max(old_k.size - 1, 0))
    if old_k.size:
        unchanged = (old_k[at] == new_k) & (old_up[at] == new_up)
    else:
        unchanged = np.zeros(new_k.size, bool)
    back = np.minimum(np.searchsorted(new_k, old_k), max(new_k.size - 1, 0))
    kept = (new_k[back] == old_k) if new_k.size else np.zeros(old_k.size, bool)
    changed, gone = ~unchanged, ~kept
    lower, upper = new_lo[changed], new_up[changed]
    _add_ranges(out, sub, new_l[changed], lower, upper, upper - lower, old_l[gone], old_lo[gone])


def _add_ranges(
    out: OutputRows,
    sub: str,
    ledger: Sequence[int],
    lower: Sequence[int],
    upper: Sequence[int],
    entries: Sequence[int],
    gone_ledger: Sequence[int],
    gone_lower: Sequence[int],
) -> None:
    """The ``ack_ranges`` upserts (new or changed runs) and deletes (runs gone, by key)."""
    n = len(ledger)
    if n:
        out.add(
            RANGE,
            UPSERT,
            n,
            subscription=Repeated(sub, n),
            ledger_id=ledger,
            lower_entry_id=lower,
            upper_entry_id=upper,
            entries=entries,
        )
    n = len(gone_ledger)
    if n:
        out.add(
            RANGE, DELETE, n, subscription=Repeated(sub, n), ledger_id=gone_ledger, lower_entry_id=gone_lower
        )


def _emit_batch_changes(out: OutputRows, sub: str, before: Cursor | None, after: Cursor) -> None:
    old = dict(before.batch_ack_rows()) if before is not None else {}
    new = dict(after.batch_ack_rows())
    upserts = [(p, b) for p, b in new.items() if p not in old or old[p] != b]
    deletes = [p for p in old if p not in new]
    if upserts:
        out.add(
            BATCH,
            UPSERT,
            len(upserts),
            subscription=[sub] * len(upserts),
            ledger_id=[p[0] for p, _ in upserts],
            entry_id=[p[1] for p, _ in upserts],
            batch_size=[b.batch_size for _, b in upserts],
            ack_set=[mask_to_words(b.unacked) for _, b in upserts],
            acked_count=[b.acked_count for _, b in upserts],
        )
    if deletes:
        out.add(
            BATCH,
            DELETE,
            len(deletes),
            subscription=[sub] * len(deletes),
            ledger_id=[p[0] for p in deletes],
            entry_id=[p[1] for p in deletes],
        )


HeldBefore = Mapping[int, set[Position]]
"""The positions each consumer of a subscription held pending, by consumer id."""


def pending_held(state: PartitionState) -> dict[str, HeldBefore]:
    """What each subscription's consumers hold pending in ``state``, copied: taken before a batch
    applies, it is what ``pending_acks`` holds (the state read and the table are one)."""
    return {
        name: {cid: set(consumer.pending) for cid, consumer in sub.consumers.items()}
        for name, sub in state.subscriptions.items()
    }


def _subscription_state(sub: Subscription | None) -> bytes | None:
    return sub.encode() if sub is not None and not sub.is_empty() else None


def _pending_changes(
    sub: Subscription, held_before: HeldBefore | None = None
) -> tuple[list[tuple[int, Position, PendingAck]], tuple[list[int], np.ndarray, np.ndarray]]:
    """The changed pending acks in (consumer id, position) order, split into those still
    pending (with their ``PendingAck``) and those gone, the latter as columns (consumer id,
    ledger, entry): after a redeliver-all they are a million, recorded as columns
    (``Changes.taken``), compared and sorted by numpy rather than a Python step each.

    With ``held_before`` (``pending_held``), a gone pending ack that was not held before the
    batch is left out: dispatched and acked within the batch, it was never a row of
    ``pending_acks``, and deleting a key the table lacks changes nothing. Most of a batch's
    pending-ack changes are such (on the bench's 1M-event batch, 212,131 of 262,017 rows)."""
    upserts: list[tuple[int, Position, PendingAck]] = []
    gone_ids: list[int] = []
    gone_ledgers: list[np.ndarray] = []
    gone_entries: list[np.ndarray] = []
    changes = sub.changes
    for cid in sorted(changes.pending.keys() | changes.taken.keys()):
        changed = changes.pending.get(cid, set())
        consumer = sub.consumers.get(cid)
        held = consumer.pending if consumer is not None else {}
        before = None if held_before is None else held_before.get(cid, set())
        if cid in changes.taken:
            kept_positions, ledgers, entries = _split_taken(changed, changes.taken[cid], held, before)
        else:
            kept = changed.intersection(held)
            kept_positions = sorted_positions(kept)
            gone = changed.difference(kept)
            if before is not None:
                gone.intersection_update(before)
            ledgers, entries, _ = sorted_columns(gone)
        upserts.extend((cid, pos, held[pos]) for pos in kept_positions)
        gone_ids.extend([cid] * ledgers.size)
        gone_ledgers.append(ledgers)
        gone_entries.append(entries)
    empty = np.empty(0, dtype=np.int64)
    return upserts, (
        gone_ids,
        np.concatenate(gone_ledgers) if gone_ledgers else empty,
        np.concatenate(gone_entries) if gone_entries else empty,
    )


def _split_taken(
    changed: set[Position],
    taken: list[tuple[np.ndarray, np.ndarray]],
    held: dict[Position, PendingAck],
    before: Collection[Position] | None,
) -> tuple[list[Position], np.ndarray, np.ndarray]:
    """One consumer's changed pending acks, per position and taken by redeliver-alls (columns),
    as (those it holds now, in position order; the ledgers and entries of those gone, sorted;
    with ``before``, only those of the gone that it held before the batch)."""
    changed_ledgers, changed_entries = position_columns(list(changed))
    held_ledgers, held_entries = position_columns(list(held))
    before_ledgers, before_entries = position_columns(list(before or ()))
    ledgers = np.concatenate([changed_ledgers, *(t[0] for t in taken)])
    entries = np.concatenate([changed_entries, *(t[1] for t in taken)])
    universe = np.unique(np.concatenate((ledgers, held_ledgers, before_ledgers)))
    keys, first = np.unique(packed_keys(ledgers, entries, universe), return_index=True)  # sorted
    ledgers, entries = ledgers[first], entries[first]
    is_held = np.isin(keys, packed_keys(held_ledgers, held_entries, universe))
    kept = positions_of(ledgers[is_held].tolist(), entries[is_held].tolist())
    gone = ~is_held
    if before is not None:
        gone &= np.isin(keys, packed_keys(before_ledgers, before_entries, universe))
    return kept, ledgers[gone], entries[gone]


class _RedeliveryRows(NamedTuple):
    """The changed replay rows as columns (numpy or Arrow arrays, or Python lists for a few
    rows), upserts and deletes each in position order."""

    ledgers: Sequence[int]
    entries: Sequence[int]
    consumer_id: Sequence[int]
    reason: Sequence[str] | pa.Array
    requested_at: Sequence[int]
    due_at: Sequence[int]
    redelivery_count: Sequence[int]
    dead_letter: Sequence[bool]
    delivered_at: Sequence[int | None] | pa.Array
    gone_ledgers: Sequence[int]
    gone_entries: Sequence[int]


def _redelivery_rows(changes: Changes) -> _RedeliveryRows:
    """``changes.redeliveries`` (a ``Redelivery`` or None per position) and the redeliver-alls
    still held as columns (``changes.bulk``, later than the former for their positions) as one
    set of columns: a redeliver-all's million rows are concatenated and sorted, never a Python
    object each. A few rows and no redeliver-all, as most subscriptions of a batch have, are
    sorted as Python objects: the columns' numpy calls cost more than the rows."""
    if not changes.bulk and len(changes.redeliveries) <= _SMALL:
        return _few_redelivery_rows(changes)
    rows: list[Redelivery | None] = list(changes.redeliveries.values())
    ledgers, entries = position_columns(list(changes.redeliveries))
    blocks = changes.bulk
    if blocks and rows:
        # a row a later redeliver-all replaced is not emitted
        universe = np.unique(np.concatenate([ledgers, *(b.ledgers for b in blocks)]))
        replaced = np.isin(
            packed_keys(ledgers, entries, universe),
            np.concatenate([packed_keys(b.ledgers, b.entries, universe) for b in blocks]),
        )
        if replaced.any():
            rows = list(compress(rows, (~replaced).tolist()))
            ledgers, entries = ledgers[~replaced], entries[~replaced]
    is_kept = np.fromiter(map(is_not, rows, repeat(None)), dtype=bool, count=len(rows))
    kept: list[Redelivery] = list(compress(rows, is_kept.tolist()))
    sizes = [len(b) for b in blocks]

    def column(name: str, of_block: Any) -> np.ndarray:
        """One attribute: of the kept rows, then of each block (``of_block(block)``)."""
        parts = [np.fromiter(map(attrgetter(name), kept), dtype=np.int64, count=len(kept))]
        parts += [np.broadcast_to(np.asarray(of_block(b), dtype=np.int64), (len(b),)) for b in blocks]
        return np.concatenate(parts)

    all_ledgers = np.concatenate([ledgers[is_kept], *(b.ledgers for b in blocks)])
    all_entries = np.concatenate([entries[is_kept], *(b.entries for b in blocks)])
    order = np.lexsort((all_entries, all_ledgers))
    reasons = [*map(attrgetter("reason"), kept), *(b.reason for b in blocks)]
    names = sorted(set(reasons))
    code = {name: k for k, name in enumerate(names)}
    reason_codes = np.concatenate(
        [
            np.fromiter((code[r] for r in reasons[: len(kept)]), dtype=np.int32, count=len(kept)),
            *(np.full(size, code[b.reason], dtype=np.int32) for b, size in zip(blocks, sizes, strict=True)),
        ]
    )
    delivered = [r.delivered_at for r in kept]
    delivered_at = np.concatenate(
        [
            np.fromiter((d or 0 for d in delivered), dtype=np.int64, count=len(kept)),
            np.zeros(sum(sizes), np.int64),
        ]
    )
    undelivered = np.concatenate(
        [np.fromiter((d is None for d in delivered), dtype=bool, count=len(kept)), np.ones(sum(sizes), bool)]
    )
    gone = np.lexsort((entries[~is_kept], ledgers[~is_kept]))
    return _RedeliveryRows(
        all_ledgers[order],
        all_entries[order],
        column("consumer_id", attrgetter("consumer_id"))[order],
        pa.array(np.asarray(names, dtype=object)[reason_codes[order]], type=pa.string()),
        column("requested_at", attrgetter("due"))[order],
        column("due_at", attrgetter("due"))[order],
        column("redelivery_count", attrgetter("counts"))[order],
        column("dead_letter", lambda _: 0)[order].astype(bool),
        pa.array(delivered_at[order], mask=undelivered[order], type=pa.int64()),
        ledgers[~is_kept][gone],
        entries[~is_kept][gone],
    )


def _few_redelivery_rows(changes: Changes) -> _RedeliveryRows:
    """``_redelivery_rows`` of a few changed replays and no redeliver-all, as Python lists."""
    by_position = sorted(changes.redeliveries.items(), key=itemgetter(0))
    kept = [(pos, row) for pos, row in by_position if row is not None]
    gone = [pos for pos, row in by_position if row is None]
    return _RedeliveryRows(
        [pos[0] for pos, _ in kept],
        [pos[1] for pos, _ in kept],
        [row.consumer_id for _, row in kept],
        [row.reason for _, row in kept],
        [row.requested_at for _, row in kept],
        [row.due_at for _, row in kept],
        [row.redelivery_count for _, row in kept],
        [bool(row.dead_letter) for _, row in kept],
        [row.delivered_at for _, row in kept],
        [pos[0] for pos in gone],
        [pos[1] for pos in gone],
    )


@collector.paused()  # millions of rows as Python objects, no cycles (engine.collector)
def emit_subscription_changes(
    out: OutputRows,
    name: str,
    cursor: Cursor,
    sub: Subscription,
    settings: EngineSettings,
    held_before: HeldBefore | None = None,
) -> None:
    """Rows of the consumer tables for what the batch changed (upserts and deletes by key;
    ``held_before``: see ``_pending_changes``)."""
    single = cursor.sub_type in SINGLE_ACTIVE_MODES
    consumers = [(c, True) for cid, c in sub.consumers.items() if cid in sub.changes.consumers]
    consumers += [(c, False) for c in sub.changes.closed.values()]
    if consumers:
        n = len(consumers)
        out.add(
            CONSUMER,
            UPSERT,
            n,
            subscription=Repeated(name, n),
            sub_type=[cursor.sub_type] * n,
            consumer_id=[c.consumer_id for c, _ in consumers],
            consumer_name=[c.name for c, _ in consumers],
            priority_level=[c.priority_level for c, _ in consumers],
            connected=[up for _, up in consumers],
            is_active=[bool(single and up and c.consumer_id == sub.active) for c, up in consumers],
            unacked_messages=[c.unacked_messages if up else 0 for c, up in consumers],
            blocked=[c.blocked and up for c, up in consumers],
            subscribed_at=[c.subscribed_at for c, _ in consumers],
            closed_at=[c.closed_at for c, _ in consumers],
            ack_timeout_ms=[c.ack_timeout_ms for c, _ in consumers],
            negative_ack_delay_ms=[c.negative_ack_delay_ms for c, _ in consumers],
            max_redeliver_count=[c.max_redeliver_count for c, _ in consumers],
            attached_implicitly=[c.implicit for c, _ in consumers],
        )
    upserts, (gone_ids, gone_ledgers, gone_entries) = _pending_changes(sub, held_before)
    if upserts:
        n = len(upserts)
        batch_index = settings.acknowledgment_at_batch_index_level_enabled
        out.add(
            PENDING,
            UPSERT,
            n,
            subscription=Repeated(name, n),
            consumer_id=[cid for cid, _, _ in upserts],
            ledger_id=[pos[0] for _, pos, _ in upserts],
            entry_id=[pos[1] for _, pos, _ in upserts],
            batch_size=[p.batch_size for _, _, p in upserts],
            unacked_messages=[_remaining(cursor, pos, p.batch_size, batch_index) for _, pos, p in upserts],
            dispatched_at=[p.dispatched_at for _, _, p in upserts],
            redelivery_count=[p.redelivery_count for _, _, p in upserts],
            sticky_key_hash=[p.sticky_key_hash for _, _, p in upserts],
            ack_timeout_at=[p.ack_timeout_at if p.ack_timeout_at >= 0 else None for _, _, p in upserts],
        )
    if gone_ids:
        n = len(gone_ids)
        out.add(
            PENDING,
            DELETE,
            n,
            subscription=Repeated(name, n),
            consumer_id=gone_ids,
            ledger_id=gone_ledgers,
            entry_id=gone_entries,
        )
    if sub.changes.redeliveries or sub.changes.bulk:
        _emit_redelivery_changes(out, name, sub.changes)
    changes = sub.changes.active
    if changes:
        n = len(changes)
        out.add(
            ACTIVE_CHANGE,
            UPSERT,
            n,
            subscription=Repeated(name, n),
            sub_type=[cursor.sub_type] * n,
            seq=[c.seq for c in changes],
            event_time=[c.event_time for c in changes],
            previous_consumer_id=[c.previous[0] if c.previous else None for c in changes],
            previous_consumer_name=[c.previous[1] if c.previous else None for c in changes],
            new_consumer_id=[c.new[0] if c.new else None for c in changes],
            new_consumer_name=[c.new[1] if c.new else None for c in changes],
            effective_at=[c.effective_at for c in changes],
        )


def _emit_redelivery_changes(out: OutputRows, name: str, changes: Changes) -> None:
    """Rows of ``redeliveries`` for the replays a subscription's batch changed, in position order,
    as columns (a redeliver-all: a million rows). Most subscriptions of a batch change none (62 %
    on the bench's mix), and the caller skips those: building the empty columns took about
    0.1 ms each, some 6 % of the apply UDF's CPU time there."""
    replays = _redelivery_rows(changes)
    n = len(replays.ledgers)
    if n:
        out.add(
            REDELIVERY,
            UPSERT,
            n,
            subscription=Repeated(name, n),
            ledger_id=replays.ledgers,
            entry_id=replays.entries,
            consumer_id=replays.consumer_id,
            reason=replays.reason,
            requested_at=replays.requested_at,
            due_at=replays.due_at,
            redelivery_count=replays.redelivery_count,
            dead_letter=replays.dead_letter,
            delivered_at=replays.delivered_at,
        )
    n = len(replays.gone_ledgers)
    if n:
        out.add(
            REDELIVERY,
            DELETE,
            n,
            subscription=Repeated(name, n),
            ledger_id=replays.gone_ledgers,
            entry_id=replays.gone_entries,
        )


def _remaining(cursor: Cursor, pos: Any, batch_size: int, batch_index: bool) -> int:
    partial = cursor.batch_acks.get(pos) if batch_index else None
    return unacked_count(partial.unacked) if partial is not None else batch_size


def emit_cursor(
    out: OutputRows,
    current: PartitionState,
    name: str,
    encoded_before: dict[str, bytes],
    changed: bool,
    settings: EngineSettings,
    held_before: Mapping[str, HeldBefore] | None = None,
) -> None:
    """The ``cursors`` row of one subscription and, if its state ``changed``, the projection
    changes against the state read (ack ranges, batch entries, consumer tables; with
    ``held_before``, ``pending_held`` of that state, no delete of a pending ack it lacked).

    An unchanged cursor only refreshes its backlog: its encoded states are left null so the
    MERGE keeps the stored ones. Shared by the ingest and the ledger trim (``udfs.trim``).
    """
    cursor = current.cursors[name]
    sub = current.subscriptions.get(name)
    out.add(
        CURSOR,
        UPSERT,
        1,
        subscription=[name],
        sub_type=[sub.stats_type(cursor) if sub is not None else cursor.sub_type],
        mark_delete_ledger_id=[cursor.mark_delete[0]],
        mark_delete_entry_id=[cursor.mark_delete[1]],
        state=[cursor.encode() if changed else None],
        subscription_state=[_subscription_state(current.subscriptions.get(name)) if changed else None],
        msg_backlog=[cursor.msg_backlog(current.ledgers)],
        non_contiguous_deleted_ranges=[cursor.non_contiguous_deleted_ranges],
        partial_batch_entries=[len(cursor.batch_acks)],
        state_changed=[changed],
        last_seq=[current.last_seq],
        last_event_time=[current.last_event_time],
    )
    if not changed:
        return
    before = Cursor.decode(encoded_before[name]) if name in encoded_before else None
    emit_range_changes(out, name, before, cursor)
    _emit_batch_changes(out, name, before, cursor)
    sub = current.subscriptions.get(name)
    if sub is not None and sub.changes:
        held = None if held_before is None else held_before.get(name, {})
        emit_subscription_changes(out, name, cursor, sub, settings, held)
        sub.changes = Changes()


def emit_unsubscribed(
    out: OutputRows, current: PartitionState, names: set[str], encoded_before: dict[str, bytes]
) -> dict[str, bytes]:
    """Rows of the subscriptions an UNSUBSCRIBE deleted; the states read, without theirs.

    One ``UNSUBSCRIBED`` row each: the batch's writes delete every row of that subscription in
    the projection tables that the batch does not write itself (``jobs.ingest.batch``), so
    nothing of the deleted subscription is listed row by row, and the ``cursors`` row of one
    that is still gone goes too (a ``DELETE``). One the batch created again is a new
    subscription: its rows are written whole, against no state read.
    """
    n = len(names)
    out.add(UNSUBSCRIBED, UPSERT, n, subscription=sorted(names))
    gone = sorted(name for name in names if name not in current.cursors)
    if gone:
        out.add(CURSOR, DELETE, len(gone), subscription=gone)
    return {name: state for name, state in encoded_before.items() if name not in names}


def emit_ledger_deletes(out: OutputRows, trimmed: TrimResult) -> None:
    """``ledgers`` deletes for the ledgers a trim removed (shared with ``udfs.trim``)."""
    out.add(
        LEDGER,
        DELETE,
        len(trimmed.removed),
        ledger_id=[lid for lid, _ in trimmed.removed],
        last_entry_id=[last for _, last in trimmed.removed],
        entries=[last + 1 for _, last in trimmed.removed],
    )


@collector.paused()  # millions of rows as Python objects, no cycles (engine.collector)
def apply_partition(
    key: tuple[Any, ...], events: pa.Table, state: pa.Table, settings: EngineSettings, *, packed: bool = False
) -> pa.Table:
    """Apply one topic partition's events of a micro-batch to its state (cogroup function): the
    rows as ``APPLY_OUTPUT``, or with ``packed`` as ``PACKED_OUTPUT`` (``OutputRows``).

    A ledger trim requested for the partition (``first_retained_ledger`` on its state row) is
    applied first, as if the broker's retention ran just before the batch: the ingest then
    writes a state that already holds it, so a trim that ``ackstate compact`` commits while
    this batch runs is never undone by the batch's writes (``jobs.compact.compaction``).
    """
    topic, partition = key[0].as_py(), int(key[1].as_py())
    return apply_one(topic, partition, events, state, settings, packed=packed)


def apply_bucket(
    key: tuple[Any, ...], events: pa.Table, state: pa.Table, settings: EngineSettings
) -> pa.Table:
    """Apply a bucket of topic partitions (cogroup function over ``PACKED_EVENTS`` and
    ``STATE_INPUT`` rows grouped by a hash bucket of their topic partition): each partition's
    rows as ``apply_partition`` gives them, one after the other, ``PACKED_OUTPUT``.

    Spark charges a fixed cost per cogroup group, an Arrow stream each way per side, and so
    does each call here; a 1M-event batch of 1,250 topic partitions paid it 1,250 times
    (``jobs.ingest.batch`` says how the buckets are made). The bucket's events are converted
    to an ``EventBatch`` once and its output rows become one table, where each partition's
    conversion and table were a few dozen Arrow calls whatever its size. A partition with
    state and no events gives no rows, as a group of its own did."""
    states = by_partition(state)
    empty = state.schema.empty_table()
    out = OutputRows("", 0, packed=True)
    ordered, runs = partitions_in_seq_order(events, unpacked_events(events))
    batch = events_to_batch(ordered)  # once; each partition's events a slice of it
    for topic, p, lo, hi in runs:
        out.start_partition(topic, p)
        events_of = ordered.slice(lo, hi - lo)
        apply_into(out, events_of, states.get((topic, p), empty), settings, batch.slice(lo, hi))
    return out.table()


def apply_one(
    topic: str, partition: int, events: pa.Table, state: pa.Table, settings: EngineSettings, *, packed: bool
) -> pa.Table:
    """``apply_partition`` of one topic partition named by its values."""
    out = OutputRows(topic, partition, packed=packed)
    apply_into(out, events, state, settings)
    return out.table()


def apply_into(
    out: OutputRows,
    events: pa.Table,
    state: pa.Table,
    settings: EngineSettings,
    batch: EventBatch | None = None,
) -> None:
    """Apply the events of the topic partition ``out`` is at to its ``state``, and add the rows
    to ``out``; ``batch``, if given, is ``events`` already in seq order and converted."""
    current, encoded_before = state_from_arrow(out.topic, out.partition, state)
    if events.num_rows == 0:
        return
    last_entry_before = dict(current.ledgers)  # ledger id -> last entry id
    first_retained = requested_trim(state)
    trimmed = current.trim_ledgers(first_retained) if first_retained is not None else TrimResult()
    if batch is None:
        events = in_seq_order(events)
        batch = events_to_batch(events)
    held_before = pending_held(current)
    result = current.apply(batch, settings)

    out.add(
        PARTITION,
        UPSERT,
        1,
        last_seq=[current.last_seq],
        last_event_time=[current.last_event_time],
        ledgers=[current.ledgers.encode()],
        applied=[result.applied],
        stale=[result.stale],
        producers_state=[current.producers.encode()],
    )
    emit_producer_rows(out, current, result, events)
    if result.unsubscribed:
        encoded_before = emit_unsubscribed(out, current, result.unsubscribed, encoded_before)
    for name in current.cursors:
        changed = name in result.changed or name in trimmed.advanced
        if not changed and result.published == 0 and not trimmed.removed:
            continue
        emit_cursor(out, current, name, encoded_before, changed, settings, held_before)
    after = dict(current.ledgers)
    # what a trim or a DELETE_TOPIC removed (a ledger made and deleted within the batch was
    # never written)
    gone = [(lid, last) for lid, last in last_entry_before.items() if lid not in after]
    emit_ledger_deletes(out, TrimResult(removed=gone))
    grown = [(lid, last) for lid, last in after.items() if last_entry_before.get(lid) != last]
    if grown:
        out.add(
            LEDGER,
            UPSERT,
            len(grown),
            ledger_id=[g[0] for g in grown],
            first_entry_id=[0] * len(grown),
            last_entry_id=[g[1] for g in grown],
            entries=[g[1] + 1 for g in grown],
        )
    if result.rejects:
        out.add(
            REJECT,
            UPSERT,
            len(result.rejects),
            row=[r.row for r in result.rejects],
            reason=[r.reason for r in result.rejects],
            detail=[r.detail for r in result.rejects],
        )
