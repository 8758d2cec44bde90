"""Failover (and Exclusive) active-consumer selection, spec section 5.1.

Mirrors ``AbstractDispatcherSingleActiveConsumer.pickAndScheduleActiveConsumer`` (with
``makeHashRing`` and ``peekConsumerIndexFromHashRing``), run by Pulsar on every consumer add and
on every remove that leaves consumers. The selection is a pure function of the connected
consumers in subscription order, the dispatcher's partition index, the topic name and one
broker flag, so it is computed here from scratch each time rather than tracked:

1. sort by ``(priorityLevel, consumerName)``, stable (TimSort), names compared as Java
   ``String.compareTo`` does (UTF-16 code units: ``"10" < "9"``, and a supplementary character
   sorts *below* U+E000..U+FFFF, unlike Python's code-point order);
2. keep the highest-priority group (lowest ``priorityLevel``), a prefix of the sorted list;
3. ``partitionIndex % groupSize`` when ``partitionIndex >= 0`` and
   ``activeConsumerFailoverConsistentHashing`` is off; otherwise a ring of 100 points per group
   member (``Murmur3_32Hash(name + j) & 0x7fffffff``, later members overwrite earlier ones on a
   collision), looked up with the topic's hash (``Murmur3Hash32.makeHash(topicName)``): the
   ceiling entry, or the first one past the end.

``select_active`` does it for one subscription; ``select_active_many`` does it for any number
of subscriptions at once, without a Python loop per subscription (the UDF and the bench).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from engine.hashing import MASK31, java_utf8, make_hash31, murmur3_32_many, murmur3_32_suffixed
from engine.topic import is_non_persistent

CONSUMER_CONSISTENT_HASH_REPLICAS: Final = 100  # AbstractDispatcherSingleActiveConsumer
_RING_SUFFIXES: Final = [str(j).encode() for j in range(CONSUMER_CONSISTENT_HASH_REPLICAS)]
_MEMBER_BITS: Final = 21  # ring tie-break: member index packed under the point (2M members max)


@dataclass(frozen=True, slots=True)
class FailoverSettings:
    """The broker setting the selection obeys (snake_case of Pulsar's, as in ``--conf``)."""

    # PIP-392: use the hash ring for partitioned topics too. Pulsar 4.0 default: false.
    active_consumer_failover_consistent_hashing: bool = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FailoverSettings:
        return cls(bool(config.get("active_consumer_failover_consistent_hashing", False)))


# ---- names --------------------------------------------------------------------------------
def dispatcher_partition_index(topic: str, partition: int) -> int:
    """The ``partitionIndex`` a Failover dispatcher is created with.

    ``PersistentSubscription`` passes ``TopicName.getPartitionIndex`` (-1 when not partitioned,
    so the ring decides). ``NonPersistentSubscription.addConsumer`` replaces a negative index by
    0 ("assume index 0 to pick a predictable consumer"), so a non-persistent, non-partitioned
    topic takes the first consumer of the sorted top group, never the ring (unless consistent
    hashing is on). Spec 5.1 is silent about non-persistent topics."""
    if partition < 0 and is_non_persistent(topic):
        return 0
    return partition


def java_compare_key(name: str) -> bytes:
    """A sort key ordering strings as Java ``String.compareTo`` (UTF-16 code units): the
    big-endian UTF-16 bytes compare exactly as the code units do, shorter prefix first."""
    return name.encode("utf-16-be", "surrogatepass")


def ring_points(name: str) -> np.ndarray:
    """The 100 ring points of a consumer (``makeHashRing``): ``Murmur3_32Hash.makeHash((name + j)
    .getBytes())`` for j in 0..99, masked to 31 bits; int64. ``name + j`` is a plain
    concatenation ("c1" + "10" == "c110"), unlike Key_Shared's NUL-separated ring keys."""
    return (murmur3_32_suffixed([java_utf8(name)], _RING_SUFFIXES)[0] & np.uint32(MASK31)).astype(np.int64)


# ---- one subscription -----------------------------------------------------------------------
def select_active(
    consumers: Sequence[tuple[int, str]],
    partition_index: int,
    topic_name: str,
    consistent_hashing: bool,
) -> int | None:
    """The active consumer of one subscription, as an index into ``consumers``.

    ``consumers`` are the connected consumers as ``(priority_level, consumer_name)`` in
    subscription order (duplicates allowed: Failover accepts the same name twice);
    ``partition_index`` is the dispatcher's (``dispatcher_partition_index``); ``topic_name`` the
    full name (``engine.topic.partition_name``). None when there is no consumer.

    Written as directly after ``pickAndScheduleActiveConsumer`` as Python allows (a dict and a
    sorted key list for the ``TreeMap``); ``select_active_many`` is checked against it.
    """
    if not consumers:
        return None
    # Java compares priorities by subtraction (c1 - c2), which only overflows for priorities
    # a client cannot set (the client rejects negative ones); plain comparison otherwise agrees.
    order = sorted(
        range(len(consumers)), key=lambda i: (consumers[i][0], java_compare_key(consumers[i][1]), i)
    )
    top = consumers[order[0]][0]
    size = sum(1 for i in order if consumers[i][0] == top)  # the sorted top group is a prefix
    if partition_index >= 0 and not consistent_hashing:
        return order[partition_index % size]
    ring: dict[int, int] = {}
    for member in range(size):
        for point in ring_points(consumers[order[member]][1]).tolist():
            ring[point] = member  # TreeMap.put: a later member overwrites
    points = sorted(ring)
    at = bisect.bisect_left(points, make_hash31(java_utf8(topic_name)))  # ceilingEntry
    return order[ring[points[at if at < len(points) else 0]]]  # else firstEntry


# ---- many subscriptions ---------------------------------------------------------------------
def java_name_order(names: Sequence[str] | np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Every name's rank in Java ``String.compareTo`` order (equal names, equal ranks; int64),
    and the distinct names in that order.

    numpy sorts fixed-width strings by code point, which is Java's order unless a name holds a
    character at or above U+E000 (a supplementary character, two surrogates in Java, sorts
    below those) or a NUL (fixed-width strings drop trailing NULs, so "a\\0" would equal "a").
    Only such inputs pay for sorting the distinct names in Python."""
    values = list(names) if not isinstance(names, list) else names
    if not values:
        return np.empty(0, dtype=np.int64), []
    if not any("\0" in v for v in values):
        fixed = np.asarray(values, dtype=str)
        unique, inverse = np.unique(fixed, return_inverse=True)
        if int(unique.view(np.uint32).max(initial=0)) < 0xE000:
            return inverse.ravel().astype(np.int64), unique.tolist()
    distinct = sorted(set(values), key=java_compare_key)
    rank_of = {v: i for i, v in enumerate(distinct)}
    return np.fromiter(map(rank_of.__getitem__, values), dtype=np.int64, count=len(values)), distinct


@dataclass(frozen=True, slots=True)
class Selection:
    """The active consumer of every subscription: ``groups[k]`` (ascending group ids) has its
    active consumer at input row ``rows[k]``."""

    groups: np.ndarray
    rows: np.ndarray

    def mask(self, n: int) -> np.ndarray:
        """True at the active consumer's row, for ``n`` input rows."""
        active = np.zeros(n, dtype=bool)
        active[self.rows] = True
        return active


def select_active_many(
    group: np.ndarray,
    priority_level: np.ndarray,
    name: Sequence[str] | np.ndarray,
    partition_index: np.ndarray,
    topic_name: Sequence[str] | np.ndarray,
    consistent_hashing: bool,
) -> Selection:
    """``select_active`` for many subscriptions at once, from flat per-consumer arrays.

    Row ``i`` is one connected consumer of subscription ``group[i]``; a subscription's rows are
    in its subscription order (they need not be adjacent). ``partition_index`` and
    ``topic_name`` are the subscription's, read from its first row. Ring points are hashed once
    per distinct consumer name (partitions of one topic usually share their consumers' names).
    """
    group = np.asarray(group, dtype=np.int64)
    n = group.size
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return Selection(empty, empty)
    priority_level = np.asarray(priority_level, dtype=np.int64)
    rank, distinct_names = java_name_order(name)
    order = np.lexsort((np.arange(n), rank, priority_level, group))  # stable: subscription order last
    g, p = group[order], priority_level[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    member_of = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n]))
    in_top = p == p[starts][member_of]
    top_size = np.bincount(member_of, weights=in_top, minlength=starts.size).astype(np.int64)

    first_row = order[starts]
    part = np.asarray(partition_index, dtype=np.int64)[first_row]
    use_ring = np.full(starts.size, True) if consistent_hashing else part < 0
    chosen = starts + np.where(use_ring, 0, part % top_size)  # (a negative part is unused)

    ring_groups = np.flatnonzero(use_ring)
    if ring_groups.size:
        chosen[ring_groups] = _ring_choice(
            starts, member_of, in_top, ring_groups, rank[order], distinct_names, topic_name, order
        )
    return Selection(g[starts], order[chosen])


def _ring_choice(
    starts: np.ndarray,
    member_of: np.ndarray,
    in_top: np.ndarray,
    ring_groups: np.ndarray,
    sorted_rank: np.ndarray,
    distinct_names: list[str],
    topic_name: Sequence[str] | np.ndarray,
    order: np.ndarray,
) -> np.ndarray:
    """Sorted position of the ring's pick for each group in ``ring_groups`` (ascending)."""
    members = np.flatnonzero(in_top & np.isin(member_of, ring_groups))  # sorted positions
    member_index = members - starts[member_of[members]]  # i in makeHashRing
    if int(member_index.max(initial=0)) >= 1 << _MEMBER_BITS:
        raise ValueError(f"more than {1 << _MEMBER_BITS} consumers in one priority group")
    ring_ranks, name_code = np.unique(sorted_rank[members], return_inverse=True)
    points = murmur3_32_suffixed([java_utf8(distinct_names[r]) for r in ring_ranks.tolist()], _RING_SUFFIXES)
    points &= np.uint32(MASK31)

    # one hash per distinct topic name (a dict: topics are few, and numpy's string unique is slow)
    topic_code: dict[str, int] = {}
    first_rows = order[starts[ring_groups]].tolist()
    codes = np.fromiter(
        (topic_code.setdefault(topic_name[i], len(topic_code)) for i in first_rows),
        dtype=np.int64,
        count=len(first_rows),
    )
    topic_hash = murmur3_32_many([java_utf8(t) for t in topic_code]) & np.uint32(MASK31)
    # topic hash of each member's group (ring_groups is ascending, so searchsorted finds it)
    member_group = np.searchsorted(ring_groups, member_of[members])
    t = topic_hash.astype(np.int64)[codes][member_group]

    # ceilingEntry(t), else firstEntry: the smallest point >= t, points below t counted after the
    # top of the ring; on equal points the later member wins (TreeMap.put overwrote the earlier)
    best = np.empty(members.size, dtype=np.int64)
    tiebreak = (1 << _MEMBER_BITS) - 1 - member_index
    chunk = 20_000  # bounds the (members, 100) temporaries to ~16 MB
    for lo in range(0, members.size, chunk):
        hi = min(members.size, lo + chunk)
        p = points[name_code.ravel()[lo:hi]].astype(np.int64)
        p = np.where(p >= t[lo:hi, None], p, p + (1 << 31))
        best[lo:hi] = (p.min(axis=1) << _MEMBER_BITS) | tiebreak[lo:hi]
    # per group: the minimum over its members (members of one group are adjacent)
    group_starts = np.flatnonzero(np.r_[True, member_group[1:] != member_group[:-1]])
    winner = np.minimum.reduceat(best, group_starts)
    winner_index = (1 << _MEMBER_BITS) - 1 - (winner & ((1 << _MEMBER_BITS) - 1))
    return starts[ring_groups] + winner_index
