"""``holds_no_rows``: a table known empty at a version without a Spark job, and only then."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.platform.tables import ensure_tables, holds_no_rows, latest_version, table_path
from tests.jobs.warehouse import append_rows

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)

ROW = {"topic": "t", "partition": 0, "first_retained_ledger": 5, "requested_by": "test", "requested_at": None}


def test_only_a_version_whose_checksum_counts_no_file_holds_no_rows(
    spark: SparkSession, tmp_path: Path
) -> None:
    warehouse = str(tmp_path / "wh")
    ensure_tables(spark, warehouse, ["ledger_trims"])
    assert latest_version(spark, warehouse, "ledger_trims") == 0
    assert holds_no_rows(spark, warehouse, "ledger_trims", 0)  # just created

    append_rows(spark, warehouse, "ledger_trims", [ROW])
    assert latest_version(spark, warehouse, "ledger_trims") == 1
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 1)  # a file
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 0)  # not the version last read: unknown

    spark.sql(f"DELETE FROM delta.`{table_path(warehouse, 'ledger_trims')}`")
    assert latest_version(spark, warehouse, "ledger_trims") == 2
    assert holds_no_rows(spark, warehouse, "ledger_trims", 2)  # every file removed

    for checksum in (Path(table_path(warehouse, "ledger_trims")) / "_delta_log").glob("*.crc"):
        checksum.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[attr-defined]
    assert latest_version(spark, warehouse, "ledger_trims") == 2
    assert not holds_no_rows(spark, warehouse, "ledger_trims", 2)  # no checksum: not known
