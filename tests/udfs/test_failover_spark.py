"""The active-consumer UDF on real Spark over a real Delta ``consumers`` table.

The table is filled the way the scenarios' events leave it (every checkpoint of the Failover
scenarios as its own topic copy, as the scenario runner lays them out), and the UDF's pick must
be each checkpoint's ``activeConsumerName``; a random many-subscription table must agree with
``engine.failover.select_active`` subscription by subscription, for both settings.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from engine.failover import FailoverSettings, dispatcher_partition_index, select_active
from engine.topic import partition_name
from jobs.platform.tables import read_table, table_path
from schemas.tables import CONSUMERS
from tests.schemas.shared_tools import load_scenario
from udfs.failover import active_consumers

SCENARIOS = (
    "v34-failover-add-remove-consumer",
    "v35-failover-partitioned-consumer-events",
    "failover-partitioned-priority-groups",
    "failover-non-partitioned-top-priority",
)

pytestmark = pytest.mark.spark  # needs the run's Spark session (JVM)


def _consumer_row(topic: str, partition: int, event: dict[str, Any], at: int, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {f.name: None for f in CONSUMERS.fields}
    row.update(
        topic=topic,
        partition=partition,
        subscription=event["subscription"],
        consumer_id=event["consumer_id"],
        consumer_name=event["consumer_name"],
        sub_type=event["sub_type"],
        priority_level=event.get("priority_level", 0),
        connected=True,
        subscribed_at=at,
    )
    row.update(kw)
    return row


def _scenario_tables() -> tuple[list[dict[str, Any]], dict[tuple[str, int, str], str]]:
    """``consumers`` rows after each checkpoint, and the expected active consumer's name."""
    rows: list[dict[str, Any]] = []
    expected: dict[tuple[str, int, str], str] = {}
    for name in SCENARIOS:
        scenario = load_scenario(name)
        done: set[int] = set()
        for checkpoint in scenario["checkpoints"]:
            after = checkpoint["after"]
            topic = f"{scenario['topic']}-cp{after}"  # the runner's copy of this checkpoint
            active = checkpoint.get("stats", {}).get("subscriptions", {}).get("sub", {})
            if "activeConsumerName" in active:
                partition = checkpoint.get("partition", scenario["partition"])
                expected[(topic, partition, "sub")] = active["activeConsumerName"]
            if after in done:
                continue
            done.add(after)
            # (partition, consumer_id) -> row; a reconnect would be a new subscribed_at
            table: dict[tuple[int, int], dict[str, Any]] = {}
            for i, event in enumerate(scenario["events"][:after], start=1):
                at = 1_000_000 + 1000 * (i - 1)  # the runner's event_time
                partition = event.get("partition", scenario["partition"])
                key = (partition, event.get("consumer_id", -1))
                if event["type"] == "SUBSCRIBE":
                    table[key] = _consumer_row(topic, partition, event, at)
                elif event["type"] == "CLOSE_CONSUMER" and key in table and table[key]["connected"]:
                    table[key].update(connected=False, closed_at=at)
            rows.extend(table.values())
    return rows, expected


def _write_and_read(spark: SparkSession, warehouse: Path, rows: list[dict[str, Any]]) -> Any:
    spark.createDataFrame(rows, CONSUMERS).write.format("delta").mode("overwrite").save(
        table_path(warehouse, "consumers")
    )
    return read_table(spark, warehouse, "consumers")


def test_udf_picks_the_scenarios_active_consumers(spark: SparkSession, warehouse: Path) -> None:
    rows, expected = _scenario_tables()
    consumers = _write_and_read(spark, warehouse, rows)
    out = active_consumers(consumers, FailoverSettings()).collect()
    assert len(out) == len(rows)  # one row out per consumer row in

    names = {
        (r["topic"], r["partition"], r["subscription"], r["consumer_id"]): r["consumer_name"] for r in rows
    }
    picked: dict[tuple[str, int, str], list[str]] = {}
    for r in out:
        if r["is_active"]:
            key = (r["topic"], r["partition"], r["subscription"])
            picked.setdefault(key, []).append(names[(*key, r["consumer_id"])])
    assert {k: picked.get(k) for k in expected} == {k: [v] for k, v in expected.items()}
    # a subscription with connected consumers has exactly one active consumer
    connected = {(r["topic"], r["partition"], r["subscription"]) for r in rows if r["connected"]}
    assert set(picked) == connected
    assert all(len(v) == 1 for v in picked.values())


def _random_consumers(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for t in range(12):
        topic = f"{'non-' if t % 5 == 4 else ''}persistent://bench/ns/t{t}"
        for partition in [-1] if t % 2 else range(3):
            for s in range(rng.randrange(1, 5)):
                sub_type = rng.choice(["Failover", "Failover", "Failover", "Exclusive", "Shared"])
                for c in range(1 if sub_type == "Exclusive" else rng.randrange(1, 6)):
                    event = {
                        "subscription": f"sub-{s}",
                        "consumer_id": c,
                        "consumer_name": rng.choice(["c1", "c10", "c9", "a", "b", "dup"]),
                        "sub_type": sub_type,
                        "priority_level": rng.randrange(3),
                    }
                    at = rng.randrange(1000, 1010)  # ties: consumer_id decides
                    rows.append(_consumer_row(topic, partition, event, at, connected=rng.random() > 0.2))
    return rows


@pytest.mark.parametrize(("consistent_hashing", "buckets"), [(False, None), (True, None), (False, 3)])
def test_udf_agrees_with_the_engine_per_subscription(
    spark: SparkSession, warehouse: Path, consistent_hashing: bool, buckets: int | None
) -> None:
    """Per topic partition (the default) and over buckets of topic partitions alike."""
    rows = _random_consumers(seed=11)
    consumers = _write_and_read(spark, warehouse, rows)
    out = active_consumers(consumers, FailoverSettings(consistent_hashing), buckets=buckets).collect()
    got = {(r["topic"], r["partition"], r["subscription"], r["consumer_id"]): r["is_active"] for r in out}
    assert len(got) == len(rows)

    subscriptions: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in rows:
        subscriptions.setdefault((r["topic"], r["partition"], r["subscription"]), []).append(r)
    for (topic, partition, sub), members in subscriptions.items():
        if members[0]["sub_type"] == "Shared":
            assert all(got[(topic, partition, sub, m["consumer_id"])] is None for m in members)
            continue
        live = sorted(
            (m for m in members if m["connected"]), key=lambda m: (m["subscribed_at"], m["consumer_id"])
        )
        index = select_active(
            [(m["priority_level"], m["consumer_name"]) for m in live],
            0 if members[0]["sub_type"] == "Exclusive" else dispatcher_partition_index(topic, partition),
            partition_name(topic, partition),
            consistent_hashing,
        )
        want = {m["consumer_id"]: False for m in members}
        if index is not None:
            want[live[index]["consumer_id"]] = True
        assert {m["consumer_id"]: got[(topic, partition, sub, m["consumer_id"])] for m in members} == want
