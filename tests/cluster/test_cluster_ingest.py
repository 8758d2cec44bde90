"""``ackstate ingest`` on a real Spark standalone cluster gives the tables of a local[2] run.

The driver is the ``ackstate`` process; the two executors are JVMs the workers start, each with
its own Python workers running the engine in the Arrow UDFs. The warehouse and the source are
local paths, which every process of this one-machine cluster sees.

``spark-submit jobs/ingest/__main__.py`` runs on the cluster too, with the project shipped as
``--py-files``: its executors run a Python that has ackstate's dependencies but not ackstate
itself, so the engine they run is the one in the zip.

A driver killed mid-batch on the cluster restarts to the same tables, as it does locally. One
test runs both: ``ackstate ingest`` on the cluster is killed in its second batch, and
spark-submit restarts it. Each driver on this cluster costs a minute or more of the suite's two
cores (its JVM, two executors' JVMs and their Python workers; 2026-12-02: the killed run and a
plain restart took 176 s, a third driver for spark-submit alone 63 s more). Every JVM of the
test runs a few small batches and exits, so each has the C1 compiler alone (``QUICK_JIT``), as
the cluster's daemons have (``tests/cluster/standalone.py``).
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
from jobs.platform.java import QUICK_JIT
from jobs.platform.tables import read_table
from tests.cluster.standalone import SPARK_HOME, StandaloneCluster
from tests.jobs.ingest.killed_cli import run_killed
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
    return snapshot(warehouse, exclude=LINEAGE)


def killed_cluster_ingest(
    cluster: StandaloneCluster, source: Path, warehouse: Path, kill_at: str
) -> subprocess.CompletedProcess[str]:
    """``ackstate ingest`` on the cluster, whose driver kills itself at ``kill_at``
    (``<batch>:<phase>``, ``tests/jobs/ingest/killed_cli.py``)."""
    conf = warehouse.parent / f"{warehouse.name}.toml"
    conf.write_text(
        "[spark]\n"
        f'master = "{cluster.master_url}"\n'
        'executor.memory = "1g"\n'
        "executor.cores = 1\n"
        "cores.max = 2\n"
        f'executor.extraJavaOptions = "{QUICK_JIT}"\n'
        "sql.shuffle.partitions = 2\n"
        "databricks.delta.snapshotPartitions = 2\n"
        "sql.adaptive.enabled = false\n"
        "ui.enabled = false\n"
        "[ingest]\n"
        "max_files_per_trigger = 1\n"
    )
    argv = ["ingest", "--source", str(source), "--warehouse", str(warehouse), "--conf", str(conf)]
    return run_killed(argv, kill_at, timeout=900)


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


def test_a_driver_killed_mid_batch_restarts_with_spark_submit_to_the_local_tables(
    spark: SparkSession, cluster: StandaloneCluster, source: Path, local_tables: dict, tmp_path: Path
) -> None:
    """``ackstate ingest`` on the cluster (``--conf`` naming the master) commits batch 0, and its
    driver dies (``kill -9``) after the cursors MERGE of batch 1, its executors with it.
    spark-submit with the project as ``--py-files`` then restarts the query on the same
    checkpoint with new executors, and the tables are those of a clean local run.

    The restart is the work of both workers' executors, whose Python does not have ackstate
    installed: the engine they run is the zip's."""
    warehouse = tmp_path / "warehouse"
    killed = killed_cluster_ingest(cluster, source, warehouse, kill_at="1:merge cursors")
    assert killed.returncode == 137, killed.stderr[-3000:]
    # batch 0 was committed on the cluster, batch 1 was not
    assert [r.batch_id for r in read_table(spark, warehouse, "ingest_batches").collect()] == [0]

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
        "--conf", f"spark.executor.extraJavaOptions={QUICK_JIT}",
        "--conf", f"spark.driver.extraJavaOptions={QUICK_JIT}",
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
    assert_same_tables(snapshot(warehouse, exclude=LINEAGE), local_tables)
    # the work ran in executors the two workers started: JVMs apart from the driver
    ours = set(cluster.executor_logs()) - earlier
    workers = {log.relative_to(cluster.workdir).parts[0] for log in ours}
    assert workers == {"worker-0", "worker-1"}, sorted(ours)
