"""ackstate settings: the packaged ``conf/ackstate.toml`` merged with a user's ``--conf`` TOML.

Each setting is declared once. The top-level keys are the engine settings, declared with their
defaults by ``engine.settings.EngineSettings`` (Pulsar broker settings in snake_case, Pulsar 4.0
defaults); the packaged file declares the tables and their keys (``[spark]``, ``[ingest]``, …).
A user file may only change a known key to a value of the same type;
anything unknown is kept and reported with a warning, so a typo is visible but does not stop
a running pipeline.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jobs
from engine.settings import EngineSettings
from engine.topic import is_persistent, split_partition
from jobs.platform import locations
from jobs.platform.errors import ConfigError

log = logging.getLogger("ackstate.config")

WAREHOUSE_ENV = "ACKSTATE_WAREHOUSE"
DEFAULT_WAREHOUSE = "./warehouse"


def conf_dir() -> Path:
    """The directory of ackstate's default configuration files.

    A checkout or an editable install keeps ``conf/`` next to the ``jobs`` package; a wheel
    install gets a copy under ``<prefix>/share/ackstate/conf``; a zip shipped with
    ``spark-submit --py-files`` carries ``conf/`` beside the packages (``_unpacked_conf``).
    """
    candidates = (
        Path(jobs.__file__).resolve().parent.parent / "conf",
        Path(sys.prefix) / "share" / "ackstate" / "conf",
    )
    for candidate in candidates:
        if (candidate / "ackstate.toml").is_file():
            return candidate
    unpacked = _unpacked_conf()
    if unpacked is not None:
        return unpacked
    raise ConfigError(
        f"ackstate's default configuration (conf/ackstate.toml) is in none of "
        f"{', '.join(str(c) for c in candidates)}: reinstall ackstate, or build the --py-files "
        "zip with conf/ in it (README)"
    )


def _unpacked_conf() -> Path | None:
    """``conf/`` of the zip ``jobs`` was imported from, unpacked once into the temporary
    directory (one copy per zip content: its size and time are in the name), or None.

    Spark's settings files and the TOML are read by path, so they cannot stay in the zip.
    """
    archive = getattr(getattr(jobs, "__loader__", None), "archive", None)  # a zipimporter's
    if not archive or not zipfile.is_zipfile(archive):
        return None
    stat = os.stat(archive)
    target = Path(tempfile.gettempdir()) / f"ackstate-conf-{os.getuid()}-{stat.st_size}-{stat.st_mtime_ns}"
    if (target / "ackstate.toml").is_file():
        return target
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.namelist() if m.startswith("conf/") and not m.endswith("/")]
        if "conf/ackstate.toml" not in members:
            return None
        scratch = Path(tempfile.mkdtemp(prefix=target.name + ".partial-", dir=target.parent))
        for member in members:
            (scratch / Path(member).name).write_bytes(zf.read(member))
    try:
        scratch.rename(target)
    except OSError:  # another process unpacked it first
        shutil.rmtree(scratch, ignore_errors=True)
    return target


@dataclass(frozen=True)
class AckstateConfig:
    """Merged settings. ``engine`` holds every top-level key; each table is a plain dict."""

    engine: dict[str, Any]
    """Every top-level key (``EngineSettings.conf_defaults`` under the user's values, and any
    unknown key the user gave), and ``deduplication`` (the ``[deduplication]`` policies)."""
    spark_defaults: dict[str, str]
    """The packaged ``[spark]`` table: tuning for the embedded local Spark only."""
    spark: dict[str, str]
    """The user's ``[spark]`` table: applied to every session ackstate builds."""
    ingest: dict[str, Any]
    delta: dict[str, Any]
    tables: dict[str, Any] = field(default_factory=dict)
    """Other tables of the user file (known to a later version, or misspelt), kept as read."""
    compact: dict[str, Any] = field(default_factory=dict)
    """``[compact]``: the scheduled compaction job (jobs/compact/__main__.py)."""
    kafka: dict[str, Any] = field(default_factory=dict)
    """``[kafka]``: the Kafka source of ``ingest --format kafka``."""
    source: Path | None = None
    """The user file these settings came from, if any."""

    @property
    def settings(self) -> EngineSettings:
        """The engine settings these keys give (defaults for the ones not set)."""
        return EngineSettings.from_config(self.engine)

    # --- Spark and Delta -----------------------------------------------------------------

    def spark_conf(self, *, local: bool) -> dict[str, str]:
        """Spark settings for a session: the local tuning only when Spark runs locally."""
        merged = dict(self.spark_defaults) if local else {}
        merged.update(self.spark)
        return merged

    @property
    def delta_coordinate(self) -> str:
        """Maven coordinate of the Delta Lake jar, ``group:artifact:version``."""
        return f"{self.delta['group']}:{self.delta['artifact']}:{self.delta['version']}"

    def warehouse(self, flag: str | Path | None = None) -> str:
        """Where the Delta tables live: ``--warehouse``, else ``$ACKSTATE_WAREHOUSE``, else the
        ``[ingest] warehouse`` setting (default ``./warehouse``), as an absolute path or a URI."""
        return resolve_warehouse(flag, self)


def resolve_warehouse(flag: str | Path | None = None, config: AckstateConfig | None = None) -> str:
    """Resolve the warehouse path: flag, then environment, then configuration, then default."""
    chosen: str | Path | None = flag or os.environ.get(WAREHOUSE_ENV) or None
    if chosen is None and config is not None:
        chosen = config.ingest.get("warehouse")
    return locations.resolve(chosen or DEFAULT_WAREHOUSE)


def load_config(conf_file: str | Path | None = None) -> AckstateConfig:
    """Merge the packaged defaults with ``conf_file`` (a ``--conf`` TOML), if given."""
    defaults_path = conf_dir() / "ackstate.toml"
    defaults = _read_toml(defaults_path)
    user: dict[str, Any] = {}
    source = None
    if conf_file is not None:
        source = Path(conf_file).expanduser()
        if not source.is_file():
            raise ConfigError(f"--conf {source}: no such file")
        user = _read_toml(source)

    engine: dict[str, Any] = EngineSettings.conf_defaults()
    known_tables = {k for k, v in defaults.items() if isinstance(v, dict)}
    tables: dict[str, Any] = {}
    for key, value in user.items():
        if isinstance(value, dict):
            if key not in known_tables:
                log.warning("unknown table [%s] in %s: kept, but ackstate does not use it", key, source)
                tables[key] = value
        elif key in engine:
            engine[key] = _checked(key, value, engine[key], source)
        else:
            log.warning("unknown setting %r in %s: kept, but ackstate does not use it", key, source)
            engine[key] = value

    engine["deduplication"] = _deduplication_policies(defaults, user, source)
    return AckstateConfig(
        engine=engine,
        spark_defaults=_spark_table(defaults.get("spark", {})),
        spark=_spark_table(_table(user, "spark", source)),
        ingest=_merged_table(defaults, user, "ingest", source),
        delta=_merged_table(defaults, user, "delta", source),
        tables=tables,
        compact=_merged_table(defaults, user, "compact", source),
        kafka=_merged_table(defaults, user, "kafka", source),
        source=source,
    )


def _deduplication_policies(
    defaults: Mapping[str, Any], user: Mapping[str, Any], source: Path | None
) -> dict[str, bool]:
    """The ``[deduplication]`` table: topic or ``tenant/namespace`` -> bool (an engine setting,
    read by ``EngineSettings.from_config``). Keys are names, so they are checked here, not
    against the defaults."""
    merged = dict(defaults.get("deduplication", {}))
    merged.update(_table(user, "deduplication", source))
    for key, value in merged.items():
        if not isinstance(value, bool):
            raise ConfigError(f"[deduplication] {key!r} in {source} must be true or false, got {value!r}")
        topic = is_persistent(key) and key.count("/") == 4
        if not topic and not (key.count("/") == 1 and "://" not in key and all(key.split("/"))):
            raise ConfigError(
                f"[deduplication] {key!r} in {source}: give a persistent topic "
                "(persistent://tenant/namespace/name) or a namespace (tenant/namespace)"
            )
        if topic and split_partition(key)[1] is not None:
            raise ConfigError(
                f"[deduplication] {key!r} in {source}: a policy is set on the topic, "
                "without -partition-N; it applies to every partition"
            )
    return merged


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror}") from None


def _table(doc: Mapping[str, Any], name: str, source: Path | None) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{name} in {source} must be a table ([{name}]), got {value!r}")
    return value


def _merged_table(
    defaults: Mapping[str, Any], user: Mapping[str, Any], name: str, source: Path | None
) -> dict[str, Any]:
    merged = dict(defaults.get(name, {}))
    for key, value in _table(user, name, source).items():
        if key in merged:
            merged[key] = _checked(f"[{name}] {key}", value, merged[key], source)
        else:
            log.warning(
                "unknown setting [%s] %r in %s: kept, but ackstate does not use it", name, key, source
            )
            merged[key] = value
    return merged


def _checked(name: str, value: Any, default: Any, source: Path | None) -> Any:
    """Reject a value whose type differs from the default's (``true`` for a count, ``"5"`` …)."""
    expected = type(default)
    ok = isinstance(value, expected) and (isinstance(value, bool) == isinstance(default, bool))
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ConfigError(
            f"{name} in {source} must be {_TYPE_NAMES.get(expected, expected.__name__)} "
            f"like the default {default!r}, got {value!r}"
        )
    return value


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _spark_table(table: Mapping[str, Any]) -> dict[str, str]:
    """Flatten a ``[spark]`` table into Spark conf keys and string values.

    ``sql.shuffle.partitions = 2`` (a nested table in TOML), ``"sql.shuffle.partitions" = 2``
    and ``"spark.sql.shuffle.partitions" = 2`` all become ``spark.sql.shuffle.partitions=2``.
    """
    flat: dict[str, str] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict):
                walk(name, value)
            else:
                full = name if name.startswith("spark.") else f"spark.{name}"
                flat[full] = _spark_value(value)

    walk("", table)
    return flat


def _spark_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_spark_value(v) for v in value)
    return str(value)
