"""A Spark standalone cluster on 127.0.0.1 from the installed pyspark: one master, N workers.

Each daemon is ``bin/spark-class`` of pyspark's own distribution, started as a child process
(not through ``sbin/``, which pip's pyspark does not ship) and stopped by its process id. A
worker offers one core, so two workers run two executors, each a JVM of its own with its own
Python workers: the closures, broadcasts and jars of a job really travel.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from jobs.platform.java import QUICK_JIT
from jobs.platform.processes import free_port, stop_process

SPARK_HOME = Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    workdir: Path
    workers: int = 2
    worker_memory: str = "1536m"
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, main: str, *args: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "512m",
            # the daemons only place and watch executors, and spark-class's launcher runs for a
            # second: C1 alone starts them with less of the two cores the test needs
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JIT,
            "SPARK_LAUNCHER_OPTS": QUICK_JIT,
            "PYSPARK_PYTHON": sys.executable,
        }
        with (self.workdir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), main, *args],
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.processes.append(process)
        return process

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"Spark's {what} did not come up in {timeout:.0f} s; logs: {self.workdir}")

    def _master_listens(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def alive_workers(self) -> int:
        """What the master's status page says (``/json``), 0 while it cannot be read."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as page:
                return int(json.load(page).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def start(self, timeout: float = 90.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port),
        )  # fmt: skip
        self._wait("master", self._master_listens, timeout)
        for i in range(self.workers):
            name = f"worker-{i}"
            self._start(
                name,
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
                "--cores", "1", "--memory", self.worker_memory,
                "--work-dir", str(self.workdir / name),
                self.master_url,
            )  # fmt: skip
        self._wait("workers", lambda: self.alive_workers() == self.workers, timeout)

    def executor_logs(self) -> list[Path]:
        """The stderr of every executor the workers ran (``<worker>/<app>/<executor>/stderr``)."""
        return sorted(self.workdir.glob("worker-*/app-*/*/stderr"))

    def stop(self, timeout: float = 30.0) -> None:
        for process in reversed(self.processes):  # the workers, then the master
            stop_process(process, timeout, "Spark daemon")
        self.processes.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
