"""A real Pulsar broker feeds ackstate through the plugin, and then judges ackstate's answers.

One standalone broker (with ``acknowledgmentAtBatchIndexLevelEnabled``, ten entries per ledger,
and deduplication on in ``public/dedup``) plays every scenario of ``scenarios.py``. The plugin's
files are ingested by the real streaming job, and ackstate's ``stats`` / ``internal-stats`` are
compared with the admin API field by field (``judge.py``): first while the consumers are still
connected, then again after they all closed (a second ingest of the files written since).
A second broker is restarted in the middle of its scenario, then killed and started again; the
two brokers play side by side (``side_by_side``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from engine.partition import EngineSettings
from jobs.ingest.batch import BatchWriter
from jobs.ingest.options import IngestOptions
from jobs.ingest.query import start_ingest
from jobs.platform.broker import StandaloneBroker
from jobs.platform.tables import read_table
from jobs.read.stats import read_internal_stats, read_stats
from tests.pulsar import scenarios
from tests.pulsar.judge import ackstate_view, broker_view, differences
from tests.pulsar.scenarios import DEDUP_NAMESPACE, Run, make_dedup_namespace

BROKER_CONF = {
    "acknowledgmentAtBatchIndexLevelEnabled": "true",
    # keep every ledger: retention deletes a ledger no cursor needs (one written before the first
    # subscription), which no hook shows; ackstate mirrors that with `compact --trim-ledgers-before`
    "defaultRetentionTimeInMinutes": "-1",
    "defaultRetentionSizeInMB": "-1",
    "managedLedgerMaxEntriesPerLedger": "10",
    "managedLedgerMinLedgerRolloverTimeMinutes": "0",
    "ackstateFileMaxMillis": "200",
    "subscriptionExpiryCheckIntervalInMinutes": "1",  # scenarios.inactive_subscription's, at least 1
    # the inactive-topic GC (off in StandaloneBroker) looks every 2 s, and deletes only a topic
    # whose own policy allows it (scenarios.deleted_topics'): the others would need an hour
    # without a subscription
    "brokerDeleteInactiveTopicsEnabled": "true",
    "brokerDeleteInactiveTopicsFrequencySeconds": "2",
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": "3600",
}
SETTINGS = EngineSettings(
    acknowledgment_at_batch_index_level_enabled=True, deduplication={DEDUP_NAMESPACE: True}
)
SETTLE_SECONDS = 1.5  # the client groups acks for 100 ms; the plugin rolls its file every 200 ms


def settle(sink: Path, not_before: float = 0.0) -> None:
    """Wait until the broker has applied what the clients sent and the plugin's files are complete."""
    time.sleep(max(SETTLE_SECONDS, not_before - time.monotonic()))
    deadline = time.monotonic() + 30
    while any(sink.glob(".*")) and time.monotonic() < deadline:
        time.sleep(0.2)


def ingest(spark: SparkSession, sink: Path, warehouse: Path) -> None:
    """``ackstate ingest --trigger available-now`` over the plugin's directory, in this session."""
    options = IngestOptions(source=str(sink), warehouse=warehouse, settings=SETTINGS)
    query = start_ingest(spark, options, BatchWriter(options))
    query.awaitTermination()
    assert query.exception() is None, query.exception()


@dataclass
class Snapshot:
    """The broker's and ackstate's views of every scenario topic partition at one moment."""

    broker: dict[str, dict[str, Any]]
    ackstate: dict[str, dict[str, Any]]


def snapshot(spark: SparkSession, run: Run, sink: Path, warehouse: Path) -> Snapshot:
    names = run.names()
    broker = {n: broker_view(run.broker, n) for n in names}
    ingest(spark, sink, warehouse)
    stats = read_stats(spark, warehouse, None, None, None)
    internal = read_internal_stats(spark, warehouse, None, None, None)
    return Snapshot(broker, {n: ackstate_view(stats, internal, n) for n in names})


@dataclass
class JudgedRun:
    run: Run
    connected: Snapshot
    closed: Snapshot
    warehouse: Path


def judge(
    spark: SparkSession, run: Run, plays: tuple[Callable[[Run], None], ...], sink: Path, warehouse: Path
) -> JudgedRun:
    """Play, then take both snapshots: consumers connected, and after every one of them closed."""
    try:
        run.play_all(plays)
        settle(sink, run.deadline)
        connected = snapshot(spark, run, sink, warehouse)
        for consumer in run.consumers:
            consumer.close()
        settle(sink)
        closed = snapshot(spark, run, sink, warehouse)
    except (OSError, RuntimeError) as exc:
        # the broker's directory goes with the test's: its warnings travel with the error
        raise RuntimeError(
            f"{exc!r} while judging; the broker's last warnings:\n{run.broker.log_warnings()}"
        ) from exc
    finally:
        run.close()
    return JudgedRun(run, connected, closed, warehouse)


def judged_run(spark: SparkSession, root: Path) -> JudgedRun:
    """Every scenario of ``SCENARIOS`` on one broker, judged."""
    sink, warehouse = root / "events", root / "warehouse"
    with StandaloneBroker(root / "broker", sink_dir=sink, conf=BROKER_CONF, quick_jit=True) as broker:
        make_dedup_namespace(broker)
        return judge(spark, Run(broker, prefix="judge"), scenarios.SCENARIOS, sink, warehouse)


def restarted_run(spark: SparkSession, root: Path) -> JudgedRun:
    """A broker restarted in the middle of its scenario (its own broker: the restart ends all)."""
    sink, warehouse = root / "events", root / "warehouse"
    # every ack persisted at once (Pulsar limits it to one mark-delete a second): what the killed
    # broker recovers is what it had applied
    conf = {**BROKER_CONF, "managedLedgerDefaultMarkDeleteRateLimit": "0"}
    with StandaloneBroker(root / "broker", sink_dir=sink, conf=conf, quick_jit=True) as broker:
        play = (scenarios.restart_in_the_middle,)
        return judge(spark, Run(broker, prefix="restart"), play, sink, warehouse)


@pytest.fixture(scope="module")
def side_by_side(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[JudgedRun]]]:
    """Both brokers' runs, started together when the first test needs one, each in a thread of
    its own.

    Each run spends much of its time waiting on its broker (receive timeouts, a TTL, the
    restarted broker's topics loading again), so side by side the two took 62 s where one after
    the other took 104 s (this module alone, 2026-12-08). Their ingests are Spark jobs of the one
    session, beside each other's. ``judged`` and ``restarted`` each wait for their own run: a
    failed run fails its own tests only. ``test_bootstrap``'s broker stays apart: as a third
    beside these two, the three runs took as long as one after the other."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="broker-run") as pool:
        yield {
            "judged": pool.submit(judged_run, spark, tmp_path_factory.mktemp("judged")),
            "restarted": pool.submit(restarted_run, spark, tmp_path_factory.mktemp("restarted")),
        }


@pytest.fixture(scope="module")
def judged(side_by_side: dict[str, Future[JudgedRun]]) -> JudgedRun:
    return side_by_side["judged"].result()


SCENARIO_NAMES = [s.__name__ for s in scenarios.SCENARIOS]


def mismatches(run: JudgedRun, moment: str, scenario: str | None = None) -> str:
    """Every field where ackstate differs from the broker at ``moment`` (none: an empty string)."""
    taken: Snapshot = getattr(run, moment)
    return "\n".join(
        f"{name}{line}"
        for name in run.run.names(scenario)
        for line in differences(taken.broker[name], taken.ackstate[name])
    )


@pytest.mark.parametrize("moment", ["connected", "closed"])
@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_state_equals_the_brokers(judged: JudgedRun, scenario: str, moment: str) -> None:
    """``connected``: consumers still attached; ``closed``: after every consumer closed."""
    found = mismatches(judged, moment, scenario)
    assert not found, "ackstate differs from the broker:\n" + found


@pytest.fixture(scope="module")
def restarted(side_by_side: dict[str, Future[JudgedRun]]) -> JudgedRun:
    return side_by_side["restarted"].result()


@pytest.mark.parametrize("moment", ["connected", "closed"])
def test_state_equals_the_brokers_across_a_broker_restart(restarted: JudgedRun, moment: str) -> None:
    found = mismatches(restarted, moment)
    assert not found, "ackstate differs from the broker:\n" + found


def test_seq_keeps_increasing_across_a_broker_restart(spark: SparkSession, restarted: JudgedRun) -> None:
    """The plugin's seq of the restarted broker continues above the first run's: nothing is stale."""
    rows = read_table(spark, restarted.warehouse, "rejected_events").collect()
    assert [(r["reason"], r["raw"]) for r in rows] == []


@pytest.mark.parametrize("producer", ["dd-producer", "del-producer", "gc-producer"])
def test_dedup_receipts_equal_what_the_producer_was_answered(
    spark: SparkSession, judged: JudgedRun, producer: str
) -> None:
    """ackstate's verdict on each resent sequence id is the receipt the broker sent the client
    (``del-producer`` and ``gc-producer`` send their ids again to a topic made again after its
    deletion: new to it)."""
    rows = (
        read_table(spark, judged.warehouse, "send_receipts").where(f"producer_name = '{producer}'").collect()
    )
    ours = sorted((r["sequence_id"], r["receipt"]) for r in rows)
    theirs = sorted(judged.run.receipts[producer])
    assert ours == theirs


def test_batched_dedup_receipts_equal_what_the_producer_was_answered(
    spark: SparkSession, judged: JudgedRun
) -> None:
    """A batch is one send: ackstate's verdict on each batch, in the order they were sent, is
    the receipt the client got for the batch's messages."""
    rows = (
        read_table(spark, judged.warehouse, "send_receipts").where("producer_name = 'ddb-producer'").collect()
    )
    ours = [(r["sequence_id"], r["receipt"]) for r in sorted(rows, key=lambda r: r["seq"])]
    assert ours == judged.run.receipts["ddb-producer"]
    assert [r["dedup_status"] for r in sorted(rows, key=lambda r: r["seq"])] == [
        "NotDup", "NotDup", "Dup", "NotDup", "NotDup"
    ]  # fmt: skip


def test_the_brokers_stream_has_no_rejected_event(spark: SparkSession, judged: JudgedRun) -> None:
    """Every event the plugin wrote is one ackstate accepts, but the ack commands that
    ``ack_beyond_last_entry`` sends on purpose: the broker refuses their last id too, and
    ackstate records the refusal (``ack_beyond_last_published``), one per subscription."""
    rows = read_table(spark, judged.warehouse, "rejected_events").collect()
    provoked = [
        r for r in rows if r["topic"].endswith("-ack-beyond") and r["reason"] == "ack_beyond_last_published"
    ]
    assert [(r["reason"], r["raw"]) for r in rows if r not in provoked] == []
    assert sorted(r["subscription"] for r in provoked) == ["exclusive", "shared"]
