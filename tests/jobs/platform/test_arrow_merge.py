"""``jobs.platform.arrow_merge``: the rows a MERGE leaves, computed with Arrow in the driver, are
the rows ``rewrite.merged`` (Spark) leaves for the same table, source and clauses; a condition
outside its SQL subset is refused, never guessed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from jobs.platform.arrow_merge import Unsupported, condition, merged_rows, read_files
from jobs.platform.data_files import table_arrow_schema
from jobs.platform.rewrite import Clause, merged

SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("ledger_id", T.LongType(), False),
        T.StructField("entries", T.LongType()),
        T.StructField("state", T.BinaryType()),
        T.StructField("ack_set", T.ArrayType(T.LongType())),
        T.StructField("changed", T.BooleanType()),
        T.StructField("updated_at", T.TimestampType()),
    ]
)
KEYS = ("topic", "partition", "ledger_id")
AT = dt.datetime(2026, 12, 7, 17, 30, 1, 123456, tzinfo=dt.UTC)
LATER = dt.datetime(2026, 12, 7, 18, 0, tzinfo=dt.UTC)
TARGET = [
    ("t", 0, 1, 10, b"\x01", [1, 2], True, AT),
    ("t", 0, 2, 5, None, None, False, AT),
    ("t", 0, 3, 2, b"", [], None, AT),
    ("t", 1, 1, 4, b"\x02\x03", [7], True, AT),
    ("t", 1, 9, 1, None, [0], True, AT),
    ("u", 0, 3, 1, b"\x04", None, False, AT),
]
SOURCE = [  # the table's columns but `updated_at`, then `op` and a flag of the write
    ("t", 0, 1, 5, b"\x09", [9], True, "delete", True),
    ("t", 0, 2, 99, b"\x05", [5], True, "figures", False),
    ("t", 1, 1, None, None, None, None, "upsert", None),  # null entries and flag
    ("t", 1, 7, 1, b"\x07", [1, 2, 3], False, "upsert", True),
    ("t", 1, 8, 1, b"\x08", None, True, "figures", True),
    ("t", 1, 9, 120, b"\x0a", [4], True, None, False),  # null op
    ("u", 0, 3, 1, b"\x0b", [2], False, "upsert", True),
]
SOURCE_COLUMNS = [f.name for f in SCHEMA.fields if f.name != "updated_at"]
SOURCE_SCHEMA = T.StructType(
    [f for f in SCHEMA.fields if f.name != "updated_at"]
    + [T.StructField("op", T.StringType()), T.StructField("flag", T.BooleanType())]
)

CLAUSE_SETS = {
    "every kind": [
        Clause("delete", "s.op = 'delete'", None),
        Clause("update", "s.op = 'figures'", ("entries", "updated_at")),  # updated_at: not in s
        Clause("update", "s.entries > 100", None),  # null entries: does not hold
        Clause("update", "s.op = 'upsert'", None),
        Clause("insert", "s.op = 'upsert'", None),
        Clause("delete_unmatched", "t.topic = 't' AND t.ledger_id = 3", None),
    ],
    "changes": [  # jobs.platform.delta_writer.TableMerge.changes, over a null op too
        Clause("delete", "s.op = 'delete'", None),
        Clause("update", "NOT (s.op = 'delete')", None),
        Clause("insert", "NOT (s.op = 'delete')", None),
    ],
    "a cursor's": [  # jobs.ingest.projections.cursor_write, with a null flag
        Clause("delete", "s.op = 'delete'", None),
        Clause("update", "s.flag", None),
        Clause("update", "NOT s.flag", ("entries", "changed")),
        Clause("insert", "s.flag", None),
    ],
    "unconditional": [Clause("update", None, None), Clause("insert", None, None)],
    "or, parentheses, columns compared": [
        Clause("update", "(s.op = 'figures' OR s.entries >= 99) AND NOT s.changed", None),
        Clause("delete", "s.entries <> t.entries", None),
        Clause("insert", "s.ledger_id <= 7 OR s.op != 'upsert'", None),
    ],
}


@pytest.fixture(scope="module")
def target_file(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> str:
    """The target rows as Spark writes them (its Parquet types, e.g. its timestamps)."""
    path = tmp_path_factory.mktemp("arrow-merge") / "target"
    spark.createDataFrame(TARGET, SCHEMA).coalesce(1).write.parquet(str(path))
    [file] = path.glob("*.parquet")
    return str(file)


def _sorted(table: pa.Table) -> list[tuple]:
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return sorted(rows, key=repr)


@pytest.mark.spark
@pytest.mark.parametrize("name", list(CLAUSE_SETS))
def test_the_rows_are_those_spark_computes(spark: SparkSession, target_file: str, name: str) -> None:
    clauses = CLAUSE_SETS[name]
    source = spark.createDataFrame(SOURCE, SOURCE_SCHEMA)
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in KEYS)
    target = spark.read.schema(SCHEMA).parquet(target_file)
    by_spark = merged(target, source, on, clauses, SCHEMA, SOURCE_COLUMNS)
    by_arrow = merged_rows(
        read_files([target_file], SCHEMA), source.toArrow(), KEYS, clauses, SCHEMA, SOURCE_COLUMNS
    )
    assert by_arrow.schema == table_arrow_schema(SCHEMA)
    assert _sorted(by_arrow) == _sorted(by_spark.toArrow().cast(table_arrow_schema(SCHEMA)))


def test_an_empty_target_and_an_empty_source() -> None:
    arrow = table_arrow_schema(SCHEMA)
    source = pa.table({"topic": ["t"], "partition": [0], "ledger_id": [4], "op": ["upsert"]})
    clauses = CLAUSE_SETS["changes"]
    inserted = merged_rows(arrow.empty_table(), source, KEYS, clauses, SCHEMA, KEYS)
    assert inserted.to_pylist() == [
        {"topic": "t", "partition": 0, "ledger_id": 4, **{f: None for f in arrow.names[3:]}}
    ]
    assert merged_rows(arrow.empty_table(), source.slice(0, 0), KEYS, clauses, SCHEMA, KEYS).num_rows == 0


def test_a_file_without_a_later_column_reads_it_null(tmp_path: Path) -> None:
    """A table that gained a column (``ALTER TABLE ADD COLUMNS``) has older files without it."""
    old = tmp_path / "old.parquet"
    pq.write_table(pa.table({"topic": ["t"], "partition": pa.array([0], pa.int32()), "ledger_id": [1]}), old)
    [row] = read_files([str(old)], SCHEMA).to_pylist()
    assert row == {"topic": "t", "partition": 0, "ledger_id": 1, **{f: None for f in SCHEMA.fieldNames()[3:]}}


def test_conditions_keep_sqls_nulls() -> None:
    rows = pa.table({"op": ["delete", "upsert", None], "n": [1, 200, None], "b": [True, False, None]})

    def columns(side: str, name: str) -> pa.Array:
        return rows.column(name).combine_chunks()

    def value(sql: str) -> list[bool | None]:
        return condition(sql)(columns).to_pylist()

    assert value("s.op = 'delete'") == [True, False, None]
    assert value("NOT (s.op = 'delete')") == [False, True, None]
    assert value("s.n > 100 OR s.op = 'delete'") == [True, True, None]
    assert value("s.b AND s.n < 10") == [True, False, None]
    assert value("NOT s.b OR TRUE = s.b") == [True, True, None]
    assert value("s.`op` <> 'upsert' AND (s.n >= -1)") == [True, False, None]


@pytest.mark.parametrize(
    "sql",
    [
        "(t.topic, t.partition, t.subscription) IN (('a', 0, 'x'))",  # a deleted subscription's rows
        "coalesce(s.op, 'x') = 'x'",
        "s.op IS NULL",
        "s.op = 'it''s'",
        "s.n + 1 > 2",
        "'a' = 'a'",
        "s.op =",
        "(s.b",
    ],
)
def test_a_condition_outside_the_subset_is_refused(sql: str) -> None:
    with pytest.raises(Unsupported):
        condition(sql)


def test_a_literal_of_another_kind_than_its_column_is_refused() -> None:
    """Spark would cast one side; which side is its rule, not this module's."""
    with pytest.raises(Unsupported):
        merged_rows(
            table_arrow_schema(SCHEMA).empty_table(),
            pa.table({"topic": ["t"], "partition": [0], "ledger_id": [1], "n": [1]}),
            KEYS,
            [Clause("insert", "s.n = '1'", None)],
            SCHEMA,
            KEYS,
        )
