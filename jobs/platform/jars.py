"""The Delta Lake jars on local disk, so that a Spark session with Delta starts offline.

``ackstate setup`` resolves the jar named in ``[delta]`` of ``conf/ackstate.toml`` and its
runtime dependencies once, into a cache that ``jobs.platform.session.get_spark`` points ``spark.jars``
at::

    ~/.cache/ackstate/jars/                  ($ACKSTATE_JARS_DIR overrides)
        delta-spark_4.1_2.13-4.4.0/          one directory per coordinate
            delta-spark_4.1_2.13-4.4.0.jar
            delta-storage-4.4.0.jar
            ...
            ackstate-jars.json               manifest, written last: the set is complete
        delta-spark_4.1_2.13-4.4.0.log       output of the last resolution or verification
        ivy/                                 Ivy's cache, when Maven was not available

Maven (``mvn dependency:copy-dependencies`` over ``conf/delta-jars.pom``) is preferred because
it reads ``settings.xml`` (mirrors, proxies); without ``mvn`` a throwaway local Spark session
resolves the jars with Ivy from Maven Central (``$DEFAULT_ARTIFACT_REPOSITORY`` overrides) and
they are copied into the cache. A resolution builds the set in a scratch directory and renames
it into place, so an interrupted setup leaves no half-filled cache behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from jobs.platform.config import AckstateConfig, conf_dir
from jobs.platform.errors import DeltaJarsMissingError
from jobs.platform.maven import MANIFEST

log = logging.getLogger("ackstate.jars")

JARS_DIR_ENV = "ACKSTATE_JARS_DIR"
DEFAULT_JARS_DIR = Path("~/.cache/ackstate/jars")

DEFAULT_CENTRAL = "https://repo1.maven.org/maven2/"

Resolver = Literal["auto", "maven", "ivy"]


@dataclass(frozen=True)
class DeltaJars:
    """A complete set of cached jars for one Delta coordinate."""

    coordinate: str
    directory: Path
    jars: tuple[Path, ...]
    resolver: str


@dataclass(frozen=True)
class SetupResult:
    jars: DeltaJars
    action: Literal["cached", "maven", "ivy"]
    seconds: float


def jars_root(override: str | Path | None = None) -> Path:
    """The jar cache: ``override``, else ``$ACKSTATE_JARS_DIR``, else ``~/.cache/ackstate/jars``."""
    chosen = override or os.environ.get(JARS_DIR_ENV) or DEFAULT_JARS_DIR
    return Path(chosen).expanduser().absolute()


def display_path(path: Path) -> str:
    """``path`` with the home directory shown as ``~``, as users type it."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def _cache_name(coordinate: str) -> str:
    _group, artifact, version = coordinate.split(":")
    return f"{artifact}-{version}"


def missing_jars_message(coordinate: str, root: Path, detail: str = "") -> str:
    """The one sentence a user sees when Spark cannot get the Delta jars."""
    where = f" (details: {detail})" if detail else ""
    return (
        f"Delta Lake jars ({coordinate}) are not in {display_path(root)} and could not be "
        f"resolved{where}: run `ackstate setup` (needs Maven Central)"
    )


def find_delta_jars(config: AckstateConfig, root: str | Path | None = None) -> DeltaJars:
    """The cached jars for ``config``'s Delta coordinate, or ``DeltaJarsMissingError``.

    Needs no JVM and no network: it decides whether an offline start is possible.
    """
    root_path = jars_root(root)
    coordinate = config.delta_coordinate
    directory = root_path / _cache_name(coordinate)
    manifest = directory / MANIFEST
    try:
        data = json.loads(manifest.read_text())
        jars = tuple(directory / name for name in data["jars"])
        complete = data["coordinate"] == coordinate and bool(jars) and all(j.is_file() for j in jars)
    except (OSError, ValueError, KeyError, TypeError):
        complete = False
    if not complete:
        raise DeltaJarsMissingError(missing_jars_message(coordinate, root_path))
    return DeltaJars(coordinate, directory, jars, str(data.get("resolver", "?")))


def ensure_delta_jars(
    config: AckstateConfig,
    root: str | Path | None = None,
    resolver: Resolver = "auto",
    force: bool = False,
) -> SetupResult:
    """Fill the cache for ``config``'s Delta coordinate unless it is already complete."""
    root_path = jars_root(root)
    started = time.monotonic()
    if not force:
        try:
            return SetupResult(find_delta_jars(config, root_path), "cached", 0.0)
        except DeltaJarsMissingError:
            pass

    from jobs.platform.java import require_java  # Maven and Ivy both run on the JVM

    require_java()
    coordinate = config.delta_coordinate
    mvn = shutil.which("mvn")
    if resolver == "maven" and mvn is None:
        raise DeltaJarsMissingError(
            f"`mvn` is not on PATH: install Maven, or run `ackstate setup --resolver ivy` to resolve "
            f"{coordinate} with Spark's Ivy"
        )
    use_maven = mvn is not None and resolver != "ivy"

    root_path.mkdir(parents=True, exist_ok=True)
    final = root_path / _cache_name(coordinate)
    log_file = root_path / f"{_cache_name(coordinate)}.log"
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=root_path))
    try:
        if use_maven:
            assert mvn is not None
            names = _resolve_with_maven(mvn, config, scratch, log_file)
        else:
            names = _resolve_with_ivy(coordinate, root_path / "ivy", scratch, log_file)
        action: Literal["maven", "ivy"] = "maven" if use_maven else "ivy"
        manifest = {
            "coordinate": coordinate,
            "resolver": action,
            "resolved_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "jars": sorted(names),
        }
        (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _install(scratch, final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return SetupResult(find_delta_jars(config, root_path), action, time.monotonic() - started)


def _install(scratch: Path, final: Path) -> None:
    """Move a complete jar set into place; a concurrent setup that won the race is kept."""
    if final.exists():
        shutil.rmtree(final)
    try:
        scratch.rename(final)
    except OSError:
        if not (final / MANIFEST).is_file():
            raise


def _resolve_with_maven(mvn: str, config: AckstateConfig, out: Path, log_file: Path) -> list[str]:
    pom = conf_dir() / "delta-jars.pom"
    cmd = [
        mvn,
        "-B",
        "-q",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
        f"-Ddelta.groupId={config.delta['group']}",
        f"-Ddelta.artifactId={config.delta['artifact']}",
        f"-Ddelta.version={config.delta['version']}",
    ]
    log.debug("resolving %s with Maven into %s", config.delta_coordinate, display_path(out.parent))
    if not run_logged(cmd, log_file):
        raise DeltaJarsMissingError(
            missing_jars_message(config.delta_coordinate, out.parent, f"Maven failed, see {log_file}")
        )
    return [p.name for p in out.glob("*.jar")]


def _resolve_with_ivy(coordinate: str, ivy_dir: Path, out: Path, log_file: Path) -> list[str]:
    """Resolve through a throwaway local Spark session in a child process (``spark.jars.packages``).

    Our own ivysettings (Maven Central only) replace Spark's default chain, whose local-m2
    resolver fails on a ``~/.m2`` that holds a pom without its jar.
    """
    ivy_dir.mkdir(parents=True, exist_ok=True)
    settings = ivy_dir / "ivysettings.xml"
    central = os.environ.get("DEFAULT_ARTIFACT_REPOSITORY", DEFAULT_CENTRAL)
    settings.write_text(
        "<ivysettings>\n"
        '  <settings defaultResolver="central"/>\n'
        "  <resolvers>\n"
        f'    <ibiblio name="central" m2compatible="true" root="{central}"/>\n'
        "  </resolvers>\n"
        "</ivysettings>\n"
    )
    result_file = out / "resolved.json"
    code = "from jobs.platform.jars import _ivy_child; _ivy_child()"
    args = [coordinate, str(ivy_dir), str(settings), str(result_file)]
    log.debug("resolving %s with Ivy into %s", coordinate, display_path(out.parent))
    if not run_logged([sys.executable, "-c", code, *args], log_file) or not result_file.is_file():
        raise DeltaJarsMissingError(
            missing_jars_message(coordinate, out.parent, f"Ivy failed, see {log_file}")
        )
    names = []
    for jar in json.loads(result_file.read_text()):
        source = Path(jar.removeprefix("file:"))
        shutil.copy2(source, out / source.name)
        names.append(source.name)
    result_file.unlink()
    return names


def _ivy_child() -> None:
    """Child-process body of ``_resolve_with_ivy``: start Spark with packages, report the jars."""
    coordinate, ivy_dir, settings, result_file = sys.argv[1:5]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("ackstate-setup")
        .config("spark.jars.packages", coordinate)
        .config("spark.jars.ivy", ivy_dir)
        .config("spark.jars.ivySettings", settings)
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        jars = [j for j in spark.sparkContext.getConf().get("spark.jars", "").split(",") if j]
        Path(result_file).write_text(json.dumps(jars))
    finally:
        spark.stop()


def run_logged(
    cmd: list[str], log_file: Path, env: dict[str, str] | None = None, append: bool = False
) -> bool:
    """Run ``cmd`` with its output in ``log_file`` (not on the user's terminal); True if it worked."""
    with log_file.open("a" if append else "w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, check=False
        )
    return proc.returncode == 0
