"""``ackstate ingest`` on a real Spark standalone cluster gives the tables of a local[2] run.

The driver is the ``ackstate`` process; the two executors are JVMs the workers start, each with
its own Python workers running the engine in the Arrow UDFs. The warehouse and the source are
local paths, which every process of this one-machine cluster sees.

``spark-submit jobs/ingest/__main__.py`` runs on the cluster too, with the project shipped as
``--py-files``: its executors run a Python that has ackstate's dependencies but not ackstate
itself, so the engine they run is the one in the zip.

A driver killed mid-batch on the cluster restarts to the same tables, as it does locally.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from jobs.platform.config import load_config
from jobs.platform.jars import find_delta_jars
from tests.cluster.standalone import SPARK_HOME, StandaloneCluster
from tests.jobs.ingest.killed_cli import KILL_AT_ENV
from tests.jobs.warehouse import BATCH_FIGURES, assert_same_tables, reference_warehouse, snapshot
from tests.jobs.warehouse import LINEAGE as WRITER_LINEAGE

LINEAGE = WRITER_LINEAGE | BATCH_FIGURES  # the runs cut the input into micro-batches differently
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def source(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's reference events (``REFERENCE_FILES`` files: the micro-batches of a run)."""
    return reference_warehouse(spark, tmp_path_factory.getbasetemp())[0]


@pytest.fixture(scope="module")
def local_tables(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The tables a local[2] run makes of ``source``: the session's reference warehouse, which
    tests/s3 compares with too (one local ingest for both)."""
    warehouse = reference_warehouse(spark, tmp_path_factory.getbasetemp())[1]
    return snapshot(spark, warehouse, exclude=LINEAGE)


def cluster_ingest(
    cluster: StandaloneCluster, source: Path, warehouse: Path, kill_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``ackstate ingest`` on the cluster; with ``kill_at`` (``<batch>:<phase>``) the driver
    kills itself there (``tests/jobs/ingest/killed_cli.py``)."""
    conf = warehouse.parent / f"{warehouse.name}.toml"
    conf.write_text(
        "[spark]\n"
        f'master = "{cluster.master_url}"\n'
        'executor.memory = "1g"\n'
        "executor.cores = 1\n"
        "cores.max = 2\n"
        "sql.shuffle.partitions = 2\n"
        "databricks.delta.snapshotPartitions = 2\n"
        "sql.adaptive.enabled = false\n"
        "ui.enabled = false\n"
        "[ingest]\n"
        "max_files_per_trigger = 1\n"
    )
    killed_cli = REPO_ROOT / "tests" / "jobs" / "ingest" / "killed_cli.py"
    program = ["-m", "jobs.cli"] if kill_at is None else [str(killed_cli)]
    cmd = [
        sys.executable, *program,
        "ingest", "--source", str(source), "--warehouse", str(warehouse), "--conf", str(conf),
    ]  # fmt: skip
    env = {**os.environ, KILL_AT_ENV: kill_at} if kill_at else None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def test_a_driver_killed_mid_batch_on_a_cluster_restarts_to_the_same_tables(
    spark: SparkSession, cluster: StandaloneCluster, source: Path, local_tables: dict, tmp_path: Path
) -> None:
    """The driver dies (``kill -9``) after the cursors MERGE of batch 1, its executors with it;
    the restarted ingest gets new executors and finishes with the tables of a clean run.

    This is also the test of ``ackstate ingest`` itself on a cluster (``--conf`` naming the
    master): the restarted run is a plain one; a clean run from the start is the spark-submit
    test's, which checks that both workers did the work."""
    warehouse = tmp_path / "warehouse"
    killed = cluster_ingest(cluster, source, warehouse, kill_at="1:merge cursors")
    assert killed.returncode == 137, killed.stderr[-3000:]
    restarted = cluster_ingest(cluster, source, warehouse)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert_same_tables(snapshot(spark, warehouse, exclude=LINEAGE), local_tables)


def bare_python(root: Path) -> Path:
    """A Python that imports ackstate's dependencies (this venv's site-packages) but not ackstate.

    The venv's site-packages is added by a ``.pth`` line, and a directory added that way has its
    own ``.pth`` files ignored: the editable install of ackstate (a ``.pth`` there) is not seen.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "ackstate-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_spark_submit_with_py_files_gives_the_local_tables(
    spark: SparkSession, cluster: StandaloneCluster, source: Path, local_tables: dict, tmp_path: Path
) -> None:
    python = bare_python(tmp_path / "bare")
    # nor through $PYTHONPATH (a run from a git worktree sets it to the checkout): the bare
    # Python, driver and executors alike, must find ackstate in the zip only
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
    }
    probe = "import pandas, pyarrow, pyroaring\ntry:\n    import engine\nexcept ImportError:\n    print('no')"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert found.stdout == "no\n", found.stderr
    # the command the README gives
    subprocess.run(
        [sys.executable, "-m", "zipfile", "-c", str(tmp_path / "ackstate.zip"),
         "engine", "udfs", "schemas", "jobs", "conf"],
        cwd=REPO_ROOT, check=True,
    )  # fmt: skip
    warehouse = tmp_path / "warehouse"
    jars = ",".join(map(str, find_delta_jars(load_config()).jars))
    cmd = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", cluster.master_url,
        "--py-files", str(tmp_path / "ackstate.zip"),
        "--jars", jars,
        "--properties-file", str(REPO_ROOT / "conf" / "spark-defaults.conf"),
        "--conf", f"spark.pyspark.python={python}",
        "--conf", f"spark.pyspark.driver.python={python}",
        "--conf", "spark.executor.memory=1g",
        "--conf", "spark.cores.max=2",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.databricks.delta.snapshotPartitions=2",
        "--conf", "spark.sql.adaptive.enabled=false",
        "--conf", "spark.ui.enabled=false",
        str(REPO_ROOT / "jobs" / "ingest" / "__main__.py"),
        "--source", str(source), "--warehouse", str(warehouse), "--max-files-per-trigger", "1",
    ]  # fmt: skip
    earlier = set(cluster.executor_logs())
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_tables(snapshot(spark, warehouse, exclude=LINEAGE), local_tables)
    # the work ran in executors the two workers started: JVMs apart from the driver
    ours = set(cluster.executor_logs()) - earlier
    workers = {log.relative_to(cluster.workdir).parts[0] for log in ours}
    assert workers == {"worker-0", "worker-1"}, sorted(ours)
