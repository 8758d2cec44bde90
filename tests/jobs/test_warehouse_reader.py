"""The tests' reader of local warehouses (``tests.jobs.warehouse.delta_rows``, under
``snapshot`` and ``table_rows``) gives the rows Spark and Delta give, every column included, at
the latest version and at earlier ones. After a compaction (OPTIMIZE's removes, a checkpoint the
log is then read from, VACUUM) it is checked in ``tests/jobs/compact/test_compact.py``."""

from __future__ import annotations

import pytest

from jobs.platform.tables import read_table
from tests.jobs.warehouse import demo_warehouse, plain_rows, snapshot, spark_snapshot, table_rows


@pytest.mark.spark
def test_the_files_give_the_rows_spark_reads(spark, tmp_path_factory) -> None:
    warehouse = demo_warehouse(spark, tmp_path_factory.getbasetemp())
    read = snapshot(warehouse)
    assert read == spark_snapshot(spark, warehouse)
    assert sum(map(len, read.values())) > 50 and read["ingest_batches"], "a warehouse with rows in it"

    for name in ("cursors", "pending_acks"):
        versions = len(list((warehouse / name / "_delta_log").glob("*.json")))
        assert versions > 2, name
        for version in range(versions):
            as_of = plain_rows(read_table(spark, warehouse, name, as_of=version).collect())
            assert table_rows(warehouse / name, name, version) == as_of, (name, version)
