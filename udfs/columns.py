"""Arrow columns of the grouped events as numpy arrays, shared by the apply UDF's adapters.

A topic partition of a 1M-event batch has some 800 events and the apply converts about forty
columns of it, most with nulls (a SEND's fields are null on every other event). Arrow's
``fill_null`` is a compute-function call of about 15 us, three times the work it does on such
a column, and it ran on every one: some 5 % of the apply UDF's time. ``int_column`` reads an
integer column's buffers directly instead. ``unpacked_events`` gives the UDF those columns from
the one struct column the cogroup sends them in.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from schemas.udf import PACKED_EVENTS

_INTEGER_TYPES = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
}


def column(table: pa.Table, name: str) -> pa.Array:
    """One column of ``table`` as a single array (most groups arrive as one Arrow batch, whose
    column needs no concatenation)."""
    chunked = table.column(name)
    return chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()


def int_column(array: pa.Array, fill: int, dtype: Any) -> np.ndarray:
    """``array`` as a numpy ``dtype`` array, each null replaced by ``fill``.

    The same values as ``array.fill_null(fill).to_numpy()`` cast to ``dtype``: an integer
    array's values buffer and validity bitmap are read as they are, and any other type (a
    boolean's bit-packed values, a null-typed array with no buffers) goes through Arrow.
    """
    n = len(array)
    if array.null_count == 0:
        return np.asarray(array.to_numpy(zero_copy_only=False), dtype=dtype)
    source = _INTEGER_TYPES.get(array.type)
    buffers = array.buffers()
    if source is None or len(buffers) != 2 or buffers[0] is None or buffers[1] is None:
        return np.asarray(array.fill_null(fill).to_numpy(zero_copy_only=False), dtype=dtype)
    offset = array.offset
    values = np.frombuffer(buffers[1], dtype=source, count=offset + n)[offset:]
    bits = np.unpackbits(np.frombuffer(buffers[0], dtype=np.uint8), count=offset + n, bitorder="little")
    return np.where(bits[offset:].view(bool), values, fill).astype(dtype, copy=False)


def unpacked_events(events: pa.Table) -> pa.Table:
    """The cogroup's event side (the key columns and ``schemas.udf.PACKED_EVENTS``) as the flat
    table of ``PACKED_EVENT_COLUMNS`` that ``udfs.apply.apply_partition`` reads. No copy: each
    field of the struct is a column. ``flatten``, not ``RecordBatch.from_struct_array``: in
    pyarrow 22 the latter returns a sliced struct's whole fields when the slice starts at 0."""
    packed = events.column(PACKED_EVENTS)
    schema = pa.schema(list(packed.type))
    return pa.Table.from_batches(
        [pa.RecordBatch.from_arrays(chunk.flatten(), schema=schema) for chunk in packed.chunks], schema
    )


def by_partition(table: pa.Table) -> dict[tuple[str, int], pa.Table]:
    """The rows of each topic partition in ``table`` (its ``topic`` and ``partition`` columns),
    in the order they have in ``table``; each a slice of one reordered copy.

    A cogroup over buckets of topic partitions (``udfs.apply.apply_bucket``) hands the UDF many
    partitions' rows at once, in no particular order: one stable sort by a numeric key
    (the topic's dictionary code and the partition) and one ``take`` gather them, where a
    ``take`` or a filter per partition would scan the whole table each time.
    """
    if table.num_rows == 0:
        return {}
    table, runs = _gathered(table, table, [])
    return {(topic, partition): table.slice(start, end - start) for topic, partition, start, end in runs}


def partitions_in_seq_order(
    keys: pa.Table, table: pa.Table
) -> tuple[pa.Table, list[tuple[str, int, int, int]]]:
    """The rows of ``table`` (whose topic partitions are the ``topic`` and ``partition`` columns
    of ``keys``, row for row) gathered by topic partition as ``by_partition`` gathers them, each
    partition's in ``seq`` and then ``_row`` order, nulls last (what ``udfs.apply.in_seq_order``
    makes of it), and (topic, partition, first row, end row) of each partition.

    One sort over a bucket's rows and one conversion of the whole table
    (``udfs.apply.apply_bucket``), where each partition's rows were a slice converted alone:
    the conversion's few dozen Arrow calls cost the same for 800 rows as for 50,000.
    """
    if table.num_rows == 0:
        return table, []
    minor = []
    for name in ("seq", "_row"):  # as Arrow's sort places them: a null after every value
        values = column(table, name)
        minor += [values.is_null().to_numpy(zero_copy_only=False), int_column(values, 0, np.int64)]
    return _gathered(keys, table, minor)


def _gathered(
    keys: pa.Table, table: pa.Table, minor: list[np.ndarray]
) -> tuple[pa.Table, list[tuple[str, int, int, int]]]:
    """``table`` sorted (stably) by the topic partition ``keys`` names for each row, then by the
    ``minor`` keys in their order, and each partition's (topic, partition, first row, end row)."""
    n = table.num_rows
    topics = column(keys, "topic").dictionary_encode()
    codes = np.asarray(topics.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    partitions = np.asarray(column(keys, "partition").to_numpy(zero_copy_only=False), dtype=np.int64)
    low = int(partitions.min())
    key = codes * (int(partitions.max()) - low + 1) + (partitions - low)
    order = np.lexsort((*reversed(minor), key))  # the last key sorts first; stable
    if not (np.diff(order) == 1).all():
        table = table.take(pa.array(order))
    sorted_key = key[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_key)) + 1))
    ends = np.concatenate((starts[1:], [n]))
    names = topics.dictionary.to_pylist()
    first = order[starts]
    runs = [
        (names[code], int(partition), start, end)
        for code, partition, start, end in zip(
            codes[first].tolist(), partitions[first].tolist(), starts.tolist(), ends.tolist(), strict=True
        )
    ]
    return table, runs
