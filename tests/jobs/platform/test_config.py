"""Settings: packaged defaults, a user's --conf TOML over them, and where the warehouse is."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from jobs.ingest.options import IngestOptions
from jobs.platform.config import conf_dir, load_config, resolve_warehouse
from jobs.platform.errors import ConfigError

PULSAR_4_DEFAULTS = {
    "acknowledgment_at_batch_index_level_enabled": False,
    "broker_deduplication_enabled": False,
    "max_unacked_messages_per_consumer": 50000,
    "active_consumer_failover_delay_time_millis": 1000,
    "active_consumer_failover_consistent_hashing": False,
    "max_concurrent_non_persistent_message_per_connection": 1000,
}


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_are_pulsar_4_broker_defaults() -> None:
    config = load_config()
    assert config.engine == {**PULSAR_4_DEFAULTS, "deduplication": {}}  # no topic policies
    for key, value in PULSAR_4_DEFAULTS.items():
        assert getattr(config.settings, key) == value
    assert config.ingest["trigger"] == "available-now"
    # a warm 1,000-event batch takes 2-3 s on 2 cores (README "Benchmarks"); the options'
    # own default (a run without the conf file's value) is the same
    assert config.ingest["processing_time"] == "3 seconds" == IngestOptions.processing_time
    assert config.spark == {}
    assert config.spark_defaults["spark.master"] == "local[2]"
    assert config.spark_defaults["spark.sql.shuffle.partitions"] == "2"
    assert config.spark_defaults["spark.ui.enabled"] == "false"


def test_user_file_overrides_defaults(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "user.toml",
        "acknowledgment_at_batch_index_level_enabled = true\n"
        "active_consumer_failover_delay_time_millis = 0\n"
        '[ingest]\ntrigger = "continuous"\n',
    )
    config = load_config(conf)
    assert config.settings.acknowledgment_at_batch_index_level_enabled is True
    assert config.settings.active_consumer_failover_delay_time_millis == 0
    assert config.settings.max_unacked_messages_per_consumer == 50000  # untouched: the default
    assert config.ingest["trigger"] == "continuous"
    assert config.ingest["processing_time"] == "3 seconds"
    assert config.source == conf


def test_spark_table_passes_through_as_spark_confs(tmp_path: Path) -> None:
    conf = write(
        tmp_path / "user.toml",
        "[spark]\n"
        'master = "local[4]"\n'
        "sql.shuffle.partitions = 8\n"
        '"sql.adaptive.enabled" = false\n'
        '"spark.executor.memory" = "4g"\n'
        'jars.packages = ["a:b:1", "c:d:2"]\n',
    )
    config = load_config(conf)
    assert config.spark == {
        "spark.master": "local[4]",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "false",
        "spark.executor.memory": "4g",
        "spark.jars.packages": "a:b:1,c:d:2",
    }
    local = config.spark_conf(local=True)
    assert local["spark.sql.shuffle.partitions"] == "8"  # the user's value wins
    assert local["spark.ui.enabled"] == "false"  # local tuning stays for a local master
    assert config.spark_conf(local=False) == config.spark  # a cluster gets only the user's settings


def test_unknown_keys_warn_and_are_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    conf = write(
        tmp_path / "user.toml",
        'max_unacked_mesages_per_consumer = 5\n[kafak]\nbootstrap = "x"\n[kafka]\nbootstrap = "y"\n',
    )
    with caplog.at_level(logging.WARNING, logger="ackstate.config"):
        config = load_config(conf)
    assert config.engine["max_unacked_mesages_per_consumer"] == 5
    assert config.tables == {"kafak": {"bootstrap": "x"}}
    assert config.kafka["bootstrap"] == "y"
    assert "unknown setting 'max_unacked_mesages_per_consumer'" in caplog.text
    assert "unknown table [kafak]" in caplog.text
    assert "unknown setting [kafka] 'bootstrap'" in caplog.text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('max_unacked_messages_per_consumer = "lots"\n', "must be an integer"),
        ("broker_deduplication_enabled = 1\n", "must be true or false"),
        ("max_unacked_messages_per_consumer = true\n", "must be an integer"),
        ('[ingest]\nmax_files_per_trigger = "10"\n', "[ingest] max_files_per_trigger"),
        ("spark = 3\n", "must be a table"),
        ("this is not toml\n", "is not valid TOML"),
    ],
)
def test_wrong_values_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(write(tmp_path / "bad.toml", text))


def test_missing_conf_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.toml")


def test_warehouse_flag_then_environment_then_config_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(write(tmp_path / "user.toml", '[ingest]\nwarehouse = "/data/from-conf"\n'))
    assert resolve_warehouse() == str(tmp_path / "warehouse")
    assert load_config().warehouse() == str(tmp_path / "warehouse")
    assert config.warehouse() == "/data/from-conf"
    monkeypatch.setenv("ACKSTATE_WAREHOUSE", "/data/from-env")
    assert config.warehouse() == "/data/from-env"
    assert config.warehouse("rel/wh") == str(tmp_path / "rel" / "wh")
    assert config.warehouse("s3a://bucket/wh/") == "s3a://bucket/wh"


def test_delta_jar_matches_the_pinned_python_package_and_the_pom() -> None:
    config = load_config()
    python_version = metadata.version("delta-spark")
    # the jar's major.minor must be the Python package's (4.4.1 has no jar; 4.4.0 is identical)
    assert config.delta["version"].split(".")[:2] == python_version.split(".")[:2]
    spark_minor = ".".join(metadata.version("pyspark").split(".")[:2])
    assert config.delta["artifact"] == f"delta-spark_{spark_minor}_2.13"
    pom = (conf_dir() / "delta-jars.pom").read_text()
    assert f"<delta.groupId>{config.delta['group']}</delta.groupId>" in pom
    assert f"<delta.artifactId>{config.delta['artifact']}</delta.artifactId>" in pom
    assert f"<delta.version>{config.delta['version']}</delta.version>" in pom


def test_deduplication_policies_by_topic_and_namespace(tmp_path: Path) -> None:
    from engine import EngineSettings

    conf = write(
        tmp_path / "dedup.toml",
        "broker_deduplication_enabled = false\n"
        "[deduplication]\n"
        '"persistent://acme/billing/invoices" = false\n'
        '"acme/billing" = true\n',
    )
    config = load_config(conf)
    assert config.engine["deduplication"] == {
        "persistent://acme/billing/invoices": False,
        "acme/billing": True,
    }
    settings = EngineSettings.from_config(config.engine)
    assert settings.deduplication_enabled("persistent://acme/billing/orders")  # the namespace's
    assert not settings.deduplication_enabled("persistent://acme/billing/invoices")  # the topic's
    assert not settings.deduplication_enabled("persistent://acme/other/orders")  # the broker's
    assert not settings.deduplication_enabled("non-persistent://acme/billing/orders")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('"acme/billing" = 1', "must be true or false"),
        ('"orders" = true', "give a persistent topic"),
        ('"non-persistent://acme/billing/x" = true', "give a persistent topic"),
        ('"persistent://acme/billing/x-partition-2" = true', "without -partition-N"),
    ],
)
def test_bad_deduplication_policies_are_one_line_errors(tmp_path: Path, entry: str, message: str) -> None:
    conf = write(tmp_path / "bad.toml", f"[deduplication]\n{entry}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(conf)


def test_a_py_files_zip_carries_its_conf(tmp_path: Path) -> None:
    """Under ``spark-submit --py-files ackstate.zip`` the packages come from the zip, and so does
    ``conf/``: unpacked beside it, with the same files as the checkout's."""
    root = conf_dir().parent
    archive = tmp_path / "ackstate.zip"
    subprocess.run(
        [sys.executable, "-m", "zipfile", "-c", str(archive), "engine", "udfs", "schemas", "jobs", "conf"],
        cwd=root, check=True,
    )  # fmt: skip
    probe = (
        f"import sys; sys.path.insert(0, {str(archive)!r})\n"
        "import jobs.platform.config as c\n"
        "print(c.__file__); print(c.conf_dir()); print(c.load_config().delta_coordinate)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].startswith(str(archive))
    unpacked = Path(out[1])
    assert sorted(p.name for p in unpacked.iterdir()) == sorted(p.name for p in conf_dir().iterdir())
    assert out[2] == load_config().delta_coordinate


def test_engine_settings_are_declared_once_in_engine_settings(tmp_path: Path) -> None:
    """The known top-level keys, their types and defaults are ``EngineSettings``' fields: a key
    the packaged TOML never names is still known, typed and passed to the engine."""
    from engine.settings import EngineSettings

    defaults = EngineSettings.conf_defaults()
    assert load_config().engine == {**defaults, "deduplication": {}}
    assert "deduplication" not in defaults and "implicit_consumers" not in defaults
    conf = write(tmp_path / "user.toml", "active_consumer_failover_consistent_hashing = true\n")
    assert load_config(conf).settings.active_consumer_failover_consistent_hashing is True
    with pytest.raises(ConfigError, match="active_consumer_failover_consistent_hashing"):
        load_config(write(tmp_path / "bad.toml", "active_consumer_failover_consistent_hashing = 1\n"))
