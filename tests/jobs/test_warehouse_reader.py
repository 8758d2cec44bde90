"""The tests' reader of local warehouses (``tests.jobs.warehouse.delta_rows``, under
``snapshot``) gives the rows Spark and Delta give, every column included. After a compaction
(OPTIMIZE's removes, a checkpoint the log is then read from, VACUUM) it is checked in
``tests/jobs/compact/test_compact.py``."""

from __future__ import annotations

import pytest

from tests.jobs.warehouse import demo_warehouse, snapshot, spark_snapshot


@pytest.mark.spark
def test_the_files_give_the_rows_spark_reads(spark, tmp_path_factory) -> None:
    warehouse = demo_warehouse(spark, tmp_path_factory.getbasetemp())
    read = snapshot(spark, warehouse)
    assert read == spark_snapshot(spark, warehouse)
    assert sum(map(len, read.values())) > 50 and read["ingest_batches"], "a warehouse with rows in it"
