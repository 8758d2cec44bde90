"""Scenarios driven on a real broker with the Python client; the broker then judges ackstate.

Each scenario works on its own topics (``Run.topic``; its namespace-wide operations in a
namespace of its own) and leaves its consumers connected, so that the broker's per-consumer
numbers are still there to compare when the run ends. What a scenario cannot leave to the admin
API (the receipts a producer got) it records in ``Run``. Scenarios play side by side
(``Run.play_all``): most of a scenario's time is waiting on the broker (receive timeouts, a TTL
to pass, an expiry), and one after the other they took 43 s of the judges' minute (2026-12-07).

The broker runs with ``managedLedgerMaxEntriesPerLedger=10``, so every topic of more than ten
entries spans several ledgers and ack holes cross ledger boundaries.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.error
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pulsar

from engine.topic import admin_path, namespace_of
from jobs.platform.broker import StandaloneBroker

NAMESPACE = "public/default"
DEDUP_NAMESPACE = "public/dedup"  # deduplication on, as a namespace policy
CLEARED_NAMESPACE = "public/cleared"  # a namespace-wide clear-backlog touches only its topics
EXPIRING_NAMESPACE = "public/expiring"  # subscriptions inactive for a minute are deleted
V1_NAMESPACE = "public/standalone/v1"  # a v1 namespace (property/cluster/namespace), for v1 admin paths
RECEIVE_MS = 5000
ACK_TIMEOUT_MS = 10_000  # the Python (C++) client's minimum
PLAYERS = 4  # scenarios playing at once (Run.play_all)
TTL_S = 3  # message_ttl's


def make_dedup_namespace(broker: StandaloneBroker) -> None:
    """``DEDUP_NAMESPACE`` with its deduplication policy on: where the dedup scenarios publish."""
    broker.admin(f"/admin/v2/namespaces/{DEDUP_NAMESPACE}", "PUT", {})
    broker.admin(f"/admin/v2/namespaces/{DEDUP_NAMESPACE}/deduplication", "POST", True)


@dataclass
class Run:
    """One run of scenarios against one broker: its clients, topics and what they observed."""

    broker: StandaloneBroker
    prefix: str
    client: pulsar.Client = field(init=False)
    topics: list[tuple[str, int, str]] = field(default_factory=list)  # (topic, partitions, scenario)
    scenario: str = ""  # who owns the topics made outside ``play`` (a fixture's own steps)
    consumers: list[pulsar.Consumer] = field(default_factory=list)
    receipts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # producer -> (seq id, "L:E")
    deadline: float = 0.0  # monotonic time before which the broker is not yet settled (ack timeouts)
    _playing: threading.local = field(default_factory=threading.local, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.client = pulsar.Client(self.broker.service_url, operation_timeout_seconds=30)

    def settled_after(self, seconds: float) -> None:
        """The broker is not settled for ``seconds`` more (a timeout a scenario started)."""
        with self._lock:
            self.deadline = max(self.deadline, time.monotonic() + seconds)

    def topic(self, name: str, *, partitions: int = 0, persistent: bool = True, ns: str = NAMESPACE) -> str:
        domain = "persistent" if persistent else "non-persistent"
        topic = f"{domain}://{ns}/{self.prefix}-{name}"
        if partitions:
            self.broker.admin(admin_path(topic) + "/partitions", "PUT", partitions)
        self.topics.append((topic, partitions, getattr(self._playing, "scenario", self.scenario)))
        return topic

    def subscribe(
        self, topic: str, sub: str, kind: pulsar.ConsumerType, name: str, **kw: Any
    ) -> pulsar.Consumer:
        kw.setdefault("initial_position", pulsar.InitialPosition.Earliest)
        consumer = self.client.subscribe(topic, sub, consumer_type=kind, consumer_name=name, **kw)
        self.consumers.append(consumer)
        return consumer

    def play(self, scenario: Callable[[Run], None]) -> None:
        """Play one scenario in this thread; the topics it makes are its own."""
        self._playing.scenario = scenario.__name__
        try:
            scenario(self)
        finally:
            del self._playing.scenario

    def play_all(self, plays: Sequence[Callable[[Run], None]], players: int = PLAYERS) -> None:
        """Play ``plays`` ``players`` at a time, started in the order given; the first error is
        raised once every scenario has ended. One scenario plays in this thread."""
        if len(plays) == 1 or players == 1:
            for scenario in plays:
                self.play(scenario)
            return
        with ThreadPoolExecutor(players, thread_name_prefix="scenario") as pool:
            futures = [pool.submit(self.play, scenario) for scenario in plays]
        for future in futures:
            future.result()

    def names(self, scenario: str | None = None) -> list[str]:
        """Pulsar's names of the topic partitions of one scenario (of all, without one)."""
        return [
            name
            for topic, parts, owner in self.topics
            if scenario is None or owner == scenario
            for name in partition_names(topic, parts)
        ]

    def close(self) -> None:
        self.client.close()


def partition_names(topic: str, partitions: int) -> list[str]:
    """Pulsar's names of a topic's partitions (the topic itself when it is not partitioned)."""
    return [f"{topic}-partition-{i}" for i in range(partitions)] if partitions else [topic]


def produce(run: Run, topic: str, n: int, *, batch: int = 0, keys: int = 0, name: str | None = None) -> None:
    """``n`` messages; ``batch`` > 0 sends them in batches of that many, ``keys`` > 0 with keys."""
    producer = run.client.create_producer(
        topic,
        producer_name=name,
        batching_enabled=batch > 0,
        batching_max_messages=max(batch, 2),
        batching_max_publish_delay_ms=1000,
    )
    done: list[Any] = []
    for i in range(n):
        key = f"k{i % keys}" if keys else None
        if batch:
            producer.send_async(f"m{i}".encode(), lambda res, msg_id: done.append(res), partition_key=key)
            if (i + 1) % batch == 0:
                producer.flush()
        else:
            producer.send(f"m{i}".encode(), partition_key=key)
    producer.flush()
    producer.close()


def receive(consumer: pulsar.Consumer, n: int, timeout_ms: int = RECEIVE_MS) -> list[pulsar.Message]:
    got = []
    for _ in range(n):
        try:
            got.append(consumer.receive(timeout_millis=timeout_ms))
        except pulsar.Timeout:
            break
    return got


def drain(consumer: pulsar.Consumer, quiet_ms: int = 500) -> list[pulsar.Message]:
    """Every message the consumer gets until it gets none for ``quiet_ms``."""
    return receive(consumer, 10_000, quiet_ms)


def ack_every(consumer: pulsar.Consumer, msgs: list[pulsar.Message], step: int, first: int = 0) -> None:
    """Acknowledge ``msgs[first::step]``, one by one: the partial acks most scenarios leave."""
    for m in msgs[first::step]:
        consumer.acknowledge(m)


# ---- the scenarios ---------------------------------------------------------------------------
def exclusive_holes(run: Run) -> None:
    """Individual acks out of order, leaving holes across three ledgers."""
    topic = run.topic("exclusive-holes")
    produce(run, topic, 25)
    consumer = run.subscribe(topic, "sub", pulsar.ConsumerType.Exclusive, "ex-1")
    msgs = receive(consumer, 25)
    picked = [m for i, m in enumerate(msgs) if i % 3 != 0 or i in (0, 12)]
    random.Random(7).shuffle(picked)
    for m in picked:
        consumer.acknowledge(m)


def exclusive_cumulative(run: Run) -> None:
    """A cumulative ack, then individual acks past it."""
    topic = run.topic("exclusive-cumulative")
    produce(run, topic, 15)
    consumer = run.subscribe(topic, "sub", pulsar.ConsumerType.Exclusive, "cum-1")
    msgs = receive(consumer, 15)
    consumer.acknowledge_cumulative(msgs[6])
    consumer.acknowledge(msgs[9])
    consumer.acknowledge(msgs[11])


def failover_switch(run: Run) -> None:
    """Failover on a partitioned topic: two consumers, then the first one leaves."""
    topic = run.topic("failover", partitions=2)
    produce(run, topic, 12)
    first = run.subscribe(topic, "sub", pulsar.ConsumerType.Failover, "fo-a")
    second = run.subscribe(topic, "sub", pulsar.ConsumerType.Failover, "fo-b")
    for consumer in (first, second):
        ack_every(consumer, drain(consumer), 2)
    first.close()
    run.consumers.remove(first)
    for m in drain(second)[:3]:
        second.acknowledge(m)


def failover_cumulative(run: Run) -> None:
    """Failover on a non-partitioned topic: the active consumer acks cumulatively, a second one
    joins (the first, first in the list, stays active) and the first leaves; the second gets the
    rest again and acks cumulatively part of it."""
    topic = run.topic("failover-cumulative")
    first = run.subscribe(topic, "sub", pulsar.ConsumerType.Failover, "foc-a")
    produce(run, topic, 16)
    msgs = receive(first, 16)
    first.acknowledge_cumulative(msgs[5])
    first.acknowledge(msgs[9])
    wait_for_backlog(run, topic, "sub", 16 - 7)
    second = run.subscribe(topic, "sub", pulsar.ConsumerType.Failover, "foc-b")
    first.close()
    run.consumers.remove(first)
    again = drain(second, 2000)
    if len(again) > 3:
        second.acknowledge_cumulative(again[3])


def shared_batches(run: Run) -> None:
    """Shared, two consumers, batched entries: unacked messages counted per consumer."""
    topic = run.topic("shared-batches")
    one = run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "sh-a", receiver_queue_size=4)
    two = run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "sh-b", receiver_queue_size=4)
    produce(run, topic, 30, batch=5)
    for consumer in (one, two):
        ack_every(consumer, receive(consumer, 8, 1000), 3)


def key_shared(run: Run) -> None:
    """Key_Shared with keyed messages and two consumers."""
    topic = run.topic("key-shared")
    one = run.subscribe(topic, "sub", pulsar.ConsumerType.KeyShared, "ks-a")
    two = run.subscribe(topic, "sub", pulsar.ConsumerType.KeyShared, "ks-b")
    produce(run, topic, 20, keys=5)
    for consumer in (one, two):
        ack_every(consumer, drain(consumer), 2, 1)


def key_shared_close(run: Run) -> None:
    """Key_Shared: a consumer closes with messages unacked; its keys' entries go to the other
    consumer, which acks some of them, and then to a third that joins."""
    topic = run.topic("key-shared-close")
    one = run.subscribe(topic, "sub", pulsar.ConsumerType.KeyShared, "ksc-a")
    two = run.subscribe(topic, "sub", pulsar.ConsumerType.KeyShared, "ksc-b")
    produce(run, topic, 30, keys=6)
    for consumer in (one, two):
        ack_every(consumer, drain(consumer), 3)
    one.close()
    run.consumers.remove(one)
    ack_every(two, drain(two), 2)
    three = run.subscribe(topic, "sub", pulsar.ConsumerType.KeyShared, "ksc-c")
    produce(run, topic, 12, keys=6)
    for consumer in (two, three):
        ack_every(consumer, drain(consumer), 2, 1)


def batch_index_acks(run: Run) -> None:
    """Batch-index acks (broker and client both enabled): parts of batches acknowledged."""
    topic = run.topic("batch-index")
    consumer = run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "bi-1", batch_index_ack_enabled=True)
    produce(run, topic, 20, batch=5)
    msgs = receive(consumer, 20)
    for i in (0, 2, 5, 6, 7, 8, 9, 13, 19):
        consumer.acknowledge(msgs[i])


def batch_index_redelivery(run: Run) -> None:
    """Parts of batches acknowledged, then a redeliver-all: the replays carry the batches' ack
    sets, and a replayed entry counts only its messages still unacked (``Consumer.sendMessages``
    subtracts what the ack set says is acked). One more ack of a replayed message follows."""
    topic = run.topic("batch-index-redelivery")
    consumer = run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "bir-1", batch_index_ack_enabled=True)
    produce(run, topic, 20, batch=5)
    msgs = receive(consumer, 20)
    # parts of three batches, then all of the first: once the broker counts three entries left
    # (msgBacklog counts entries), every ack before them on the connection was applied too
    acked = (6, 8, 12, 13, 14, 19, 0, 1, 2, 3, 4)
    for i in acked:
        consumer.acknowledge(msgs[i])
    wait_for_backlog(run, topic, "sub", 3)
    consumer.redeliver_unacknowledged_messages()
    again = receive(consumer, 20 - len(acked))
    if again:
        consumer.acknowledge(again[-1])


def negative_acks(run: Run) -> None:
    """Negative acks: the client redelivers them after its delay, as a redeliver request."""
    topic = run.topic("nack")
    consumer = run.subscribe(
        topic, "sub", pulsar.ConsumerType.Shared, "nack-1", negative_ack_redelivery_delay_ms=300
    )
    produce(run, topic, 8)
    msgs = receive(consumer, 8)
    consumer.negative_acknowledge(msgs[1])
    consumer.negative_acknowledge(msgs[4])
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    again = receive(consumer, 2)
    if again:
        consumer.acknowledge(again[0])


def dead_letter(run: Run) -> None:
    """Negative acks past the client's ``max_redeliver_count``: the client publishes the message
    to its dead-letter topic and acks the original (the broker sees a send and an ack)."""
    topic = run.topic("dead-letter")
    consumer = run.subscribe(
        topic,
        "sub",
        pulsar.ConsumerType.Shared,
        "dl-1",
        negative_ack_redelivery_delay_ms=200,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(max_redeliver_count=1),
    )
    produce(run, topic, 4)
    for m in receive(consumer, 4):
        if m.data() in (b"m1", b"m2"):
            consumer.negative_acknowledge(m)
        else:
            consumer.acknowledge(m)
    for m in receive(consumer, 2):  # redelivered once, the most the policy allows: nacked again,
        consumer.negative_acknowledge(m)  # each goes to the dead-letter topic after the nack delay
    receive(consumer, 1, 2000)  # nothing comes: the time the client takes to dead-letter them


def ack_timeout(run: Run) -> None:
    """The client's ack timeout: unacked messages come back after 10 s (a redeliver request)."""
    topic = run.topic("ack-timeout")
    consumer = run.subscribe(
        topic, "sub", pulsar.ConsumerType.Shared, "at-1", unacked_messages_timeout_ms=ACK_TIMEOUT_MS
    )
    produce(run, topic, 5)
    msgs = receive(consumer, 5)
    consumer.acknowledge(msgs[0])
    run.settled_after(ACK_TIMEOUT_MS / 1000 + 3)


def redeliver_all(run: Run) -> None:
    """``redeliverUnacknowledgedMessages`` on Shared and on Exclusive, after the broker applied
    an ack.

    The client holds acks for up to 100 ms (its ack grouping) and sends a redeliver-all at once,
    so left alone the ack races the replay of the entry it acks (``acks_racing_replays``, which
    the plugin handles but for a rare interleaving). The scenario waits for the ack to land
    first: the redelivery is what it judges.
    """
    topic = run.topic("redeliver")
    shared = run.subscribe(topic, "shared", pulsar.ConsumerType.Shared, "rd-s")
    exclusive = run.subscribe(topic, "exclusive", pulsar.ConsumerType.Exclusive, "rd-x")
    produce(run, topic, 6)
    for consumer, sub in ((shared, "shared"), (exclusive, "exclusive")):
        msgs = receive(consumer, 6)
        consumer.acknowledge(msgs[0])
        wait_for_backlog(run, topic, sub, 5)
        consumer.redeliver_unacknowledged_messages()


def acks_racing_replays(run: Run) -> None:
    """Held acks racing the replays of a redeliver-all, on Shared.

    Each subscription's consumer receives every message, acks half of them (the first half, or
    every other one, which keeps the mark-delete position back) and at once asks for a
    redeliver-all. The client holds acks for up to 100 ms and sends the redeliver-all at
    once, so the broker replays entries whose ack is on its way, and the ack can arrive after
    the dispatcher added a replay to the pending acks but before the connection's event loop
    wrote it (the plugin's DISPATCH comes from that write). The broker then removed the replay
    from the pending acks with its unacked count; ackstate must end with the same count. Nothing
    is redelivered afterwards, so a wrong count stays to be judged.

    Played by ``tests/pulsar/stress.py``, not by the judge: it makes hundreds of races a play,
    and the plugin reads them through a private field of the broker's pending acks
    (``PendingAckRemovals``), which the stress tool measures over many rounds.
    """
    topic = run.topic("ack-race")
    consumers = [run.subscribe(topic, f"sub-{i}", pulsar.ConsumerType.Shared, f"ar-{i}") for i in range(12)]
    produce(run, topic, 1000)
    got = [receive(consumer, 1000) for consumer in consumers]
    rng = random.Random(5)
    for i, (consumer, msgs) in enumerate(zip(consumers, got, strict=True)):
        for m in msgs[:500] if i % 2 == 0 else msgs[1::2]:
            consumer.acknowledge(m)
        consumer.redeliver_unacknowledged_messages()
        time.sleep(rng.uniform(0.0, 0.1))


def cursor_operations(run: Run) -> None:
    """The broker moves cursors itself: consumers' seeks, and the admin API's reset-cursor, skip,
    skip-all, expire-messages and namespace clear-backlog, each over ack holes or pending acks.

    No consumer command carries these: the broker applies them to the managed cursor
    (``PersistentSubscription.resetCursor``, ``skipMessages``, ``clearBacklog``), and the plugin
    emits the result as RESET_CURSOR or MARK_DELETE. A seek also disconnects the subscription's
    consumers without a hook, and they subscribe again.
    """
    # a seek to a message id over holes: the broker forgets the holes
    topic = run.topic("seek")
    consumer = run.subscribe(topic, "s", pulsar.ConsumerType.Exclusive, "seek-c")
    produce(run, topic, 20)
    msgs = receive(consumer, 20)
    for i in (0, 1, 2, 5, 7, 9):
        consumer.acknowledge(msgs[i])
    wait_for_backlog(run, topic, "s", 14)
    consumer.seek(msgs[3].message_id())
    receive(consumer, 17)  # what the reset makes unacked again is sent again
    # a seek to a publish time on a Shared subscription whose consumer holds entries
    topic = run.topic("seek-time")
    consumer = run.subscribe(topic, "s", pulsar.ConsumerType.Shared, "seek-time-c", receiver_queue_size=5)
    produce(run, topic, 10)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(run, topic, 10)
    got = receive(consumer, 5)
    consumer.acknowledge(got[0])
    consumer.acknowledge(got[3])
    wait_for_backlog(run, topic, "s", 18)
    consumer.seek(middle)
    receive(consumer, 5)
    # the admin API's reset-cursor to a message id, on a subscription whose consumer left
    topic = run.topic("admin-reset")
    left = run.subscribe(topic, "s", pulsar.ConsumerType.Failover, "admin-reset-c")
    produce(run, topic, 15)
    got = receive(left, 15)
    left.acknowledge_cumulative(got[12])
    wait_for_backlog(run, topic, "s", 2)
    left.close()
    run.consumers.remove(left)
    target = got[4].message_id()
    run.broker.admin(
        admin_path(topic) + "/subscription/s/resetcursor",
        "POST",
        {"ledgerId": target.ledger_id(), "entryId": target.entry_id(), "partitionIndex": -1},
    )
    # the admin API's skip over holes (skipped entries exclude the acked ones)
    topic = run.topic("skip")
    consumer = run.subscribe(topic, "s", pulsar.ConsumerType.Exclusive, "skip-c")
    produce(run, topic, 20)
    msgs = receive(consumer, 20)
    for i in (1, 2, 6, 15):
        consumer.acknowledge(msgs[i])
    wait_for_backlog(run, topic, "s", 16)
    run.broker.admin(admin_path(topic) + "/subscription/s/skip/4", "POST", None)
    # skip-all on a Shared subscription whose consumer holds entries: it keeps them
    topic = run.topic("skip-all")
    consumer = run.subscribe(topic, "s", pulsar.ConsumerType.Shared, "skip-all-c", receiver_queue_size=5)
    produce(run, topic, 20)
    consumer.acknowledge(receive(consumer, 5)[1])
    wait_for_backlog(run, topic, "s", 19)
    run.broker.admin(admin_path(topic) + "/subscription/s/skip_all", "POST", None)
    # the admin API's expire-messages: by publish time (the expiry monitor mark-deletes after the
    # answer) and by position, over a hole above what expires
    topic = run.topic("expire")
    by_time = run.subscribe(topic, "by-time", pulsar.ConsumerType.Exclusive, "expire-time-c")
    by_position = run.subscribe(topic, "by-position", pulsar.ConsumerType.Exclusive, "expire-position-c")
    produce(run, topic, 10)
    time.sleep(2)
    produce(run, topic, 5)
    for consumer in (by_time, by_position):
        msgs = receive(consumer, 15)
        consumer.acknowledge(msgs[12])
    wait_for_backlog(run, topic, "by-time", 14)
    wait_for_backlog(run, topic, "by-position", 14)
    run.broker.admin(admin_path(topic) + "/subscription/by-time/expireMessages/1", "POST", None)
    target = msgs[6].message_id()
    run.broker.admin(
        admin_path(topic) + "/subscription/by-position/expireMessages",
        "POST",
        {"ledgerId": target.ledger_id(), "entryId": target.entry_id(), "isExcluded": False},
    )
    # a namespace's clear-backlog of one subscription name (every topic there must have it)
    make_namespace(run.broker, CLEARED_NAMESPACE)
    topic = run.topic("clear-backlog", partitions=2, ns=CLEARED_NAMESPACE)
    consumer = run.subscribe(topic, "cleared", pulsar.ConsumerType.Exclusive, "cleared-c")
    kept = run.subscribe(topic, "kept", pulsar.ConsumerType.Exclusive, "kept-c")
    produce(run, topic, 12)  # no key: round robin, so both partitions have entries
    consumer.acknowledge(receive(consumer, 12)[2])
    receive(kept, 12)
    time.sleep(0.5)  # the ack reaches the broker
    run.broker.admin(f"/admin/v2/namespaces/{CLEARED_NAMESPACE}/clearBacklog/cleared", "POST", None)


def message_ttl(run: Run) -> None:
    """Message TTL: the broker's expiry monitor mark-deletes what is older than the TTL, on its
    timer and when the topic's policies change (``PersistentTopic.checkMessageExpiry``). No
    request or hook shows it; the plugin's mark-delete sweep emits the MARK_DELETE. It passes an
    ack hole (absorbed), leaves one above what expires, and passes entries a Shared consumer
    holds (it keeps them)."""
    topic = run.topic("ttl")
    shared = run.subscribe(topic, "shared", pulsar.ConsumerType.Shared, "ttl-shared", receiver_queue_size=5)
    exclusive = run.subscribe(topic, "exclusive", pulsar.ConsumerType.Exclusive, "ttl-x")
    produce(run, topic, 12)
    exclusive.acknowledge(receive(exclusive, 12)[3])
    shared.acknowledge(receive(shared, 5)[1])
    time.sleep(TTL_S + 2)  # the first twelve are older than the TTL
    produce(run, topic, 4)
    exclusive.acknowledge(receive(exclusive, 4)[1])
    wait_for_backlog(run, topic, "exclusive", 14)
    # a topic policy's change runs the expiry check at once (the timer's is minutes apart)
    run.broker.admin(admin_path(topic) + f"/messageTTL?messageTTL={TTL_S}", "POST", None)
    wait_for_backlog(run, topic, "exclusive", 3)
    wait_for_backlog(run, topic, "shared", 4)
    # no later check expires the last four while the other scenarios play
    run.broker.admin(admin_path(topic) + "/messageTTL", "DELETE", None)


def unsubscribes(run: Run) -> None:
    """Subscriptions deleted: by their consumer's unsubscribe, by the admin API, and one made
    again right after (``PersistentSubscription.delete``; the plugin emits UNSUBSCRIBE)."""
    topic = run.topic("unsubscribe")
    gone = run.subscribe(topic, "gone", pulsar.ConsumerType.Shared, "gone-c", receiver_queue_size=5)
    run.subscribe(topic, "kept", pulsar.ConsumerType.Shared, "kept-c", receiver_queue_size=5)
    produce(run, topic, 12)
    gone.acknowledge(receive(gone, 5)[2])
    gone.unsubscribe()
    run.consumers.remove(gone)
    # an idle subscription deleted by the admin API once its consumer left
    idle = run.subscribe(topic, "idle", pulsar.ConsumerType.Exclusive, "idle-c")
    idle.acknowledge(receive(idle, 3)[1])
    idle.close()
    run.consumers.remove(idle)
    run.broker.admin(admin_path(topic) + "/subscription/idle", "DELETE", None)
    # unsubscribed, then made again under the same name: it starts afresh
    again = run.subscribe(topic, "again", pulsar.ConsumerType.Exclusive, "again-c")
    again.acknowledge(receive(again, 4)[0])
    again.unsubscribe()
    run.consumers.remove(again)
    again = run.subscribe(topic, "again", pulsar.ConsumerType.Failover, "again-c2")
    produce(run, topic, 3)
    receive(again, 3)


def inactive_subscription(run: Run) -> None:
    """An inactive subscription's expiry: the broker deletes a subscription with no consumer
    once it has been inactive for the namespace's ``subscriptionExpirationTimeMinutes``
    (``PersistentTopic.checkInactiveSubscriptions``, every
    ``subscriptionExpiryCheckIntervalInMinutes``). No hook or request shows it; the plugin's
    sweep emits the UNSUBSCRIBE. Not in ``SCENARIOS``: both settings are whole minutes, so it
    takes two; ``python -m tests.pulsar.stress inactive_subscription`` plays it."""
    make_namespace(run.broker, EXPIRING_NAMESPACE)
    run.broker.admin(f"/admin/v2/namespaces/{EXPIRING_NAMESPACE}/subscriptionExpirationTime", "POST", 1)
    topic = run.topic("inactive", ns=EXPIRING_NAMESPACE)
    idle = run.subscribe(topic, "idle", pulsar.ConsumerType.Exclusive, "idle-c")
    kept = run.subscribe(topic, "kept", pulsar.ConsumerType.Shared, "kept-c")
    produce(run, topic, 6)
    idle.acknowledge(receive(idle, 6)[2])
    kept.acknowledge(receive(kept, 6)[4])
    idle.close()
    run.consumers.remove(idle)
    wait_until(
        lambda: "idle" not in run.broker.admin(admin_path(topic) + "/stats")["subscriptions"],
        f"{topic}: the broker never deleted the idle subscription",
        timeout_s=200,
        step_s=1,
    )


def v1_admin_paths(run: Run) -> None:
    """The admin API's v1 paths (``/admin/persistent/property/cluster/namespace/topic/...``, a
    v1 namespace's topics) move cursors as the v2 ones do: a reset-cursor to a message id of a
    subscription whose consumer left, and a skip over ack holes with the consumer connected."""
    create_once(run.broker, f"/admin/namespaces/{V1_NAMESPACE}", None)
    topic = run.topic("v1", ns=V1_NAMESPACE)
    left = run.subscribe(topic, "reset", pulsar.ConsumerType.Failover, "v1-reset-c")
    skipped = run.subscribe(topic, "skipped", pulsar.ConsumerType.Exclusive, "v1-skip-c")
    produce(run, topic, 15)
    got = receive(left, 15)
    ack_every(left, got, 2)
    left.close()
    run.consumers.remove(left)
    msgs = receive(skipped, 15)
    for i in (1, 2, 6):
        skipped.acknowledge(msgs[i])
    wait_for_backlog(run, topic, "skipped", 12)
    target = got[5].message_id()
    run.broker.admin(
        admin_path(topic) + "/subscription/reset/resetcursor",
        "POST",
        {"ledgerId": target.ledger_id(), "entryId": target.entry_id(), "partitionIndex": -1},
    )
    run.broker.admin(admin_path(topic) + "/subscription/skipped/skip/4", "POST", None)


def admin_subscriptions(run: Run) -> None:
    """Subscriptions the admin API makes with no consumer (``pulsar-admin topics
    create-subscription``: ``PersistentTopicsBase.internalCreateSubscription``, which makes the
    subscription at the last entry and then resets its cursor to the message id asked for).

    Made at the latest entry (the default, then more messages), at the earliest, and at a
    message id; one a consumer joins afterwards, one a skip moves, one deleted and made again,
    and one on a partitioned topic's name, which the broker makes on each partition through its
    own admin client. The broker shows each with type "None" until a consumer joins. No hook
    sees any of it; the plugin emits CREATE_SUBSCRIPTION once the broker has answered.
    """
    topic = run.topic("admin-create")
    producer = run.client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(12)]
    path = admin_path(topic) + "/subscription/"
    run.broker.admin(path + "latest", "PUT", None)
    run.broker.admin(path + "earliest", "PUT", {"ledgerId": -1, "entryId": -1})
    for name in ("at-id", "skipped", "again"):
        run.broker.admin(path + name, "PUT", {"ledgerId": ids[4].ledger_id(), "entryId": ids[4].entry_id()})
    run.broker.admin(path + "joined", "PUT", {"ledgerId": ids[1].ledger_id(), "entryId": ids[1].entry_id()})
    for i in range(4):
        producer.send(f"later-{i}".encode())
    producer.close()
    run.broker.admin(path + "skipped/skip/3", "POST", None)
    run.broker.admin(path + "again", "DELETE", None)
    run.broker.admin(path + "again", "PUT", {"ledgerId": ids[8].ledger_id(), "entryId": ids[8].entry_id()})
    joined = run.subscribe(topic, "joined", pulsar.ConsumerType.Shared, "joined-c")
    ack_every(joined, receive(joined, 14), 3)
    # on a partitioned topic's name: one request per partition, each to the partition's owner
    parts = run.topic("admin-create-parts", partitions=2)
    produce(run, parts, 8)  # no key: round robin, so both partitions have entries
    run.broker.admin(admin_path(parts) + "/subscription/made", "PUT", {"ledgerId": -1, "entryId": -1})


def send_ids(run: Run, topic: str, producer_name: str, ids: range) -> None:
    """One producer sends ``ids`` as its sequence ids; ``run.receipts`` records each answer."""
    receipts = run.receipts.setdefault(producer_name, [])
    producer = run.client.create_producer(topic, producer_name=producer_name)
    for sequence_id in ids:
        msg_id = producer.send(f"s{sequence_id}".encode(), sequence_id=sequence_id)
        receipts.append((sequence_id, f"{msg_id.ledger_id()}:{msg_id.entry_id()}"))
    producer.close()


def wait_until_deleted(run: Run, topic: str) -> None:
    """Until the broker no longer lists ``topic`` in its namespace."""
    listed = f"/admin/v2/persistent/{namespace_of(topic)}"
    gone = f"{topic}: the broker never deleted it"
    wait_until(lambda: topic not in run.broker.admin(listed), gone, step_s=0.2)


def deleted_topics(run: Run) -> None:
    """Topics deleted, then made again under their names by a consumer and a producer: by the
    admin API (with subscriptions and ack holes left), and by the broker's inactive-topic GC
    (``PersistentTopic.checkGC``, after topic policies of one second and no retention). Either way
    ``PersistentTopic.delete`` unsubscribes every subscription and deletes the managed ledger,
    the deduplication cursor with it: the topic made again has new ledgers, only its new
    subscriptions, and takes the producer's old sequence ids as new. The plugin emits
    DELETE_TOPIC when the broker lets go of the deleted topic."""
    topic = run.topic("deleted", ns=DEDUP_NAMESPACE)
    kept = run.subscribe(topic, "kept", pulsar.ConsumerType.Exclusive, "del-kept")
    gone = run.subscribe(topic, "gone", pulsar.ConsumerType.Shared, "del-gone", receiver_queue_size=5)
    send_ids(run, topic, "del-producer", range(0, 12))
    ack_every(kept, receive(kept, 12), 3)
    gone.acknowledge(receive(gone, 5)[1])
    time.sleep(0.5)  # the acks reach the broker
    for consumer in (kept, gone):
        consumer.close()
        run.consumers.remove(consumer)
    run.broker.admin(admin_path(topic), "DELETE", None)
    again = run.subscribe(topic, "kept", pulsar.ConsumerType.Failover, "del-again")
    send_ids(run, topic, "del-producer", range(0, 4))
    again.acknowledge(receive(again, 4)[1])

    topic = run.topic("inactive-topic", ns=DEDUP_NAMESPACE)
    consumer = run.subscribe(topic, "s", pulsar.ConsumerType.Exclusive, "gc-c")
    send_ids(run, topic, "gc-producer", range(0, 6))
    consumer.acknowledge(receive(consumer, 6)[2])
    consumer.unsubscribe()  # delete_when_no_subscriptions: no subscription may be left
    run.consumers.remove(consumer)
    # the GC spares a topic whose retention keeps its data (the judge's brokers keep all)
    run.broker.admin(
        admin_path(topic) + "/retention", "POST", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    )
    policy = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 1}
    run.broker.admin(
        admin_path(topic) + "/inactiveTopicPolicies", "POST", {**policy, "deleteWhileInactive": True}
    )
    wait_until_deleted(run, topic)
    again = run.subscribe(topic, "s", pulsar.ConsumerType.Shared, "gc-again")
    send_ids(run, topic, "gc-producer", range(0, 3))
    again.acknowledge(receive(again, 3)[0])


def make_namespace(broker: StandaloneBroker, namespace: str) -> None:
    """``namespace``, unless an earlier run on this broker made it."""
    create_once(broker, f"/admin/v2/namespaces/{namespace}", {})


def create_once(broker: StandaloneBroker, path: str, body: Any) -> None:
    """PUT ``path``; an answer that it exists already (409: an earlier run made it) is fine."""
    try:
        broker.admin(path, "PUT", body, quiet=True)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


def subscription_stats(run: Run, topic: str, sub: str) -> dict[str, Any]:
    """The broker's stats of ``sub`` (``/stats``), as the admin API gives them now."""
    return run.broker.admin(admin_path(topic) + "/stats")["subscriptions"][sub]


def wait_for_backlog(run: Run, topic: str, sub: str, backlog: int, timeout_s: float = 30) -> None:
    """Until the broker's ``msgBacklog`` of ``sub`` is ``backlog`` (an ack it has applied)."""
    wait_until(
        lambda: subscription_stats(run, topic, sub)["msgBacklog"] == backlog,
        f"{topic} {sub}: msgBacklog never reached {backlog}",
        timeout_s=timeout_s,
    )


def wait_until(
    done: Callable[[], bool], failure: str | Callable[[], str], *, timeout_s: float = 30, step_s: float = 0.05
) -> None:
    """Ask ``done`` every ``step_s`` until it is true; ``TimeoutError(failure)`` after ``timeout_s``
    (a callable ``failure`` is asked for its text then, to name what was still missing)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(failure() if callable(failure) else failure)
        time.sleep(step_s)


def close_and_reconnect(run: Run) -> None:
    """A Shared consumer closes with messages unacked; another takes them; the first comes back."""
    topic = run.topic("reconnect")
    first = run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "rc-a", receiver_queue_size=5)
    produce(run, topic, 8)
    msgs = receive(first, 4)
    first.acknowledge(msgs[0])
    first.close()
    run.consumers.remove(first)
    second = run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "rc-b", receiver_queue_size=5)
    ack_every(second, receive(second, 5), 2)
    run.subscribe(topic, "sub", pulsar.ConsumerType.Shared, "rc-a", receiver_queue_size=5)


def dedup_resend(run: Run) -> None:
    """A producer resends sequence ids with deduplication on: the broker answers -1:-1."""
    topic = run.topic("dedup", ns=DEDUP_NAMESPACE)
    run.subscribe(topic, "sub", pulsar.ConsumerType.Exclusive, "dd-1")
    for ids in (range(0, 5), range(3, 8)):
        send_ids(run, topic, "dd-producer", ids)


def dedup_batches(run: Run) -> None:
    """Batched sends resent with deduplication on, by a second producer of the same name.

    The Python (C++) client sends a batch with the sequence id of its first message and no
    highest sequence id, so the broker judges and records a batch by that one id
    (``MessageDeduplication.isDuplicateNormal``): of the resent batches 3-7 and 8-12, the first
    is a duplicate (3 is not above 5, the last recorded) and the second is not. ``run.receipts``
    gets one receipt per batch, under its first sequence id: every message of it got that one.
    """
    topic = run.topic("dedup-batches", ns=DEDUP_NAMESPACE)
    run.subscribe(topic, "sub", pulsar.ConsumerType.Exclusive, "ddb-1")
    receipts = run.receipts.setdefault("ddb-producer", [])
    for ids in (range(0, 10), range(3, 13), range(13, 18)):
        producer = run.client.create_producer(
            topic,
            producer_name="ddb-producer",
            batching_enabled=True,
            batching_max_messages=5,
            batching_max_publish_delay_ms=1000,
        )
        for first in range(ids.start, ids.stop, 5):
            got: set[str] = set()
            for sequence_id in range(first, first + 5):
                producer.send_async(
                    f"b{sequence_id}".encode(),
                    lambda _, msg_id, got=got: got.add(f"{msg_id.ledger_id()}:{msg_id.entry_id()}"),
                    sequence_id=sequence_id,
                )
            producer.flush()
            (receipt,) = got  # one entry, or -1:-1 for all of a duplicate batch
            receipts.append((first, receipt))
        producer.close()


def ack_beyond_last_entry(run: Run) -> None:
    """One ack command whose ids end in a position beyond the last entry.

    The client sends the individual acks of 100 ms as one command, its ids in position order,
    so the made-up position beyond the last entry comes last. The broker's
    ``ManagedCursorImpl.asyncDelete`` applies the ids before it and fails the call there; on
    Shared, ``Consumer.individualAckNormal`` has already taken the real ids out of the pending
    acks.
    """
    topic = run.topic("ack-beyond")
    exclusive = run.subscribe(topic, "exclusive", pulsar.ConsumerType.Exclusive, "ab-x")
    shared = run.subscribe(topic, "shared", pulsar.ConsumerType.Shared, "ab-s")
    produce(run, topic, 6)
    for consumer in (exclusive, shared):
        msgs = receive(consumer, 6)
        last = msgs[-1].message_id()
        beyond = pulsar.MessageId(ledger_id=last.ledger_id(), entry_id=last.entry_id() + 5)
        for m in (msgs[1], msgs[3]):
            consumer.acknowledge(m)
        consumer.acknowledge(beyond)


def non_persistent(run: Run) -> None:
    """A non-persistent topic: Shared and Exclusive subscriptions, some acks."""
    topic = run.topic("np", persistent=False)
    shared = run.subscribe(topic, "shared", pulsar.ConsumerType.Shared, "np-s")
    exclusive = run.subscribe(topic, "exclusive", pulsar.ConsumerType.Exclusive, "np-x")
    produce(run, topic, 10)
    for consumer in (shared, exclusive):
        ack_every(consumer, receive(consumer, 10), 2)


UNACKED_LIMIT = 50_000  # maxUnackedMessagesPerConsumer: Pulsar's default, and ackstate's
LIMIT_MESSAGES = 60_000


def unacked_limit(run: Run) -> None:
    """Shared consumers that stop acking are blocked at ``maxUnackedMessagesPerConsumer``.

    60 batches of 1,000 messages. On ``blocked`` the consumer receives all it is sent and acks
    nothing: the broker stops at the entry that takes it to the limit (``Consumer.
    incrementUnackedMessages``) and it stays blocked. On ``unblocked`` the consumer then acks all
    but 20,000 of what it got, which takes it below half the limit (``Consumer.
    updateBlockedConsumerOnUnackedMsgs``): the broker unblocks it and sends the rest, which it
    leaves unacked. The broker's own stats must show the block, or the scenario proves nothing.
    """
    topic = run.topic("unacked-limit")
    blocked = run.subscribe(topic, "blocked", pulsar.ConsumerType.Shared, "ul-b")
    unblocked = run.subscribe(topic, "unblocked", pulsar.ConsumerType.Shared, "ul-u")
    produce(run, topic, LIMIT_MESSAGES, batch=1000)
    got: dict[str, list[pulsar.Message]] = {}
    for consumer, sub in ((blocked, "blocked"), (unblocked, "unblocked")):
        got[sub] = receive(consumer, LIMIT_MESSAGES, 1000)
        stats = consumer_stats(run, topic, sub)
        if not UNACKED_LIMIT <= len(got[sub]) < LIMIT_MESSAGES or not stats["blockedConsumerOnUnackedMsgs"]:
            raise AssertionError(f"{topic} {sub}: not blocked after {len(got[sub])} messages: {stats}")
    for m in got["unblocked"][:-20_000]:
        unblocked.acknowledge(m)
    left = LIMIT_MESSAGES - len(got["unblocked"])
    rest = receive(unblocked, left, RECEIVE_MS)
    if len(rest) != left:
        raise AssertionError(f"{topic} unblocked: {len(rest)} of the {left} messages left came")


def consumer_stats(run: Run, topic: str, sub: str) -> dict[str, Any]:
    """The broker's stats of the one consumer of ``sub``."""
    (consumer,) = subscription_stats(run, topic, sub)["consumers"]
    return consumer


SCENARIOS: tuple[Callable[[Run], None], ...] = (
    ack_timeout,  # first: its 10 s run while the others play
    cursor_operations,  # then the longest (11, 6, 6, 4 s on 2026-12-07), so none starts last
    unacked_limit,
    message_ttl,
    failover_cumulative,
    exclusive_holes,
    exclusive_cumulative,
    failover_switch,
    shared_batches,
    key_shared,
    key_shared_close,
    batch_index_acks,
    batch_index_redelivery,
    negative_acks,
    dead_letter,
    redeliver_all,
    close_and_reconnect,
    dedup_resend,
    dedup_batches,
    ack_beyond_last_entry,
    non_persistent,
    unsubscribes,
    deleted_topics,
    v1_admin_paths,
    admin_subscriptions,
)


def restart_in_the_middle(run: Run) -> None:
    """Holes, pending acks and a seek, a graceful broker restart, then more acks and messages;
    then the broker killed (``kill -9``) and started again, and more acks. One subscription's
    consumer has left before the restart and never comes back.

    The clients reconnect by themselves; what the broker recovered (the persisted cursor,
    redelivery of what was unacked) and what happens after must still match ackstate. The
    topic each start loads counts its backlog afresh (``ManagedCursorImpl.recoveredCursor``),
    where the seek had left the broker's figure short by the acks it forgot; and the killed
    broker closed no consumer. The plugin's LOAD_TOPIC tells ackstate both.

    A second topic has a message TTL: what aged past it while the broker was down expires as
    the topic loads (its policy's ``checkMessageExpiry``), before any hook sees the topic; the
    plugin's MARK_DELETE after LOAD_TOPIC tells ackstate.
    """
    ttl_topic = run.topic("restart-ttl")
    expiring = run.subscribe(ttl_topic, "expiring", pulsar.ConsumerType.Exclusive, "rs-ttl")
    produce(run, ttl_topic, 8)
    produced = time.monotonic()
    got = receive(expiring, 8)
    for i in (2, 5):
        expiring.acknowledge(got[i])
    wait_for_backlog(run, ttl_topic, "expiring", 6)
    # younger than the TTL now, so nothing expires until the broker loads the topic again
    run.broker.admin(admin_path(ttl_topic) + f"/messageTTL?messageTTL={TTL_S}", "POST", None)
    topic = run.topic("restart")
    exclusive = run.subscribe(topic, "exclusive", pulsar.ConsumerType.Exclusive, "rs-x")
    shared = run.subscribe(topic, "shared", pulsar.ConsumerType.Shared, "rs-s", receiver_queue_size=10)
    seeking = run.subscribe(topic, "seeking", pulsar.ConsumerType.Exclusive, "rs-seek")
    left = run.subscribe(topic, "left", pulsar.ConsumerType.Shared, "rs-left")
    consumers = (exclusive, shared, seeking)
    produce(run, topic, 25)
    # a subscription whose consumer leaves for good: the loaded topics show it with no
    # dispatcher, type "None" (PersistentSubscription.getTypeString), and its holes
    ack_every(left, receive(left, 25), 3)
    left.close()
    run.consumers.remove(left)
    held = receive(exclusive, 25)
    for i in (0, 1, 3, 7, 12, 13, 20):
        exclusive.acknowledge(held[i])
    ack_every(shared, receive(shared, 10), 3)
    got = receive(seeking, 25)
    for i in (0, 1, 2, 5, 7):
        seeking.acknowledge(got[i])
    wait_for_backlog(run, topic, "seeking", 20)
    seeking.seek(got[3].message_id())
    wait_for_backlog(run, topic, "seeking", 20)  # 22 unacked, less the 2 acks the seek forgot
    time.sleep(max(0.5, TTL_S + 1 - (time.monotonic() - produced)))  # acks arrive, TTL passes
    run.broker.restart()
    _loaded(run, (ttl_topic, topic))
    _reconnected((*consumers, expiring))
    # the broker redelivers from the persisted cursor: ack some of what comes back
    for consumer in consumers:
        again = receive(consumer, 1, 20_000) + drain(consumer)
        ack_every(consumer, again, 2)
    produce(run, topic, 5)
    for consumer in consumers:
        ack_every(consumer, drain(consumer), 4)
    time.sleep(1.5)  # each ack persisted (no mark-delete rate limit), the plugin's files written
    run.broker.kill()
    run.broker.start(wipe=False)
    _loaded(run, (ttl_topic, topic))
    _reconnected(consumers)
    for consumer in consumers:
        ack_every(consumer, receive(consumer, 1, 20_000) + drain(consumer), 3)


def _loaded(run: Run, topics: tuple[str, ...], timeout: float = 240.0) -> None:
    """Until the started broker answers the stats of each topic, which loads it.

    The broker allows a load ``topicLoadTimeoutSeconds`` (60 s), then fails it, and the next
    call loads the topic afresh: a stats call that times out, or a load the broker gave up, is
    asked again until ``timeout``."""
    deadline = time.monotonic() + timeout
    for topic in topics:
        while True:
            try:
                run.broker.admin(admin_path(topic) + "/stats", quiet=True)
                break
            except OSError as exc:  # a timeout, or the load failed (HTTPError is an OSError)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{topic} did not load after {timeout:.0f} s: {exc!r}") from exc
                time.sleep(1.0)


def _reconnected(consumers: tuple[pulsar.Consumer, ...], timeout: float = 90.0) -> None:
    """Wait until the clients reconnected to the started broker: a consumer that does not means
    its topic did not load, and the rest of the scenario would only time out on it."""
    wait_until(
        lambda: all(c.is_connected() for c in consumers),
        lambda: (
            f"not reconnected after {timeout:.0f} s: "
            + ", ".join(f"{c.topic()} {c.subscription_name()}" for c in consumers if not c.is_connected())
        ),
        timeout_s=timeout,
        step_s=0.2,
    )
