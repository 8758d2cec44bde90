"""``ackstate bootstrap`` against a real broker: start mid-life, and let the broker judge.

A broker serves subscriptions with holes, pending entries and a cumulative ack before the plugin's
capture begins (its first sink directory is never ingested: the events of that time are lost to
ackstate, as on a cluster that ran before ackstate existed). The broker restarts with the
capture going to a fresh directory (installing a plugin takes a restart), ``bootstrap`` reads
the admin API, the scenario goes on, and ackstate's answers after ingesting only the new
directory must equal the broker's, field by field, as in ``test_broker_judges``.

A second broker has token authentication on: a wrong token gets one clear sentence and writes
nothing, and the right one works without the token reaching a log line or a table.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from pyspark.sql import SparkSession

from jobs.ingest.bootstrap import QUERY_ID, AdminApi, bootstrap
from jobs.platform.broker import StandaloneBroker
from jobs.platform.errors import BootstrapError
from jobs.platform.tables import read_table
from schemas.tables import TABLES
from tests.pulsar.scenarios import Run, drain, produce, receive
from tests.pulsar.test_broker_judges import BROKER_CONF, JudgedRun, Snapshot, mismatches, settle, snapshot


def first_half(run: Run) -> list[pulsar.Consumer]:
    """Before the capture: holes across ledgers, pending entries, a Failover partitioned topic."""
    topic = run.topic("boot")
    exclusive = run.subscribe(topic, "exclusive", pulsar.ConsumerType.Exclusive, "bs-x")
    shared = run.subscribe(topic, "shared", pulsar.ConsumerType.Shared, "bs-s", receiver_queue_size=10)
    produce(run, topic, 25)
    held = receive(exclusive, 25)
    exclusive.acknowledge_cumulative(held[4])
    for i in (7, 12, 13, 20):
        exclusive.acknowledge(held[i])
    for i, m in enumerate(receive(shared, 10)):
        if i % 3 == 0:
            shared.acknowledge(m)
    parted = run.topic("boot-parts", partitions=2)
    failover = run.subscribe(parted, "failover", pulsar.ConsumerType.Failover, "bs-f")
    produce(run, parted, 12)
    for i, m in enumerate(drain(failover)):
        if i % 2 == 0:
            failover.acknowledge(m)
    time.sleep(0.5)  # the acks reach the broker before it stops
    return [exclusive, shared, failover]


def second_half(run: Run, consumers: list[pulsar.Consumer]) -> None:
    """After the bootstrap: what the broker redelivers, more acks, more messages."""
    for consumer in consumers:
        for i, m in enumerate(receive(consumer, 1, 20_000) + drain(consumer)):
            if i % 2 == 0:
                consumer.acknowledge(m)
    produce(run, run.names("boot")[0], 5)


@pytest.fixture(scope="module")
def bootstrapped(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[JudgedRun]:
    root = tmp_path_factory.mktemp("bootstrapped")
    before, sink, warehouse = root / "events-before", root / "events", root / "warehouse"
    with StandaloneBroker(root / "broker", sink_dir=before, conf=BROKER_CONF, quick_jit=True) as broker:
        run = Run(broker, prefix="bootstrap")
        try:
            run.scenario = "boot"
            consumers = first_half(run)
            broker.stop()
            broker.sink_dir = sink  # the capture begins with this start
            broker.start(wipe=False)
            deadline = time.monotonic() + 60
            while not all(c.is_connected() for c in consumers) and time.monotonic() < deadline:
                time.sleep(0.2)
            report = bootstrap(spark, warehouse, AdminApi(broker.web_url))
            assert set(run.names()) <= set(report.partitions)
            second_half(run, consumers)
            settle(sink)
            connected = snapshot(spark, run, sink, warehouse)
            for consumer in run.consumers:
                consumer.close()
            settle(sink)
            closed = snapshot(spark, run, sink, warehouse)
        finally:
            run.close()
    yield JudgedRun(run, connected, closed, warehouse)


@pytest.mark.parametrize("moment", ["connected", "closed"])
def test_bootstrapped_state_and_the_events_after_it_equal_the_brokers(
    bootstrapped: JudgedRun, moment: str
) -> None:
    found = mismatches(bootstrapped, moment)
    assert not found, "ackstate differs from the broker:\n" + found


def test_the_starting_state_is_written_by_the_bootstrap(spark: SparkSession, bootstrapped: JudgedRun) -> None:
    """The bootstrap wrote the ledgers and cursors; the ingest took over from there, on a state
    the events alone could not give (holes the first half left, which the broker still shows)."""
    name = bootstrapped.run.names("boot")[0]
    broker = bootstrapped.connected.broker[name]["cursors"]
    assert broker["exclusive"]["individuallyDeletedMessages"] != "[]"
    assert (
        broker["exclusive"]["markDeletePosition"]
        != bootstrapped.connected.broker[name]["cursors"]["shared"]["markDeletePosition"]
    )
    versions = read_table(spark, bootstrapped.warehouse, "ingest_batches").collect()
    assert QUERY_ID in {r["query_id"] for r in versions}
    assert read_table(spark, bootstrapped.warehouse, "rejected_events").count() == 0


def test_a_second_bootstrap_is_refused_once_events_were_applied(
    spark: SparkSession, bootstrapped: JudgedRun, tmp_path: Path
) -> None:
    taken: Snapshot = bootstrapped.closed
    api = _StaticApi(taken)
    with pytest.raises(BootstrapError, match="events have already changed the state of"):
        bootstrap(spark, bootstrapped.warehouse, api, [bootstrapped.run.names("boot")[0]])


class _StaticApi(AdminApi):
    """Never reached: the refusal comes from the warehouse, after the admin API was read."""

    def __init__(self, taken: Snapshot) -> None:
        super().__init__("http://127.0.0.1:9")
        object.__setattr__(self, "taken", taken)

    def get(self, path: str, *, missing_ok: bool = False) -> object:
        if path.endswith("/partitions"):
            return {"partitions": 0}
        if path.endswith("/stats"):
            return {"subscriptions": {"exclusive": {"type": "Exclusive"}}}
        return {
            "lastConfirmedEntry": "-1:-1",
            "ledgers": [],
            "cursors": {"exclusive": {"markDeletePosition": "-1:-1"}},
        }


# ---- a secured admin API ---------------------------------------------------------------------
def _jwt(subject: str, key: bytes) -> str:
    """An HS256 token, as `pulsar tokens create --secret-key` makes one."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256"}).encode()) + "." + part(json.dumps({"sub": subject}).encode())
    signature = hmac.new(key, head.encode(), hashlib.sha256).digest()
    return head + "." + part(signature)


def test_bootstrap_with_a_token_and_a_wrong_one(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    key = os.urandom(32)
    token = _jwt("admin", key)
    conf = {
        "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": "data:;base64," + base64.b64encode(key).decode(),
        "superUserRoles": "admin",
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": "token:" + token,
    }
    topic = "persistent://public/default/secured"
    warehouse = tmp_path / "warehouse"
    caplog.set_level(logging.DEBUG)
    with StandaloneBroker(tmp_path / "broker", conf=conf, admin_token=token, quick_jit=True) as broker:
        broker.admin("/admin/v2/persistent/public/default/secured", "PUT")
        broker.admin("/admin/v2/persistent/public/default/secured/subscription/audit", "PUT", {})
        wrong = _jwt("admin", os.urandom(32))
        for bad in (AdminApi(broker.web_url, wrong), AdminApi(broker.web_url)):
            with pytest.raises(BootstrapError, match=r"refused the request \(HTTP 401\)") as refused:
                bootstrap(spark, warehouse, bad, [topic])
            assert wrong not in str(refused.value)
        assert not warehouse.exists()  # nothing written

        report = bootstrap(spark, warehouse, AdminApi(broker.web_url, token), [topic])
    assert report.partitions == [topic] and report.subscriptions == 1
    cursors = read_table(spark, warehouse, "cursors").collect()
    assert [(r["topic"], r["subscription"]) for r in cursors] == [(topic, "audit")]
    every_row = "".join(str(read_table(spark, warehouse, name).collect()) for name in TABLES)
    out, err = capfd.readouterr()
    for text in (every_row, caplog.text, out, err):
        assert token not in text and wrong not in text
