"""``ackstate bootstrap``: start from the state a running cluster already has.

A platform team installs the plugin on brokers that have served subscriptions for years. The
events the plugin captures from then on are applied on top of a starting state read from the
Pulsar admin REST API (``engine.bootstrap`` says what it shows and what it does not):

1. the topic partitions: the ``--topic`` names (short names as ``pulsar-admin`` reads them; a
   partitioned topic's partitions from its metadata), or every topic of every namespace
   (system topics, ``__...``, left out);
2. per partition, ``stats`` and (persistent topics) ``internalStats``, all read before the
   warehouse is touched, so an unreachable or refusing admin API writes nothing;
3. the state each partition has in the warehouse: a partition an ingest batch has written is
   refused (events already changed it); one only a bootstrap wrote is bootstrapped again,
   which makes the command idempotent and lets it catch up before the first ingest;
4. the rows, written by the ingest's own batch writer under the query id ``ackstate-bootstrap``.

Production admin APIs are secured: a token comes from ``--token-file`` or ``$ACKSTATE_ADMIN_TOKEN``
(never the command line, where ``ps`` shows it), a private CA from ``--tls-ca-file``. The token
is sent as ``Authorization: Bearer``, as ``pulsar-admin --auth-plugin
...AuthenticationToken`` sends it, and appears in no log line, error or table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import Cursor, Ledgers, PartitionState
from engine.bootstrap import partition_from_admin
from engine.errors import SnapshotError
from engine.topic import admin_path, complete_name, is_persistent, partition_name, split_partition
from jobs.platform.errors import BootstrapError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("ackstate.bootstrap")

TOKEN_ENV = "ACKSTATE_ADMIN_TOKEN"
QUERY_ID = "ackstate-bootstrap"
"""The ``query_id`` of every row a bootstrap writes: how a later bootstrap knows it may
rewrite a partition (no ingest batch has written it)."""
DOMAINS = ("persistent", "non-persistent")


@dataclass(frozen=True)
class AdminApi:
    """GET requests to a Pulsar admin REST API (``webServiceUrl``), JSON answers."""

    url: str
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout: float = 30.0

    def get(self, path: str, *, missing_ok: bool = False) -> Any:
        """The decoded answer to ``GET path``; None for a 404 when ``missing_ok``."""
        request = urllib.request.Request(self.url.rstrip("/") + path)
        request.add_header("Accept", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        context = ssl.create_default_context(cafile=self.ca_file) if self.url.startswith("https") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and missing_ok:
                return None
            if exc.code in (401, 403):
                given = (
                    "the token given" if self.token else "no token (set --token-file or $" + TOKEN_ENV + ")"
                )
                raise BootstrapError(
                    f"the admin API at {self.url} refused the request (HTTP {exc.code}) with {given}"
                ) from None
            raise BootstrapError(f"GET {self.url}{path}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BootstrapError(f"cannot reach the admin API at {self.url}: {reason}") from None
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:
            raise BootstrapError(f"GET {self.url}{path}: the answer is not JSON") from None


def read_token(token_file: str | None) -> str | None:
    """The token from ``token_file``, else ``$ACKSTATE_ADMIN_TOKEN``, else None."""
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as exc:
            # the path is not echoed: a token pasted where its file belongs would be shown
            raise BootstrapError(
                f"cannot read the token file given with --token-file: {exc.strerror}"
            ) from None
        if not token:
            raise BootstrapError("the token file given with --token-file is empty")
        return token
    return os.environ.get(TOKEN_ENV) or None


def discover(api: AdminApi, topics: Sequence[str]) -> list[tuple[str, int]]:
    """The (topic, partition) pairs to bootstrap, sorted."""
    found: set[tuple[str, int]] = set()
    if topics:
        for name in topics:
            topic, partition = split_partition(complete_name(name))
            if partition is not None:
                found.add((topic, partition))
                continue
            meta = api.get(admin_path(topic) + "/partitions", missing_ok=True) or {}
            count = int(meta.get("partitions") or 0)
            found.update((topic, i) for i in range(count)) if count else found.add((topic, -1))
        return sorted(found)
    for tenant in api.get("/admin/v2/tenants") or []:
        for namespace in api.get(f"/admin/v2/namespaces/{tenant}") or []:
            for domain in DOMAINS:
                for name in api.get(f"/admin/v2/{domain}/{namespace}", missing_ok=True) or []:
                    if name.rsplit("/", 1)[-1].startswith("__"):
                        continue  # Pulsar's system topics (topic policies, transactions)
                    topic, partition = split_partition(name)
                    found.add((topic, -1 if partition is None else partition))
    return sorted(found)


def snapshot(api: AdminApi, topic: str, partition: int) -> PartitionState:
    """One partition's starting state from its ``stats`` and ``internalStats``."""
    name = partition_name(topic, partition)
    stats = api.get(admin_path(name) + "/stats")
    internal = api.get(admin_path(name) + "/internalStats") if is_persistent(topic) else None
    try:
        return partition_from_admin(topic, partition, stats or {}, internal)
    except SnapshotError as exc:
        raise BootstrapError(str(exc)) from None


@dataclass
class BootstrapReport:
    partitions: list[str]
    subscriptions: int
    ledgers: int
    rebootstrapped: list[str]

    def format_text(self, url: str) -> str:
        again = f" ({len(self.rebootstrapped)} again)" if self.rebootstrapped else ""
        return (
            f"bootstrapped {len(self.partitions)} topic partition(s){again}, "
            f"{self.subscriptions} subscription(s), {self.ledgers} ledger(s) from {url}"
        )


def bootstrap(
    spark: SparkSession, warehouse: str, api: AdminApi, topics: Sequence[str] = ()
) -> BootstrapReport:
    """Read the cluster's state and write it as the warehouse's starting state."""
    import pyarrow as pa

    from jobs.ingest.batch import BatchWriter
    from jobs.ingest.options import IngestOptions
    from jobs.platform.tables import ensure_tables
    from schemas.udf import APPLY_OUTPUT
    from udfs.bootstrap import bootstrap_rows

    keys = discover(api, topics)
    if not keys:
        raise BootstrapError(f"the admin API at {api.url} shows no topic to bootstrap")
    states = {key: snapshot(api, *key) for key in keys}
    log.info("read the state of %d topic partition(s) from %s", len(states), api.url)

    ensure_tables(spark, warehouse)
    before = _bootstrapped_before(spark, warehouse, keys)
    tables = []
    for key, state in states.items():
        encoded, ledgers = before.get(key, ({}, None))
        gone = sorted(set(encoded) - set(state.cursors))
        if gone:
            raise BootstrapError(
                f"{partition_name(*key)}: subscription(s) {', '.join(gone)} were bootstrapped before "
                "and are gone from the broker; bootstrap a new warehouse"
            )
        tables.append(bootstrap_rows(state, encoded, ledgers))
    out = spark.createDataFrame(pa.concat_tables(tables).to_pandas(), APPLY_OUTPUT)
    writer = BatchWriter(IngestOptions(source="", warehouse=warehouse, query_id=QUERY_ID))
    # a version above every earlier bootstrap's: Delta skips a (app id, version) it has seen
    writer.write_output(spark, out, int(time.time() * 1000))
    return BootstrapReport(
        partitions=[partition_name(*k) for k in keys],
        subscriptions=sum(len(s.cursors) for s in states.values()),
        ledgers=sum(len(s.ledgers) for s in states.values()),
        rebootstrapped=[partition_name(*k) for k in keys if k in before],
    )


def _bootstrapped_before(
    spark: SparkSession, warehouse: str, keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], tuple[dict[str, bytes], Ledgers | None]]:
    """The state earlier bootstraps wrote for ``keys`` (encoded cursors, ledgers); refuses a
    partition that an ingest batch (any other writer) has written."""
    from jobs.platform.tables import local_frame, read_table

    wanted = local_frame(spark, sorted(keys), "topic string, partition int")
    rows: dict[tuple[str, int], tuple[dict[str, bytes], Ledgers | None]] = {}
    written_by: dict[tuple[str, int], set[str]] = {}
    for row in (
        read_table(spark, warehouse, "topic_partitions").join(wanted, ["topic", "partition"], "left_semi")
    ).collect():
        key = (row["topic"], row["partition"])
        written_by.setdefault(key, set()).add(row["query_id"])
        rows[key] = ({}, Ledgers.decode(bytes(row["ledgers"])) if row["ledgers"] else None)
    for row in (
        read_table(spark, warehouse, "cursors").join(wanted, ["topic", "partition"], "left_semi")
    ).collect():
        key = (row["topic"], row["partition"])
        written_by.setdefault(key, set()).add(row["query_id"])
        encoded = rows.setdefault(key, ({}, None))[0]
        if row["state"] is not None:
            Cursor.decode(bytes(row["state"]))  # a state this version cannot read fails here
            encoded[row["subscription"]] = bytes(row["state"])
    changed = sorted(partition_name(*k) for k, ids in written_by.items() if ids - {QUERY_ID})
    if changed:
        raise BootstrapError(
            f"events have already changed the state of {', '.join(changed[:5])}"
            + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            + "; bootstrap only starts a warehouse, it never overwrites what the ingest wrote"
        )
    return rows


# ---- command line ---------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    """``ackstate bootstrap``."""
    from jobs.platform.session import get_spark

    if not args.admin_url:
        raise BootstrapError(
            "--admin-url URL is required (the broker's web service, e.g. http://broker:8080)"
        )
    api = AdminApi(args.admin_url, read_token(args.token_file), args.tls_ca_file)
    spark = get_spark(args.config)
    report = bootstrap(spark, args.warehouse, api, args.topic or ())
    print(report.format_text(args.admin_url))
    return 0
