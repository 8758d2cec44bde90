"""After a crash: what a partly written batch had read, and which of its appends are in.

A batch's output is a pure function of its events and the state it started from. A crashed run
may have committed some of a batch's writes; the re-run must then compute the same rows, so it
reads the versions of ``topic_partitions``, ``cursors`` and ``ledger_trims`` that the crashed
run read. Every commit of a batch carries them in its ``userMetadata``: ``<app id>:<batch id>
read cursors@7,ledger_trims@0,topic_partitions@9``.

The same tag makes a batch's appends (``ingest_batches``, ``rejected_events``, its new
``send_receipts``, ``active_consumer_changes``) exactly once: they carry no idempotent-write
pair (Delta 4.4 answers that check with a job over the table's whole log state, most of a small
append's cost), and the re-run of a batch skips the tables whose history already holds an
append (operation ``WRITE``) with its tag. Only the first batch of a run can repeat one an
earlier run began, so only it reads the history. The MERGEs keep the pair: a MERGE reads that
state for its file scan anyway.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.platform.rewrite import REWRITE_PREDICATE
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


def batch_of(metadata: str | None, app_id: str) -> int | None:
    """The batch id of a commit that app ``app_id`` made for one of its batches, from the
    commit's ``userMetadata`` (``read_tag``); None for any other commit."""
    match = _METADATA.match(metadata or "")
    if match is None:
        return None
    app, _, batch = match["tag"].rpartition(":")
    return int(batch) if app == app_id and batch.isdigit() else None


def read_versions(spark: SparkSession, warehouse: str) -> dict[str, int]:
    """The latest version of each table a batch reads, to read and to record."""
    return {name: latest_version(spark, warehouse, name) for name in READ_TABLES}


@dataclass(frozen=True)
class Recovery:
    """What a crashed run had committed of one batch: the versions it read (empty: none of its
    commits is in, read the latest) and the tables it appended to (skipped on the re-run)."""

    versions: dict[str, int]
    appended: frozenset[str]


NOTHING_WRITTEN = Recovery({}, frozenset())
"""A batch no earlier run committed any part of."""

APPEND_OPERATION = "WRITE"
"""The history ``operation`` of a DataFrameWriter append (a MERGE's is ``MERGE``). A rewrite
(``jobs.platform.rewrite``) is a ``WRITE`` too, told apart by its ``predicate``."""


def recover(spark: SparkSession, warehouse: str, tag: str) -> Recovery:
    """What a crashed run committed of batch ``tag``, from every table's recent history.

    Its commits carry the versions it read (``read_tag``); commits of an older ackstate carry
    the bare tag, and then the state tables are read just before the batch's first commit to
    them.
    """
    from delta.tables import DeltaTable

    earliest: dict[str, int] = {}
    read: dict[str, int] | None = None
    appended: set[str] = set()
    for name in TABLES:
        path = table_path(warehouse, name)
        if not DeltaTable.isDeltaTable(spark, path):
            continue
        history = DeltaTable.forPath(spark, path).history(100)
        for row in history.select("version", "operation", "operationParameters", "userMetadata").collect():
            match = _METADATA.match(row["userMetadata"] or "")
            if match is None or match["tag"] != tag:
                continue
            predicate = (row["operationParameters"] or {}).get("predicate") or ""
            if row["operation"] == APPEND_OPERATION and REWRITE_PREDICATE not in predicate:
                appended.add(name)
            if match["versions"]:
                read = read or {
                    table: int(version)
                    for table, version in (item.split("@") for item in match["versions"].split(","))
                }
            elif name in STATE_TABLES:
                earliest[name] = min(earliest.get(name, row["version"]), row["version"])
    versions = read if read is not None else {name: version - 1 for name, version in earliest.items()}
    if versions or appended:
        log.info(
            "batch %s was partly written before a restart: reading %s; appended before: %s",
            tag,
            versions or "the latest versions",
            ", ".join(sorted(appended)) or "nothing",
        )
    return Recovery(versions, frozenset(appended))
