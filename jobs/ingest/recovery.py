"""After a crash: which versions of the state tables a partly written batch had read.

A batch's output is a pure function of its events and the state it started from, and each of
its writes is idempotent on (app id, batch id). A crashed run may have committed some of a
batch's writes; the re-run must then compute the same rows, so it reads the versions of
``topic_partitions``, ``cursors`` and ``ledger_trims`` that the crashed run read. Every commit
of a batch carries them in its ``userMetadata``: ``<app id>:<batch id> read
cursors@7,ledger_trims@0,topic_partitions@9``.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from jobs.platform.tables import latest_version, table_path
from schemas.tables import TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("ackstate.ingest")

STATE_TABLES = ("topic_partitions", "cursors")
READ_TABLES = (*STATE_TABLES, "ledger_trims")
"""What a batch reads besides its events; the versions it read go into its commits' metadata."""
_METADATA = re.compile(r"^(?P<tag>\S+)(?: read (?P<versions>\S+))?$")


def read_tag(tag: str, versions: dict[str, int]) -> str:
    """The ``userMetadata`` of a batch's commits: its tag and the versions it read."""
    return f"{tag} read " + ",".join(f"{name}@{versions[name]}" for name in sorted(versions))


def read_versions(spark: SparkSession, warehouse: str) -> dict[str, int]:
    """The latest version of each table a batch reads, to read and to record."""
    return {name: latest_version(spark, warehouse, name) for name in READ_TABLES}


def pinned_versions(spark: SparkSession, warehouse: str, tag: str) -> dict[str, int]:
    """If a crashed run already committed part of batch ``tag``, the versions it read; else {}.

    Its commits carry them (``read_tag``); commits of an older ackstate carry the bare tag,
    and then the state tables are read just before the batch's first commit to them.
    """
    from delta.tables import DeltaTable

    earliest: dict[str, int] = {}
    for name in TABLES:
        path = table_path(warehouse, name)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        for row in DeltaTable.forPath(spark, path).history(100).select("version", "userMetadata").collect():
            match = _METADATA.match(row["userMetadata"] or "")
            if match is None or match["tag"] != tag:
                continue
            if match["versions"]:
                pinned = {
                    table: int(version)
                    for table, version in (item.split("@") for item in match["versions"].split(","))
                }
                log.info("batch %s was partly written before a restart: reading %s", tag, pinned)
                return pinned
            if name in STATE_TABLES:
                earliest[name] = min(earliest.get(name, row["version"]), row["version"])
    pinned = {name: version - 1 for name, version in earliest.items()}
    if pinned:
        log.info("batch %s was partly written before a restart: reading %s", tag, pinned)
    return pinned
