"""``PROJECTIONS``: every kind of the apply UDF's rows that a table holds, shaped as that table."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.ingest.batch import unpacked_output
from jobs.ingest.projections import PROJECTION, PROJECTIONS
from schemas.tables import TABLES
from schemas.udf import APPLY_OUTPUT, CURSOR, PACKED_OUTPUT, PRODUCER, REJECT
from tests.udfs.output_rows import every_kind

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def test_every_kind_of_row_that_a_table_holds_has_one_projection() -> None:
    kinds = [p.kind for p in PROJECTIONS]
    assert len(kinds) == len(set(kinds))
    assert REJECT not in kinds  # refusals become rejected_events through the refused event
    assert PRODUCER in kinds


def test_the_packed_rows_unpack_in_the_jvm_to_the_rows_of_every_kind(spark: SparkSession) -> None:
    """What the ingest does after its apply UDF (``unpacked_output``): a row of each kind, every
    column it fills set, packed by the UDF's ``OutputRows``, is the wide row again, column for
    column, with ``APPLY_OUTPUT``'s names and types."""
    packed = spark.createDataFrame(every_kind(packed=True).table(), PACKED_OUTPUT)
    unpacked = packed.select(*unpacked_output())
    assert [(f.name, f.dataType) for f in unpacked.schema] == [(f.name, f.dataType) for f in APPLY_OUTPUT]
    assert unpacked.toArrow().to_pylist() == every_kind(packed=False).table().to_pylist()


@pytest.mark.parametrize("projection", PROJECTIONS, ids=lambda p: p.kind)
def test_the_rows_are_the_tables_columns_with_its_types_then_what_the_write_reads(
    spark: SparkSession, projection
) -> None:
    out = spark.createDataFrame([], APPLY_OUTPUT)
    lineage = [F.lit("app").alias("query_id"), F.lit(7).cast("long").alias("batch_id")]
    rows = projection.rows(out, lineage)
    table = TABLES[projection.table]
    assert rows.columns == [*table.fieldNames(), *projection.carry]
    for field in table.fields:
        assert rows.schema[field.name].dataType == field.dataType, field.name


def test_a_table_with_lineage_columns_needs_the_writers_lineage(spark: SparkSession) -> None:
    out = spark.createDataFrame([], APPLY_OUTPUT)
    with pytest.raises(ValueError, match="lineage"):
        PROJECTION[CURSOR].rows(out)
