"""A real Spark standalone cluster (master and two one-core workers on 127.0.0.1).

Every test here is marked ``cluster`` and ``spark``. The daemons come from the installed
pyspark; they are stopped by process id when the module ends.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.standalone import StandaloneCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running
