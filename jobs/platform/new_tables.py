"""New Delta tables created as Delta's table builder created the first of their kind.

Why: ``DeltaTableBuilder.execute`` runs Delta's ``CreateDeltaTableCommand``, which plans,
validates and commits the table through Spark SQL. A new warehouse's 14 tables took 11-15 s that
way in a new JVM and 5.5 s in one that had run a few small ingests; committed as below, 0.3 s
(README, "Benchmarks"). Every `ackstate demo`, first ingest and most tests start there.

What the builder commits as a table's first version is a function of what it is given (the
schema, the clustering columns, the table properties) and of the session's Delta settings and
the Spark and Delta versions: its ``protocol``, ``metaData`` and ``domainMetadata`` actions,
and a ``CREATE TABLE`` commit that carries them. A ``NewTable`` keeps those actions, but for
what is new in every table (its id and creation time), under a key made of all of that
(``model_key``). A later table with the same key, in a location that does not exist yet, is
the same actions committed by Delta's own transaction (``OptimisticTransaction.commit``) with a
new id and time, as the same operation: Delta writes the commit, its checksum and its snapshot
as for the builder's. The models are kept in the process and in the jar cache
(``model_store``), so that a new process creates its first warehouse that way too; a model that
cannot be read there is made again by the builder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.platform.jars import jars_root
from jobs.platform.java import jvm_class, scala_items, scala_seq

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("ackstate.tables")

CreationSettings = tuple[tuple[str, str], ...]
"""The Spark and Delta versions and the session's Delta settings, sorted: what, besides its own
definition, decides what the builder commits for a table."""

DELTA_SETTINGS_PREFIX = "spark.databricks.delta."
"""Where Delta's settings live."""

PER_COMMIT_SETTINGS = ("spark.databricks.delta.write.", "spark.databricks.delta.lastCommitVersionInSession")
"""Delta settings that change with each write, not with how a table is created: the
idempotent-write pair a writer sets, and the version Delta notes after each commit."""


def creation_settings(spark: SparkSession) -> CreationSettings:
    """``CreationSettings`` of the session now: its table property defaults, protocol versions
    and feature switches among them."""
    delta = str(jvm_class(spark._jvm, "io.delta.package").VERSION())  # type: ignore[attr-defined]
    settings = [
        (key, value)
        for key, value in spark.conf.getAll.items()
        if key.startswith(DELTA_SETTINGS_PREFIX) and not key.startswith(PER_COMMIT_SETTINGS)
    ]
    return tuple(sorted([*settings, ("version:spark", spark.version), ("version:delta", delta)]))


def model_key(name: str, definition: dict[str, Any], settings: CreationSettings) -> str:
    """The key of table ``name``'s model: its ``definition`` (what the builder is given) and
    the ``settings`` it is created under, hashed."""
    text = json.dumps({"table": name, "definition": definition, "settings": settings}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class NewTable:
    """What the builder committed as a table's first version, but for its id and times."""

    protocol: str
    """The ``protocol`` action, as Delta's JSON."""
    metadata: dict[str, Any]
    """The ``metaData`` action's fields, without ``id`` and ``createdTime``."""
    domains: tuple[str, ...]
    """The ``domainMetadata`` actions (clustering's columns), as Delta's JSON."""


_MODELS: dict[str, NewTable] = {}
"""The models this process made or read, by ``model_key`` (single item reads and writes of a
dictionary need no lock between the threads that create a warehouse's tables)."""


def model_store() -> Path:
    """Where models are kept between processes: beside the jars of the cache they come from."""
    return jars_root() / "table-models"


def find_model(key: str) -> NewTable | None:
    """The model of ``key``, from this process or from ``model_store``; None when there is none
    (or the stored one cannot be read: the builder then makes it again)."""
    model = _MODELS.get(key)
    if model is not None:
        return model
    try:
        stored = json.loads((model_store() / f"{key}.json").read_text())
        model = NewTable(stored["protocol"], dict(stored["metadata"]), tuple(stored["domains"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    _MODELS[key] = model
    return model


def keep_model(spark: SparkSession, key: str, snapshot: Any) -> None:
    """Keep the first version the builder just committed (``snapshot``, a JVM ``Snapshot``) as
    the model of ``key``: in this process, and in ``model_store`` where it can be written."""
    metadata = json.loads(snapshot.metadata().json())["metaData"]
    for field in ("id", "createdTime"):
        metadata.pop(field, None)
    domains = tuple(d.json() for d in scala_items(spark._jvm, snapshot.domainMetadata()))  # type: ignore[attr-defined]
    model = NewTable(snapshot.protocol().json(), metadata, domains)
    _MODELS[key] = model
    store = model_store()
    try:  # a whole file or none: written aside, then renamed
        store.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=store, suffix=".tmp", delete=False) as file:
            json.dump(asdict(model), file)
        os.replace(file.name, store / f"{key}.json")
    except OSError as error:
        log.debug("table model %s not kept in %s: %s", key, store, error)


def forget_models(*, stored: bool = True) -> None:
    """Drop this process's models and, with ``stored``, those in ``model_store``: the next table
    of each kind goes through the builder."""
    _MODELS.clear()
    if stored:
        for path in model_store().glob("*.json"):
            path.unlink(missing_ok=True)


def commit_like(spark: SparkSession, table_log: Any, model: NewTable, clustering: Sequence[str]) -> bool:
    """Create the table of ``table_log`` (its ``DeltaLog``) as ``model`` says, as the builder's
    ``CREATE TABLE`` clustered by ``clustering``; False when the table exists already (another
    writer created it first). Delta's error when another writer commits the first version at
    the same moment is raised: the caller finds that table then."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    action = jvm_class(jvm, "org.apache.spark.sql.delta.actions.Action")
    fields = {**model.metadata, "id": str(uuid.uuid4()), "createdTime": int(time.time() * 1000)}
    metadata = action.fromJson(json.dumps({"metaData": fields}))
    actions = [metadata, action.fromJson(model.protocol), *(action.fromJson(d) for d in model.domains)]
    option = jvm_class(jvm, "scala.Option")
    create = jvm_class(jvm, "org.apache.spark.sql.delta.DeltaOperations$CreateTable")(
        metadata, False, False, option.apply(scala_seq(jvm, list(clustering)))
    )
    txn = table_log.startTransaction()
    if int(txn.readVersion()) >= 0:
        return False
    txn.commit(scala_seq(jvm, actions), create)
    return True
