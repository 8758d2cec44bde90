"""The pure parts of ``ackstate bench --subscriptions``: the workload and the measurement list
(no Spark, nothing timed against a target)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.failover import FailoverSettings, select_active_many
from jobs.bench import subscriptions as b
from jobs.bench.figures import Figure
from udfs.failover import failover_partition


def test_workload_shape_matches_its_description() -> None:
    w = b.failover_workload(1_000)
    assert w.subscriptions == 1_000
    per_sub = np.bincount(w.group)
    assert per_sub.min() >= 1 and per_sub.max() <= 5
    assert np.all(np.diff(w.group) >= 0)  # subscriptions contiguous, in subscription order
    assert set(np.unique(w.partition).tolist()) == {-1, 0, 1, 2, 3}  # both kinds of topic
    assert set(np.unique(w.priority_level).tolist()) == {0, 1, 2}
    assert all(len(name) == 5 for name in w.consumer_name)


def test_a_subscription_keeps_its_consumers_names_on_every_partition() -> None:
    w = b.failover_workload(200)
    by_sub: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    for g in np.unique(w.group).tolist():
        rows = np.flatnonzero(w.group == g)
        key = (w.topic[rows[0]], w.subscription[rows[0]])
        by_sub.setdefault(key, set()).add(tuple((w.consumer_name[i], int(w.priority_level[i])) for i in rows))
    assert all(len(variants) == 1 for variants in by_sub.values())
    assert any(len(np.unique(w.partition[w.topic == t])) == 4 for t, _ in by_sub)


def test_the_udf_and_the_engine_pick_the_same_consumers_on_the_workload() -> None:
    """The two timed paths compute the same thing (the UDF body, here without Spark)."""
    w = b.failover_workload(300)
    table = b.consumers_arrow(w)
    part = np.where(w.partition >= 0, w.partition, -1)
    engine = select_active_many(w.group, w.priority_level, w.consumer_name, part, w.full_topic_names(), False)
    expected = set(engine.rows.tolist())
    got = set()
    keys = sorted({(t, int(p)) for t, p in zip(w.topic.tolist(), w.partition.tolist(), strict=True)})
    for topic, partition in keys:
        rows = np.flatnonzero((w.topic == topic) & (w.partition == partition))
        key = (pa.scalar(topic), pa.scalar(partition, pa.int32()))
        out = failover_partition(key, table.take(rows), FailoverSettings())
        got.update(rows[np.asarray(pc.fill_null(out.column("is_active"), False))].tolist())
    assert got == expected


def test_measurements_are_a_named_list_and_the_engine_one_reports_figures() -> None:
    assert [m.name for m in b.MEASUREMENTS][:2] == [
        "failover assignment, engine (one core)",
        "failover assignment, Spark UDF (local Spark)",
    ]
    lines: list[str] = []
    ctx = b.Context(None, runs=2, quick=True, echo=lines.append)
    ctx.cache["failover"] = b.failover_workload(150)  # small: this checks the plumbing only
    figures = b.measure_failover_engine(ctx)
    assert [type(f) for f in figures] == [Figure] * 3
    assert all(len(f.runs) == 2 and f.value > 0 for f in figures)
    assert "vectorised / scalar" in figures[2].name
