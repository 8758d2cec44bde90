"""The Pulsar side of ackstate on one machine: the broker's jars, the broker plugin, a local broker.

``ackstate setup --pulsar`` fills two entries of the jar cache (``jobs.jars.jars_root``)::

    pulsar-broker-4.0.7/            the broker and its dependencies (conf/pulsar-broker.pom)
    ackstate-interceptor/           the plugin NAR built from interceptor/ with Maven

Both are built in a scratch directory and renamed into place with a manifest written last, as
the Delta jars are, so an interrupted setup leaves nothing half-filled. Nothing is resolved at
run time: ``StandaloneBroker`` refuses to start from an incomplete cache, in one sentence that
names the setup command.

``StandaloneBroker`` runs ``PulsarStandaloneStarter`` (broker plus a local BookKeeper, RocksDB
metadata, no functions worker, no stream storage) on 127.0.0.1 with free ports, optionally with
the ackstate interceptor loaded. The tests use it as the judge of ackstate's answers and as the
source of its events; ``ackstate bench --interceptor`` uses it to measure the plugin's cost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.config import conf_dir
from jobs.errors import BrokerStartError, PulsarSetupError
from jobs.jars import display_path, jars_root

log = logging.getLogger("ackstate.broker")

PULSAR_VERSION = "4.0.7"
INTERCEPTOR_NAME = "ackstate"  # `name` in the NAR's broker_interceptor.yml; brokerInterceptors=
MANIFEST = "ackstate-jars.json"
SETTINGS_ENV = "ACKSTATE_MAVEN_SETTINGS"
REPO_ROOT = Path(__file__).resolve().parent.parent
INTERCEPTOR_SOURCE = REPO_ROOT / "interceptor"


def maven_settings() -> Path:
    """``$ACKSTATE_MAVEN_SETTINGS``, else conf/maven-central-settings.xml (every repository → Central)."""
    return Path(os.environ.get(SETTINGS_ENV) or conf_dir() / "maven-central-settings.xml")


def pulsar_lib(root: str | Path | None = None) -> Path:
    return jars_root(root) / f"pulsar-broker-{PULSAR_VERSION}"


def interceptor_dir(root: str | Path | None = None) -> Path:
    return jars_root(root) / "ackstate-interceptor"


def cached_files(directory: Path, source: str | None = None) -> list[Path] | None:
    """The files a cache entry's manifest lists, if all are there (and built from ``source``)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        names = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if source is not None and manifest.get("source") != source:
        return None
    files = [directory / n for n in names]
    return files if files and all(f.is_file() for f in files) else None


def interceptor_source_digest() -> str | None:
    """A digest of the plugin's sources, so that a NAR built from older sources counts as missing.

    None outside a checkout (an installed ackstate has no sources): then any built NAR will do.
    """
    if not (INTERCEPTOR_SOURCE / "pom.xml").is_file():
        return None
    digest = hashlib.sha256()
    for path in sorted(INTERCEPTOR_SOURCE.rglob("*")):
        relative = path.relative_to(INTERCEPTOR_SOURCE)
        if path.is_file() and relative.parts[0] != "target":
            digest.update(str(relative).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def find_pulsar_lib(root: str | Path | None = None) -> Path:
    """The cached broker jars, or ``PulsarSetupError`` naming the command that fills the cache."""
    lib = pulsar_lib(root)
    if cached_files(lib) is None:
        raise PulsarSetupError(
            f"the Pulsar {PULSAR_VERSION} broker jars are not in {display_path(lib)}: "
            "run `ackstate setup --pulsar` (needs Maven and Maven Central)"
        )
    return lib


def find_interceptor_nar(root: str | Path | None = None) -> Path:
    """The cached plugin NAR, or ``PulsarSetupError`` naming the command that builds it."""
    files = cached_files(interceptor_dir(root), interceptor_source_digest())
    if not files:
        raise PulsarSetupError(
            f"the ackstate broker plugin in {display_path(interceptor_dir(root))} is missing or older "
            "than interceptor/: run `ackstate setup --pulsar` in a checkout of ackstate (needs Maven)"
        )
    return files[0]


def _mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PulsarSetupError("`mvn` is not on PATH: install Maven to resolve Pulsar and build the plugin")
    return mvn


def _run_maven(args: list[str], log_file: Path) -> None:
    cmd = [_mvn(), "-B", "-Dstyle.color=never", "-s", str(maven_settings()), *args]
    with log_file.open("w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise PulsarSetupError(f"Maven failed (exit {proc.returncode}); its output is in {log_file}")


def _install(scratch: Path, final: Path, files: list[str], source: str | None = None) -> None:
    manifest = {"files": sorted(files), "source": source}
    (scratch / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if final.exists():
        shutil.rmtree(final)
    scratch.rename(final)


def resolve_pom(pom: Path, directory: Path, keep: Callable[[Path], bool] | None = None) -> list[Path]:
    """The runtime dependencies of ``pom``, copied by Maven into the cache entry ``directory``.

    Built in a scratch directory and renamed into place with its manifest, so an interrupted
    resolution leaves no half-filled entry; ``keep`` chooses among the copied jars.
    """
    root = directory.parent
    root.mkdir(parents=True, exist_ok=True)
    scratch = root / f".{directory.name}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    _run_maven(
        [
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={scratch}",
        ],
        root / f"{directory.name}.log",
    )
    for jar in scratch.glob("*.jar"):
        if keep is not None and not keep(jar):
            jar.unlink()
    _install(scratch, directory, [p.name for p in scratch.glob("*.jar")])
    return cached_files(directory) or []


@dataclass(frozen=True)
class PulsarSetup:
    lib: Path
    nar: Path
    actions: tuple[str, ...]  # what this call did: "resolved", "built"; empty when all was cached
    seconds: float


def ensure_pulsar(root: str | Path | None = None, force: bool = False) -> PulsarSetup:
    """Resolve the broker's jars and build the plugin NAR into the cache, each only if missing."""
    started = time.monotonic()
    root_path = jars_root(root)
    root_path.mkdir(parents=True, exist_ok=True)
    actions: list[str] = []
    lib = pulsar_lib(root_path)
    if force or cached_files(lib) is None:
        resolve_pom(conf_dir() / "pulsar-broker.pom", lib)
        actions.append("resolved")
    nar_dir = interceptor_dir(root_path)
    source = interceptor_source_digest()
    if force or cached_files(nar_dir, source) is None:
        pom = INTERCEPTOR_SOURCE / "pom.xml"
        if not pom.is_file():
            raise PulsarSetupError(
                f"the plugin's sources are not at {INTERCEPTOR_SOURCE}: "
                "build the NAR from a checkout of ackstate"
            )
        shutil.rmtree(INTERCEPTOR_SOURCE / "target", ignore_errors=True)  # no NAR of older sources
        _run_maven(["-q", "-f", str(pom), "package"], root_path / "ackstate-interceptor.log")
        built = sorted((INTERCEPTOR_SOURCE / "target").glob("*.nar"))
        if not built:
            raise PulsarSetupError(f"Maven built no .nar under {INTERCEPTOR_SOURCE / 'target'}")
        scratch = root_path / ".ackstate-interceptor.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        shutil.copy2(built[-1], scratch / built[-1].name)
        _install(scratch, nar_dir, [built[-1].name], source)
        actions.append("built")
    return PulsarSetup(lib, find_interceptor_nar(root_path), tuple(actions), time.monotonic() - started)


# ---- a local standalone broker --------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float, what: str) -> None:
    """SIGTERM (a server's shutdown hook runs), then SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s %s did not stop in %.0f s; killing it", what, process.pid, timeout)
        process.kill()
        process.wait()


@dataclass
class StandaloneBroker:
    """A Pulsar standalone broker on 127.0.0.1, in ``workdir``, stopped by its process id.

    ``sink_dir`` loads the ackstate interceptor writing its JSON Lines files there;
    ``kafka_servers`` loads it with its Kafka sink instead, writing to ``kafka_topic``. ``conf``
    adds broker.conf lines (Pulsar's camelCase names). ``restart()`` keeps the data (a broker
    restart in the middle of a scenario); ``start()`` wipes it.
    """

    workdir: Path
    sink_dir: Path | None = None
    kafka_servers: str | None = None
    kafka_topic: str = "ackstate-events"
    conf: dict[str, str] = field(default_factory=dict)
    heap: str = "1g"
    jars_dir: str | Path | None = None
    admin_token: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer`` by ``admin()``: a broker with token authentication."""
    broker_port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    bookie_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.broker_port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def log_file(self) -> Path:
        return self.workdir / "broker.log"

    def _write_conf(self) -> Path:
        lines = {
            "clusterName": "standalone",
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "brokerServicePort": str(self.broker_port),
            "webServicePort": str(self.web_port),
            "managedLedgerDefaultEnsembleSize": "1",
            "managedLedgerDefaultWriteQuorum": "1",
            "managedLedgerDefaultAckQuorum": "1",
            # the bookie reads this file too; without these it listens on every interface
            "listeningInterface": "lo",
            "allowLoopback": "true",
            "brokerDeleteInactiveTopicsEnabled": "false",
        }
        if self.sink_dir is not None or self.kafka_servers is not None:
            nar = find_interceptor_nar(self.jars_dir)
            lines |= {
                "brokerInterceptorsDirectory": str(nar.parent),
                "brokerInterceptors": INTERCEPTOR_NAME,
                "narExtractionDirectory": str(self.workdir / "nar"),
            }
        if self.kafka_servers is not None:
            lines |= {
                "ackstateSink": "kafka",
                "ackstateKafkaTopic": self.kafka_topic,
                "ackstateKafka.bootstrap.servers": self.kafka_servers,
            }
        elif self.sink_dir is not None:
            lines["ackstateSinkDirectory"] = str(self.sink_dir)
        lines |= self.conf
        path = self.workdir / "standalone.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return path

    def start(self, wipe: bool = True, timeout: float = 120.0) -> None:
        lib = find_pulsar_lib(self.jars_dir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.sink_dir is not None:
            self.sink_dir.mkdir(parents=True, exist_ok=True)
        conf = self._write_conf()
        cmd = [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "--add-opens",
            "java.base/jdk.internal.platform=ALL-UNNAMED",
            "-Dpulsar.log.level=info",
            "-cp",
            f"{lib}/*",
            "org.apache.pulsar.PulsarStandaloneStarter",
            "-c",
            str(conf),
            "-nfw",
            "-nss",
            "--bookkeeper-dir",
            str(self.workdir / "bk"),
            "--bookkeeper-port",
            str(self.bookie_port),
            "--metadata-dir",
            str(self.workdir / "metadata"),
        ]
        if wipe:
            cmd.append("--wipe-data")
        fh = self.log_file.open("ab")
        self.process = subprocess.Popen(
            cmd, cwd=self.workdir, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        fh.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrokerStartError(
                    f"the standalone broker exited with {self.process.returncode}; see {self.log_file}"
                )
            try:
                if "public/default" in self.admin("/admin/v2/namespaces/public", quiet=True):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise BrokerStartError(
            f"the standalone broker did not come up in {timeout:.0f} s; see {self.log_file}"
        )

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (Pulsar's shutdown hook unloads topics and closes the plugin), then SIGKILL."""
        proc, self.process = self.process, None
        stop_process(proc, timeout, "broker")

    def restart(self) -> None:
        self.stop()
        self.start(wipe=False)

    def admin(self, path: str, method: str = "GET", body: Any = None, quiet: bool = False) -> Any:
        """One admin REST call; the decoded JSON answer (None when the answer is empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.admin_token:
            request.add_header("Authorization", f"Bearer {self.admin_token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if not quiet:
                log.error("%s %s: %s %s", method, path, exc.code, exc.read().decode(errors="replace"))
            raise
        return json.loads(text) if text.strip() else None

    def __enter__(self) -> StandaloneBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def setup_command(args: Any) -> int:
    """``ackstate setup [--pulsar] [--kafka] [--s3]``: the Delta jars; with ``--pulsar`` the
    broker and its plugin; with ``--kafka`` Spark's Kafka source and a Kafka server for local
    runs; with ``--s3`` Hadoop's S3A connector."""
    from jobs.jars import setup_command as setup_delta

    status = setup_delta(args)
    if status != 0:
        return status
    if getattr(args, "kafka", False):
        from jobs.kafka import KAFKA_VERSION, SPARK_KAFKA_VERSION, ensure_kafka

        started = time.monotonic()
        resolved = ensure_kafka(args.jars_dir, force=args.force)
        where = display_path(jars_root(args.jars_dir))
        what = f"Spark's Kafka source {SPARK_KAFKA_VERSION} and Kafka {KAFKA_VERSION} in {where}"
        seconds = time.monotonic() - started
        took = f" (resolved {' and '.join(resolved)} in {seconds:.1f} s)" if resolved else " already there"
        print(f"ackstate setup: {what}{took}")
    if getattr(args, "s3", False):
        from jobs.s3 import HADOOP_AWS_VERSION, ensure_s3_jars, s3_jars_dir

        started = time.monotonic()
        resolved = ensure_s3_jars(args.jars_dir, force=args.force)
        what = f"Hadoop's S3A connector {HADOOP_AWS_VERSION} in {display_path(s3_jars_dir(args.jars_dir))}"
        took = f" (resolved in {time.monotonic() - started:.1f} s)" if resolved else " already there"
        print(f"ackstate setup: {what}{took}")
    if not getattr(args, "pulsar", False):
        return 0
    result = ensure_pulsar(args.jars_dir, force=args.force)
    done = " and ".join(result.actions)
    what = (
        f"Pulsar {PULSAR_VERSION} broker jars in {display_path(result.lib)}, "
        f"plugin {display_path(result.nar)}"
    )
    if done:
        print(f"ackstate setup: {what} ({done} in {result.seconds:.1f} s)")
    else:
        print(f"ackstate setup: {what} already there")
    return 0
