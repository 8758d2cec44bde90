"""Failover active-consumer selection (spec 5.1; AbstractDispatcherSingleActiveConsumer
.pickAndScheduleActiveConsumer), its edge cases, and the vectorised form against the scalar one."""

from __future__ import annotations

from typing import Any

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.failover import (
    FailoverSettings,
    dispatcher_partition_index,
    java_compare_key,
    java_name_order,
    ring_points,
    select_active,
    select_active_many,
)
from engine.topic import partition_name
from tests.schemas.shared_tools import load_scenario

TOPIC = "persistent://public/default/failover"


def _name(consumers: list[tuple[int, str]], partition: int, topic: str = TOPIC, ring: bool = False) -> str:
    index = select_active(consumers, partition, topic, ring)
    assert index is not None
    return consumers[index][1]


def _by_hand_ring_pick(names: list[str], topic: str) -> int:
    """The ring, written out with mmh3: the member owning the smallest point >= hash(topic), or
    the smallest point overall; on a shared point the later member (it was put last)."""
    t = mmh3.hash(topic.encode(), 0, signed=False) & 0x7FFFFFFF
    best: tuple[int, int] | None = None
    for i, name in enumerate(names):
        for j in range(100):
            point = mmh3.hash(f"{name}{j}".encode(), 0, signed=False) & 0x7FFFFFFF
            key = (point if point >= t else point + 2**31, -i)
            best = key if best is None or key < best else best
    assert best is not None
    return -best[1]


# ---- spec 9.2 vectors -------------------------------------------------------------------------
def test_v34_add_remove_consumer_partition_4() -> None:
    """PersistentDispatcherFailoverConsumerTest.testAddRemoveConsumer: sorted[4 % n]."""
    steps = [
        ([(0, "Cons1")], "Cons1", 0),
        ([(0, "Cons1"), (0, "Cons1")], "Cons1", 0),
        ([(0, "Cons1"), (0, "Cons1"), (0, "Cons2")], "Cons1", 1),  # 4 % 3 = 1: the second Cons1
        ([(0, "Cons1"), (0, "Cons1"), (0, "Cons2"), (0, "Cons0")], "Cons0", 3),
        ([(0, "Cons1"), (0, "Cons1"), (0, "Cons0")], "Cons1", 0),  # sorted [Cons0, Cons1, Cons1][1]
        ([(0, "Cons1"), (0, "Cons1")], "Cons1", 0),
        ([(0, "Cons1")], "Cons1", 0),
    ]
    for consumers, active, index in steps:
        assert select_active(consumers, 4, TOPIC, False) == index
        assert consumers[index][1] == active


@pytest.mark.parametrize(
    ("names", "expected"),
    [(["1", "2"], "1212"), (["1", "2", "3"], "1231"), (["2", "3"], "2323")],
)
def test_v35_partitioned_consumer_events(names: list[str], expected: str) -> None:
    """PersistentFailoverE2ETest.testSimpleConsumerEventsWithPartition: partitions 0-3."""
    consumers = [(0, n) for n in names]
    got = "".join(_name(consumers, p, partition_name(TOPIC, p)) for p in range(4))
    assert got == expected


# ---- section 5 edge cases ---------------------------------------------------------------------
def test_lower_priority_level_wins_and_only_the_top_group_counts() -> None:
    """Edge case 1: c2 (priority 1) is never picked while a priority-0 consumer is connected."""
    consumers = [(0, "c9"), (1, "c2"), (0, "c10")]
    assert [_name(consumers, p) for p in range(4)] == ["c10", "c9", "c10", "c9"]  # group of 2
    assert _name([(1, "c2")], 4) == "c2"
    for topic in (f"{TOPIC}-{i}" for i in range(20)):  # the ring, too, is built from the top group
        assert _name([(1, "standby"), (0, "primary"), (1, "backup")], -1, topic) == "primary"


def test_names_sort_as_strings_so_10_is_before_9() -> None:
    """Edge case 2: "10" < "9", "c10" < "c9"."""
    assert _name([(0, "9"), (0, "10")], 0) == "10"
    assert _name([(0, "c9"), (0, "c10")], 0) == "c10"
    assert _name([(0, "c9"), (0, "c10")], 1) == "c9"


def test_names_compare_as_java_utf16_code_units() -> None:
    """U+1F600 is the surrogates D83D DE00 in Java, so it sorts below U+E000 (Python: above)."""
    high_bmp, astral = "\ue000", "\U0001f600"
    assert high_bmp < astral  # Python's code-point order
    assert java_compare_key(astral) < java_compare_key(high_bmp)
    assert _name([(0, high_bmp), (0, astral)], 0) == astral
    ranks, distinct = java_name_order([high_bmp, astral, "a"])
    assert distinct == ["a", astral, high_bmp]
    assert ranks.tolist() == [2, 1, 0]


def test_equal_priority_and_name_keep_subscription_order() -> None:
    """Edge case 2: the sort is stable; the partition index picks among duplicates in order."""
    consumers = [(0, "dup"), (0, "a"), (0, "dup")]
    assert select_active(consumers, 1, TOPIC, False) == 0  # sorted [a, dup#0, dup#2]
    assert select_active(consumers, 2, TOPIC, False) == 2


def test_duplicate_names_later_consumer_wins_every_ring_point() -> None:
    """Edge case 3: no collision list; equal names collide on all 100 points, the later wins."""
    for topic in (f"{TOPIC}-{i}" for i in range(10)):
        assert select_active([(0, "same"), (0, "same")], -1, topic, False) == 1
        picked = select_active([(0, "same"), (0, "other"), (0, "same")], -1, topic, False)
        assert picked in (1, 2)  # never the first "same"


def test_ring_key_is_name_plus_index_without_separator() -> None:
    """Edge case 4: "c1" + "10" and "c11" + "0" are the same key "c110"."""
    assert ring_points("c1")[10] == ring_points("c11")[0]
    assert ring_points("c1")[10] == mmh3.hash(b"c110", 0, signed=False) & 0x7FFFFFFF
    assert ring_points("x").max() < 2**31  # masked to 31 bits


def test_non_partitioned_topic_uses_the_ring_on_the_topic_name() -> None:
    names = ["alpha", "beta", "gamma", "delta"]
    consumers = [(0, n) for n in names]
    sorted_names = sorted(names)
    picks = set()
    for i in range(40):
        topic = f"persistent://t/ns/topic-{i}"
        expected = sorted_names[_by_hand_ring_pick(sorted_names, topic)]
        assert _name(consumers, -1, topic) == expected
        picks.add(expected)
    assert len(picks) > 1  # the topic name matters


def test_partitioned_topic_hashes_its_full_partition_name_when_consistent_hashing_is_on() -> None:
    """PIP-392: the flag sends partitions to the ring too, keyed by "<topic>-partition-N"."""
    consumers = [(0, n) for n in ("c1", "c2", "c3")]
    picks = []
    for p in range(8):
        full = partition_name(TOPIC, p)
        assert full == f"{TOPIC}-partition-{p}"
        expected = ["c1", "c2", "c3"][_by_hand_ring_pick(["c1", "c2", "c3"], full)]
        assert _name(consumers, p, full, ring=True) == expected
        picks.append(expected)
    assert picks != [_name(consumers, p) for p in range(8)]  # differs from the modulo rule


def test_no_consumer_no_active() -> None:
    assert select_active([], 0, TOPIC, False) is None
    assert select_active([], -1, TOPIC, True) is None


def test_dispatcher_partition_index() -> None:
    assert dispatcher_partition_index("persistent://t/ns/x", -1) == -1
    assert dispatcher_partition_index("persistent://t/ns/x", 3) == 3
    # NonPersistentSubscription.addConsumer: "assume index 0 to pick a predictable consumer"
    assert dispatcher_partition_index("non-persistent://t/ns/x", -1) == 0
    assert dispatcher_partition_index("non-persistent://t/ns/x", 2) == 2
    assert partition_name("persistent://t/ns/x", -1) == "persistent://t/ns/x"


def test_settings_from_config_default_to_pulsar_4_0() -> None:
    assert FailoverSettings.from_config({}).active_consumer_failover_consistent_hashing is False
    assert FailoverSettings.from_config({"active_consumer_failover_consistent_hashing": True}) == (
        FailoverSettings(True)
    )


# ---- the shared scenarios, replayed on the selection alone ------------------------------------
def _replay(scenario: dict[str, Any]) -> list[tuple[int, int, str | None, str | None]]:
    """(after, partition, expected, computed) for every checkpoint naming an active consumer.

    A tiny stand-in for the subscription: connected consumers per partition in subscription
    order; a close of an unknown consumer changes nothing (Pulsar refuses it)."""
    out = []
    for checkpoint in scenario["checkpoints"]:
        after = checkpoint["after"]
        partition = checkpoint.get("partition", scenario["partition"])
        expected = checkpoint.get("stats", {}).get("subscriptions", {}).get("sub", {})
        if "activeConsumerName" not in expected:
            continue
        connected: list[dict[str, Any]] = []
        for event in scenario["events"][:after]:
            if event.get("partition", scenario["partition"]) != partition:
                continue
            if event["type"] == "SUBSCRIBE":
                connected.append(event)
            elif event["type"] == "CLOSE_CONSUMER":
                gone = [e for e in connected if e["consumer_id"] == event["consumer_id"]]
                if gone:
                    connected.remove(gone[0])
        topic = partition_name(f"{scenario['topic']}-cp{after}", partition)
        consumers = [(e.get("priority_level", 0), e["consumer_name"]) for e in connected]
        index = select_active(consumers, dispatcher_partition_index(topic, partition), topic, False)
        computed = None if index is None else consumers[index][1]
        out.append((after, partition, expected["activeConsumerName"], computed))
    return out


@pytest.mark.parametrize(
    "name",
    [
        "v34-failover-add-remove-consumer",
        "v35-failover-partitioned-consumer-events",
        "failover-partitioned-priority-groups",
        "failover-non-partitioned-top-priority",
    ],
)
def test_shared_failover_scenarios(name: str) -> None:
    results = _replay(load_scenario(name))
    assert results, "the scenario names no active consumer"
    assert [(a, p, e) for a, p, e, _ in results] == [(a, p, c) for a, p, _, c in results]


# ---- vectorised == scalar -----------------------------------------------------------------------
_NAMES = st.sampled_from(["a", "b", "c1", "c10", "c9", "Cons1", "x\ue000", "x\U0001f600", "", "a\x00", "é"])


@st.composite
def _subscriptions(draw: st.DrawFn) -> list[tuple[int, int, str, int, str]]:
    rows = []
    for group in range(draw(st.integers(1, 12))):
        partition = draw(st.sampled_from([-1, 0, 1, 2, 5]))
        topic = partition_name(f"persistent://t/ns/{draw(st.integers(0, 3))}", partition)
        for _ in range(draw(st.integers(1, 6))):
            rows.append((group * 7 + 3, draw(st.integers(0, 2)), draw(_NAMES), partition, topic))
    order = draw(st.permutations(range(len(rows))))
    # interleave subscriptions while keeping each one's own order
    by_group: dict[int, list[tuple[int, int, str, int, str]]] = {}
    for row in rows:
        by_group.setdefault(row[0], []).append(row)
    keys = [rows[i][0] for i in order]
    return [by_group[k].pop(0) for k in keys]


@settings(max_examples=150, deadline=None)
@given(_subscriptions(), st.booleans())
def test_many_matches_scalar(rows: list[tuple[int, int, str, int, str]], consistent: bool) -> None:
    selection = select_active_many(
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        [r[2] for r in rows],
        np.array([r[3] for r in rows]),
        [r[4] for r in rows],
        consistent,
    )
    groups = sorted({r[0] for r in rows})
    assert selection.groups.tolist() == groups
    for group, row in zip(groups, selection.rows.tolist(), strict=True):
        members = [i for i, r in enumerate(rows) if r[0] == group]
        first = rows[members[0]]
        index = select_active([(rows[i][1], rows[i][2]) for i in members], first[3], first[4], consistent)
        assert index is not None
        assert row == members[index]
    assert selection.mask(len(rows)).sum() == len(groups)


def test_many_of_nothing() -> None:
    selection = select_active_many(np.array([]), np.array([]), [], np.array([]), [], False)
    assert selection.groups.size == selection.rows.size == 0
