"""The Kafka transport: Spark's Kafka source jars, and a local single-node Kafka for tests.

``ackstate ingest --format kafka`` reads the broker plugin's Kafka sink with Spark's built-in
Kafka source (``spark-sql-kafka-0-10``). Its jars are cached once by ``ackstate setup --kafka``,
like Delta's, and ``jobs.platform.session`` adds them to every local session when they are there.

``KafkaServer`` runs Apache Kafka 3.9.1 in KRaft mode (one process, broker and controller) on
127.0.0.1 from the jars the same setup caches: ``kafka.tools.StorageTool format``, then
``kafka.Kafka``. It is what the tests and a laptop trial use; it is stopped by its process id.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from jobs.platform.config import conf_dir
from jobs.platform.errors import KafkaSetupError
from jobs.platform.jars import display_path, jars_root
from jobs.platform.java import QUICK_JIT, require_java
from jobs.platform.maven import cached_files, resolve_pom
from jobs.platform.processes import free_port, stop_process

KAFKA_VERSION = "3.9.1"
SPARK_KAFKA_VERSION = "4.1.3"
# pyspark's own jars: the connector's Hadoop, Scala, slf4j and compression dependencies are these
_PYSPARK_JARS = Path(__import__("pyspark").__file__).parent / "jars"


def kafka_lib(root: str | Path | None = None) -> Path:
    return jars_root(root) / f"kafka_2.13-{KAFKA_VERSION}"


def spark_kafka_dir(root: str | Path | None = None) -> Path:
    return jars_root(root) / f"spark-sql-kafka-0-10_2.13-{SPARK_KAFKA_VERSION}"


def _missing(what: str, where: Path) -> KafkaSetupError:
    return KafkaSetupError(
        f"{what} are not in {display_path(where)}: run `ackstate setup --kafka` (needs Maven)"
    )


def find_spark_kafka_jars(root: str | Path | None = None) -> list[Path]:
    """The cached Kafka source jars, or ``KafkaSetupError`` naming the command that caches them."""
    jars = cached_files(spark_kafka_dir(root))
    if not jars:
        raise _missing(f"Spark's Kafka source jars ({SPARK_KAFKA_VERSION})", spark_kafka_dir(root))
    return jars


def find_kafka_lib(root: str | Path | None = None) -> Path:
    lib = kafka_lib(root)
    if not cached_files(lib):
        raise _missing(f"the Kafka {KAFKA_VERSION} server jars", lib)
    return lib


def _not_in_pyspark(jar: Path) -> bool:
    """False for a jar whose artifact pyspark already ships (any version): one copy on the path."""
    artifact = jar.name.rsplit("-", 1)[0]
    return not any(p.name.rsplit("-", 1)[0] == artifact for p in _PYSPARK_JARS.glob("*.jar"))


def ensure_kafka(root: str | Path | None = None, force: bool = False) -> list[str]:
    """Resolve Spark's Kafka source and the Kafka server into the cache, each only if missing;
    returns what was resolved."""
    done = []
    if force or not cached_files(spark_kafka_dir(root)):
        resolve_pom(conf_dir() / "spark-kafka.pom", spark_kafka_dir(root), keep=_not_in_pyspark)
        done.append("Spark's Kafka source")
    if force or not cached_files(kafka_lib(root)):
        resolve_pom(conf_dir() / "kafka-server.pom", kafka_lib(root))
        done.append(f"Kafka {KAFKA_VERSION}")
    return done


# ---- a local single-node Kafka ----------------------------------------------------------------
def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka makes)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass
class KafkaServer:
    """Kafka in KRaft mode on 127.0.0.1, in ``workdir``, stopped by its process id.

    ``quick_jit`` runs the server with the C1 compiler only (``QUICK_JIT``), as a server that
    carries a test's few thousand records for a minute is best run on two cores; the storage
    tool, which runs for a second, always is."""

    workdir: Path
    heap: str = "512m"
    quick_jit: bool = False
    partitions: int = 1
    """How many partitions a topic made on first use gets (``num.partitions``)."""
    jars_dir: str | Path | None = None
    cluster_id: str = field(default_factory=new_cluster_id)
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "kafka.log"

    def _java(self, main: str, *args: str, quick_jit: bool) -> list[str]:
        lib = find_kafka_lib(self.jars_dir)
        return [
            str(require_java()),
            f"-Xmx{self.heap}",
            *([QUICK_JIT] if quick_jit else []),
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            "-cp",
            f"{lib}/*",
            main,
            *args,
        ]

    def _write_conf(self) -> Path:
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": str(self.partitions),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        (self.workdir / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.workdir / 'server.log'}\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
        )
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return path

    def format_storage(self) -> Path:
        """Write the server's settings, and the KRaft metadata directory once per ``workdir`` (a
        restart keeps its data); returns the settings file.

        The id goes as ``--cluster-id=ID``: one random id in 64 starts with ``-``, and as a
        separate argument the tool's parser takes it for an option and refuses it."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self._write_conf()
        if (self.workdir / "data" / "meta.properties").exists():
            return conf
        args = ["format", f"--cluster-id={self.cluster_id}", "-c", str(conf)]
        with self.log_file.open("ab") as fh:
            done = subprocess.run(
                self._java("kafka.tools.StorageTool", *args, quick_jit=True),
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        if done.returncode != 0:
            raise KafkaSetupError(
                f"formatting Kafka's storage failed (exit {done.returncode}); see {self.log_file}"
            )
        return conf

    def start(self, timeout: float = 60.0) -> None:
        conf = self.format_storage()
        fh = self.log_file.open("ab")
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(conf), quick_jit=self.quick_jit),
            cwd=self.workdir,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        fh.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaSetupError(f"Kafka exited with {self.process.returncode}; see {self.log_file}")
            if "Kafka Server started" in self._server_log():
                return
            time.sleep(0.2)
        self.stop()
        raise KafkaSetupError(f"Kafka did not come up in {timeout:.0f} s; see {self.workdir / 'server.log'}")

    def _server_log(self) -> str:
        try:
            return (self.workdir / "server.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        proc, self.process = self.process, None
        stop_process(proc, timeout, "Kafka")

    def reachable(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def __enter__(self) -> KafkaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
