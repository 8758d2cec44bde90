"""``udfs.columns.int_column`` reads integer buffers directly; it must give what Arrow's
``fill_null`` gave, for every type, null pattern and slice offset, and ``apply_partition``'s
order check must leave exactly the order Arrow's sort gives. ``unpacked_events`` must give the
flat event table the struct column was made of, however it is cut into batches."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.bench.generate import MALFORMED_KEY, iter_events
from schemas.events import EVENT_ARROW_SCHEMA
from schemas.udf import APPLY_EVENT_COLUMNS, PACKED_EVENTS
from udfs.apply import in_seq_order
from udfs.columns import by_partition, int_column, partitions_in_seq_order, unpacked_events

_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.bool_()]
_TARGETS = [np.int8, np.int32, np.int64, np.bool_]


def _expected(array: pa.Array, fill: int, dtype: type) -> np.ndarray:
    return np.asarray(array.fill_null(fill).to_numpy(zero_copy_only=False), dtype=dtype)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    type_=st.sampled_from(_TYPES),
    dtype=st.sampled_from(_TARGETS),
    fill=st.sampled_from([-1, 0, 1]),
    n=st.integers(0, 70),
    cut=st.integers(0, 9),
)
def test_int_column_is_fill_null_then_numpy(data, type_, dtype, fill, n, cut):
    if pa.types.is_boolean(type_):
        values = data.draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n))
        fill = bool(fill)  # Arrow fills a boolean column only with a boolean
    else:
        bound = 2 ** (type_.bit_width - 1)
        ints = st.integers(-bound, bound - 1)
        values = data.draw(st.lists(st.one_of(st.none(), ints), min_size=n, max_size=n))
    array = pa.array(values, type=type_)
    sliced = array.slice(min(cut, n))  # a non-zero offset into the buffers
    for part in (array, sliced):
        got = int_column(part, fill, dtype)
        assert got.dtype == np.dtype(dtype)
        assert np.array_equal(got, _expected(part, fill, dtype))


def test_int_column_of_a_dictionary_index_and_a_list_length():
    names = pa.array(["a", None, "b", "a", None]).dictionary_encode()
    assert int_column(names.indices, -1, np.int32).tolist() == [0, -1, 1, 0, -1]
    lengths = pa.compute.list_value_length(pa.array([[1], None, [], [2, 3]]))
    assert int_column(lengths, 0, np.int64).tolist() == [1, 0, 0, 2]


@settings(max_examples=200, deadline=None)
@given(
    seqs=st.lists(st.integers(0, 6), min_size=0, max_size=30),
    shuffle=st.booleans(),
    chunks=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_seq_order_is_arrows_sort(seqs, shuffle, chunks, seed):
    """Already in order (the common case) the table comes back as it is; otherwise sorted by
    (seq, _row) exactly as ``sort_by`` sorts, equal seqs in input order."""
    rows = list(range(len(seqs)))
    if not shuffle:
        seqs = sorted(seqs)
    else:
        rows = np.random.default_rng(seed).permutation(len(seqs)).tolist()
    table = pa.table({"seq": pa.array(seqs, pa.int64()), "_row": pa.array(rows, pa.int64())})
    step = max(1, len(seqs) // chunks)
    table = pa.concat_tables([table.slice(i, step) for i in range(0, len(seqs), step)] or [table])
    expected = table.sort_by([("seq", "ascending"), ("_row", "ascending")])
    got = in_seq_order(table)
    assert got.to_pydict() == expected.to_pydict()
    if not shuffle:
        assert got is table


def test_partitions_in_seq_order_gathers_what_in_seq_order_makes_of_each_partition():
    """Each topic partition's rows as ``in_seq_order`` orders ``by_partition``'s slice of it,
    nulls (a seq, a ``_row``) and ties included, and the partitions in ``by_partition``'s order."""
    rng = np.random.default_rng(6)
    n = 400
    seq = rng.integers(0, 40, n).tolist()
    row = rng.permutation(n).tolist()
    for i in rng.choice(n, 30, replace=False).tolist():
        seq[i] = None
    for i in rng.choice(n, 10, replace=False).tolist():
        row[i] = None
    table = pa.table(
        {
            "topic": pa.array(rng.choice(["t-b", "t-a", "t-c"], n).tolist()),
            "partition": pa.array(rng.integers(-1, 3, n).tolist(), pa.int32()),
            "seq": pa.array(seq, pa.int64()),
            "_row": pa.array(row, pa.int64()),
            "i": pa.array(range(n), pa.int64()),
        }
    )
    ordered, runs = partitions_in_seq_order(table, table)
    expected = by_partition(table)
    assert [(topic, p) for topic, p, _, _ in runs] == list(expected)
    for topic, p, lo, hi in runs:
        assert ordered.slice(lo, hi - lo).to_pydict() == in_seq_order(expected[(topic, p)]).to_pydict()
    assert partitions_in_seq_order(table.slice(0, 0), table.slice(0, 0))[1] == []


def test_seq_order_with_a_null_seq_is_arrows_sort():
    table = pa.table({"seq": pa.array([1, None, 2], pa.int64()), "_row": pa.array([0, 1, 2], pa.int64())})
    assert in_seq_order(table).to_pydict() == {"seq": [1, 2, None], "_row": [0, 2, 1]}


def _flat_events(n: int) -> pa.Table:
    """``n`` generated events of one topic partition, as the apply UDF's flat columns."""
    types = {f.name: f.type for f in EVENT_ARROW_SCHEMA} | {"_row": pa.int64()}
    records = iter_events(events=n, topics=1, partitions=1, subscriptions_per_topic=3, seed=11)
    rows = [
        {c: r.get(c) for c in APPLY_EVENT_COLUMNS} | {"_row": i}
        for i, r in enumerate(records)
        if MALFORMED_KEY not in r
    ]
    schema = pa.schema([pa.field(c, types[c]) for c in APPLY_EVENT_COLUMNS])
    return pa.Table.from_pylist(rows, schema=schema)


def _packed(flat: pa.Table, cuts: list[int]) -> pa.Table:
    """``flat`` as the cogroup sends it: the key columns and one struct column, in batches cut
    at ``cuts``."""
    whole = flat.combine_chunks()
    struct = pa.StructArray.from_arrays([c.chunk(0) for c in whole.columns], fields=list(whole.schema))
    table = pa.table({"topic": whole["topic"], "partition": whole["partition"], PACKED_EVENTS: struct})
    bounds = [0, *sorted(cuts), table.num_rows]
    return pa.Table.from_batches(
        [b for lo, hi in pairwise(bounds) for b in table.slice(lo, hi - lo).to_batches()], table.schema
    )


def test_unpacked_events_are_the_flat_table_in_any_batches():
    flat = _flat_events(400)
    assert flat.num_rows > 300 and flat["message_ids"].null_count < flat.num_rows
    for cuts in ([], [1], [57, 58, 200], [flat.num_rows]):
        unpacked = unpacked_events(_packed(flat, cuts))
        assert unpacked.schema == flat.schema
        assert unpacked.equals(flat)
    middle = _packed(flat, [100, 250]).slice(120, 100)  # offsets inside a batch
    assert unpacked_events(middle).equals(flat.slice(120, 100))
    none = unpacked_events(_packed(flat, []).slice(0, 0))
    assert none.num_rows == 0 and none.schema == flat.schema


def test_by_partition_gives_each_partitions_rows_in_the_order_they_came():
    """The rows of a bucket of topic partitions, interleaved and in batches, come apart into each
    partition's rows in their own order; partition -1 (a topic without partitions) included."""
    rng = np.random.default_rng(3)
    keys = [("persistent://t/ns/a", 0), ("persistent://t/ns/a", 1), ("persistent://t/ns/b", -1)]
    picks = rng.integers(0, len(keys), 500)
    table = pa.table(
        {
            "topic": [keys[k][0] for k in picks],
            "partition": pa.array([keys[k][1] for k in picks], pa.int32()),
            "_row": pa.array(range(500), pa.int64()),
        }
    )
    batched = pa.Table.from_batches(table.slice(0, 200).to_batches() + table.slice(200).to_batches())
    parts = by_partition(batched)
    assert sorted(parts) == sorted(keys)
    for i, key in enumerate(keys):
        assert parts[key]["_row"].to_pylist() == np.flatnonzero(picks == i).tolist()
        assert set(parts[key]["topic"].to_pylist()) == {key[0]}
    one = by_partition(table.slice(7, 1))
    assert list(one) == [keys[picks[7]]] and one[keys[picks[7]]]["_row"].to_pylist() == [7]
    assert by_partition(table.slice(0, 0)) == {}
