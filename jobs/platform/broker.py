"""The Pulsar side of ackstate on one machine: the broker's jars, the broker plugin, a local broker.

``ackstate setup --pulsar`` fills two entries of the jar cache (``jobs.platform.jars.jars_root``)::

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

The setup also dumps a class data sharing archive of the broker (``ensure_broker_archive``, in
the cache's ``cds/`` beside the driver's, ``jobs.platform.cds``), which every later broker start
maps: a standalone loads and verifies some 15,000 classes before it answers, the most of its
start's CPU on two cores, and the suite starts several brokers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.platform.cds import ARCHIVE_DIR, ARCHIVE_OPTIONS, QUIET_JVM_LOG, archive_name
from jobs.platform.config import conf_dir
from jobs.platform.errors import BrokerStartError, PulsarSetupError
from jobs.platform.jars import display_path, jars_root
from jobs.platform.java import QUICK_JIT, require_java
from jobs.platform.maven import cached_files, install_entry, resolve_pom, run_maven
from jobs.platform.processes import free_port, stop_process

log = logging.getLogger("ackstate.broker")

PULSAR_VERSION = "4.0.7"
INTERCEPTOR_NAME = "ackstate"  # `name` in the NAR's broker_interceptor.yml; brokerInterceptors=

# The admin API answers a call on a topic once the topic is loaded, and the broker allows a load
# `topicLoadTimeoutSeconds` (60 s by default) before it answers with an error. A client that gives
# up sooner turns a slow load into a failure the broker itself would not have reported: after a
# `kill -9`, a standalone's topics load about a minute late (README, "Tests"), and CI saw a stats
# call time out at 30 s.
ADMIN_TIMEOUT_SECONDS = 90.0

REPO_ROOT = Path(__file__).resolve().parents[2]  # jobs/platform/broker.py
INTERCEPTOR_SOURCE = REPO_ROOT / "interceptor"


def pulsar_lib(root: str | Path | None = None) -> Path:
    return jars_root(root) / f"pulsar-broker-{PULSAR_VERSION}"


def interceptor_dir(root: str | Path | None = None) -> Path:
    return jars_root(root) / "ackstate-interceptor"


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


def broker_archive_path(root: str | Path | None = None) -> Path:
    """Where the broker's class archive for this JDK and these broker jars is (whether it exists
    or not). An archive fits one class path and one JDK: the name is a digest of both, so a
    broker started after the jars or the JDK changed finds none, and starts as it would without."""
    return jars_root(root) / ARCHIVE_DIR / archive_name("pulsar", require_java(), pulsar_lib(root))


def ensure_broker_archive(root: str | Path | None = None, force: bool = False) -> tuple[Path, float | None]:
    """Dump the broker's class archive unless it is there; return its path and the seconds the
    dump took (None: it was there).

    A broker with the plugin is started with ``-XX:ArchiveClassesAtExit``, asked to make and
    read a topic and a subscription (so the classes of a topic's load, a cursor and the admin
    API are in the archive, beside those of the start), and stopped: the JVM writes the archive
    as it exits. The archive of older jars is deleted."""
    path = broker_archive_path(root)
    if path.is_file() and not force:
        return path, None
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="ackstate-broker-cds-") as tmp:
        work = Path(tmp)
        broker = StandaloneBroker(
            work / "broker",
            sink_dir=work / "events",
            jars_dir=root,
            java_options=(f"-XX:ArchiveClassesAtExit={partial}",),
        )
        with broker:
            topic = "/admin/v2/persistent/public/default/ackstate-archive"
            broker.admin(topic, method="PUT")
            broker.admin(f"{topic}/subscription/archive", method="PUT")
            broker.admin(f"{topic}/stats")
            broker.admin(f"{topic}/internalStats")
        if not partial.is_file():
            shutil.copy2(broker.log_file, path.with_suffix(".log"))
            raise PulsarSetupError(f"the broker wrote no class archive; see {path.with_suffix('.log')}")
    partial.replace(path)
    for old in path.parent.glob("pulsar-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)
    return path, time.monotonic() - started


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
        run_maven(["-q", "-f", str(pom), "package"], root_path / "ackstate-interceptor.log")
        built = sorted((INTERCEPTOR_SOURCE / "target").glob("*.nar"))
        if not built:
            raise PulsarSetupError(f"Maven built no .nar under {INTERCEPTOR_SOURCE / 'target'}")
        scratch = root_path / ".ackstate-interceptor.partial"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        shutil.copy2(built[-1], scratch / built[-1].name)
        install_entry(scratch, nar_dir, [built[-1].name], source)
        actions.append("built")
    return PulsarSetup(lib, find_interceptor_nar(root_path), tuple(actions), time.monotonic() - started)


# ---- a local standalone broker --------------------------------------------------------------


@dataclass
class StandaloneBroker:
    """A Pulsar standalone broker on 127.0.0.1, in ``workdir``, stopped by its process id.

    ``sink_dir`` loads the ackstate interceptor writing its JSON Lines files there;
    ``kafka_servers`` loads it with its Kafka sink instead, writing to ``kafka_topic``. ``conf``
    adds broker.conf lines (Pulsar's camelCase names). ``restart()`` keeps the data (a broker
    restart in the middle of a scenario); ``start()`` wipes it.

    The JVM maps the broker's class archive when the setup dumped one (``ensure_broker_archive``)
    and ``java_options`` do not choose otherwise. ``quick_jit`` runs the C1 compiler only
    (``QUICK_JIT``): a broker that serves a test for a minute never repays what the optimising
    compiler spends on two cores (README, "Tests"); a broker that is measured keeps both.
    """

    workdir: Path
    sink_dir: Path | None = None
    kafka_servers: str | None = None
    kafka_topic: str = "ackstate-events"
    conf: dict[str, str] = field(default_factory=dict)
    heap: str = "1g"
    jars_dir: str | Path | None = None
    quick_jit: bool = False
    java_options: tuple[str, ...] = ()
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
            str(require_java()),
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            *self.launch_options(),
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
                left = max(1.0, deadline - time.monotonic())  # a hung answer must not outlast it
                namespaces = self.admin("/admin/v2/namespaces/public", quiet=True, timeout=left)
                if namespaces and "public/default" in namespaces:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        self.stop()
        raise BrokerStartError(
            f"the standalone broker did not come up in {timeout:.0f} s; see {self.log_file}"
        )

    def launch_options(self) -> list[str]:
        """The JVM options beside the heap and the collector: ``java_options``, C1 only with
        ``quick_jit``, and the class archive unless ``java_options`` chose what to do with one."""
        options = [*self.java_options]
        if self.quick_jit:
            options.append(QUICK_JIT)
        if not any(option.startswith(ARCHIVE_OPTIONS) for option in self.java_options):
            archive = broker_archive_path(self.jars_dir)
            if archive.is_file():
                options += [f"-XX:SharedArchiveFile={archive}", *QUIET_JVM_LOG]
        return options

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (Pulsar's shutdown hook unloads topics and closes the plugin), then SIGKILL."""
        proc, self.process = self.process, None
        stop_process(proc, timeout, "broker")

    def restart(self) -> None:
        self.stop()
        self.start(wipe=False)

    def kill(self) -> None:
        """SIGKILL: the broker dies without its shutdown hook (no topic unloaded, no consumer
        closed, the plugin's queue not written out); ``start(wipe=False)`` brings it back."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def admin(
        self,
        path: str,
        method: str = "GET",
        body: Any = None,
        quiet: bool = False,
        timeout: float = ADMIN_TIMEOUT_SECONDS,
    ) -> Any:
        """One admin REST call; the decoded JSON answer (None when the answer is empty).
        ``timeout``: seconds to wait for the answer."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.admin_token:
            request.add_header("Authorization", f"Bearer {self.admin_token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if not quiet:
                log.error("%s %s: %s %s", method, path, exc.code, exc.read().decode(errors="replace"))
            raise
        return json.loads(text) if text.strip() else None

    def log_warnings(self, most: int = 40) -> str:
        """The broker log's last ``most`` kinds of WARN and ERROR line, each as its last line and
        how often it came: what a failed call needs beside it when the log is gone with the
        test's directory (CI). Lines alike but for their time and numbers are one kind, so that
        a warning repeated thousands of times (a lock loop) does not hide the others."""
        if not self.log_file.is_file():
            return ""
        last: dict[str, tuple[str, int]] = {}  # kind -> (its last line, how many)
        with self.log_file.open(errors="replace") as fh:
            for line in fh:
                if " - WARN " in line or " - ERROR " in line:
                    kind = re.sub(r"\d+", "N", line.split(" - ", 1)[-1])
                    count = last.pop(kind, ("", 0))[1] + 1
                    last[kind] = (line.rstrip()[:500], count)  # re-inserted: the dict keeps last use
        kinds = list(last.values())[-most:]
        return "\n".join(line if n == 1 else f"{line} (x{n})" for line, n in kinds)

    def __enter__(self) -> StandaloneBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
