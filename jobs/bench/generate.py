"""``ackstate generate``: a synthetic, deterministic Pulsar workload as JSON Lines.

The demo and the benchmarks need a realistic event log of any size without a Pulsar cluster.
Each topic partition is simulated on its own, the way a broker would report it:

* PUBLISH of entries into ledgers that roll over (a new, larger ledger id every few hundred
  entries, entry ids from 0 in each), some of them batches of 2..10 messages, with the
  producer's sequence ids;
* SUBSCRIBE of every consumer early on (Exclusive, Failover, Shared and Key_Shared mixed;
  mostly ``Earliest``), DISPATCH of published entries to the consumer the broker would pick;
* individual ACKs out of order, grouped like the client's ack grouping, that leave holes
  (about 1% of entries are never acked), cumulative ACKs on Exclusive/Failover only,
  batch-index ACKs with Pulsar ``ack_set`` words and a plain ACK to finish the batch;
* occasional NACK (redispatched after the nack delay), REDELIVER (with ids on Shared and
  Key_Shared, all on Exclusive/Failover) and, on Shared, a consumer that closes and comes back.

Acks only name entries already published (and dispatched) in their partition. Partitions
interleave at random in the output; within one partition the records are in ``seq`` order,
and the files are consecutive slices of one stream, so any prefix of the files is a prefix
of every partition's stream. A chosen fraction of the records is malformed (truncated JSON,
unknown type, negative entry id, missing required field) and changes no state.

Everything comes from one seeded `random.Random`: the same arguments give the same bytes.
Plain dicts and one C JSON encoder keep it at several hundred thousand events per second.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from jobs.platform import locations
from jobs.platform.errors import AckstateError
from schemas.validation import COMMON_REQUIRED, REQUIRED

log = logging.getLogger("ackstate.generate")

FILE_PATTERN = "events-{:05d}.jsonl"
BASE_EVENT_TIME = 1_700_000_000_000  # fixed, so that output does not depend on the clock
MALFORMED_KEY = "_malformed"  # in `iter_events` output: the kind of a malformed record
RAW_KEY = "_raw"  # in `iter_events` output: the line of a record that is not a JSON object
MALFORMED_KINDS = ("truncated_json", "unknown_type", "negative_entry_id", "missing_field")

DEFAULT_EVENTS = 100_000
DEFAULT_TOPICS = 4
DEFAULT_PARTITIONS = 2
DEFAULT_SUBSCRIPTIONS = 4
DEFAULT_FILES = 8

_TENANTS = ("acme", "globex", "initech")
_NAMESPACES = ("prod", "staging")
_TOPIC_NAMES = ("orders", "payments", "clicks", "inventory", "audit-log", "telemetry")
_ROLES = ("billing", "analytics", "audit", "search", "archiver", "alerts", "ml-features", "replicator")
_SUB_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")
_UNKNOWN_TYPES = ("TELEPORT", "ack", "PURGE", "Subscribe")

# Shape of the workload (probabilities per event or per entry).
_BATCH_RATE = 0.2  # entries that are batches of 2..10 messages
_KEY_RATE = 0.6  # entries with a message key
_KEYS = 32
_HOLE_RATE = 0.01  # dispatched entries never acked (until redelivered)
_BATCH_INDEX_ACK_RATE = 0.25  # batch entries acked index by index
_ACK_GROUP_RATE = 0.3  # ACKs that carry several message ids (client ack grouping)
_WINDOW = 40  # unacked entries per consumer before acking takes priority
_NACK_RATE = 0.01
_REDELIVER_RATE = 0.005
_CLOSE_RATE = 0.001
_LEDGER_ENTRIES = (100, 1000)  # a ledger rolls over after this many entries
_TIME_STEP_MS = 15  # max event-time step within one partition

_ENCODE = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode

# One record of the simulation: an event dict, or (when writing files) its ready JSON line.
Record = dict[str, Any] | str


@dataclass(frozen=True)
class GenerateSummary:
    """What `generate` wrote; the demo prints it."""

    out: Path
    events: int
    malformed: int
    topics: int
    partitions: int  # topic partitions (a non-partitioned topic counts as one)
    subscriptions: int  # cursors: subscriptions over all topic partitions
    files: tuple[Path, ...]
    seconds: float = field(default=0.0, compare=False)

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["files"] = [p.name for p in self.files]
        d["seconds"] = round(self.seconds, 3)
        d["events_per_second"] = round(self.events_per_second)
        return d


# --------------------------------------------------------------------------- public surface


def generate(
    out: Path,
    *,
    events: int = DEFAULT_EVENTS,
    topics: int = DEFAULT_TOPICS,
    partitions: int = DEFAULT_PARTITIONS,
    subscriptions_per_topic: int = DEFAULT_SUBSCRIPTIONS,
    malformed_rate: float = 0.0,
    seed: int = 0,
    files: int = DEFAULT_FILES,
    overwrite: bool = False,
) -> GenerateSummary:
    """Write `events` records as ``events-NNNNN.jsonl`` files under `out`.

    The files are consecutive slices of one stream (file 0 first); their modification times
    increase in that order, since a file stream source picks files up by time. Refuses to mix
    with an earlier run's files unless `overwrite` (then those files are removed first).
    """
    started = time.perf_counter()
    sim = _Simulation(
        events, topics, partitions, subscriptions_per_topic, malformed_rate, seed, as_lines=True
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    existing = sorted(out.glob("events-*.jsonl"))
    if existing and not overwrite:
        raise AckstateError(
            f"{out} already holds {len(existing)} events-*.jsonl files of an earlier run; "
            "choose an empty directory or remove them first"
        )
    for old in existing:
        old.unlink()
    files = max(1, min(files, events)) if events > 0 else 1
    bounds = [events * k // files for k in range(files + 1)]
    paths: list[Path] = []
    records = sim.lines()
    for k in range(files):
        path = out / FILE_PATTERN.format(k)
        with path.open("w", encoding="utf-8", newline="\n") as fh:
            left = bounds[k + 1] - bounds[k]
            while left > 0:
                chunk = list(islice(records, min(left, 8192)))
                left -= len(chunk)
                fh.write("\n".join(chunk))
                fh.write("\n")
        paths.append(path)
    now = time.time()
    for k, path in enumerate(paths):
        stamp = now - (files - k)
        os.utime(path, (stamp, stamp))
    summary = GenerateSummary(
        out=out,
        events=events,
        malformed=sim.malformed,
        topics=topics,
        partitions=len(sim.units),
        subscriptions=sum(len(u.subs) for u in sim.units),
        files=tuple(paths),
        seconds=time.perf_counter() - started,
    )
    log.info(
        "wrote %d events (%d malformed) for %d topic partitions in %d files under %s, %.0f events/s",
        summary.events,
        summary.malformed,
        summary.partitions,
        len(paths),
        out,
        summary.events_per_second,
    )
    return summary


def iter_events(
    *,
    events: int = DEFAULT_EVENTS,
    topics: int = DEFAULT_TOPICS,
    partitions: int = DEFAULT_PARTITIONS,
    subscriptions_per_topic: int = DEFAULT_SUBSCRIPTIONS,
    malformed_rate: float = 0.0,
    seed: int = 0,
) -> Iterator[dict[str, Any]]:
    """The records `generate` would write, as dicts, in output order.

    A malformed record carries ``MALFORMED_KEY`` (its kind); one that is not even a JSON
    object (``truncated_json``) is ``{MALFORMED_KEY: kind, RAW_KEY: line}``. With the default
    ``malformed_rate=0`` every dict is a valid v1 event.
    """
    sim = _Simulation(events, topics, partitions, subscriptions_per_topic, malformed_rate, seed)
    yield from sim.records()


def run(args: argparse.Namespace) -> int:
    """``ackstate generate``: write the event log and print its summary as JSON."""
    summary = generate(
        locations.require_local(getattr(args, "out", None) or "./events", "--out", "generate"),
        events=_arg(args, "events", DEFAULT_EVENTS),
        topics=_arg(args, "topics", DEFAULT_TOPICS),
        partitions=_arg(args, "partitions", DEFAULT_PARTITIONS),
        subscriptions_per_topic=_arg(args, "subscriptions", DEFAULT_SUBSCRIPTIONS),
        malformed_rate=float(_arg(args, "malformed_rate", 0.0)),
        seed=_arg(args, "seed", 0),
        files=_arg(args, "files", DEFAULT_FILES),
        overwrite=bool(getattr(args, "overwrite", False)),
    )
    sys.stdout.write(json.dumps(summary.as_dict(), indent=2) + "\n")
    return 0


def _arg(args: argparse.Namespace, name: str, default: Any) -> Any:
    value = getattr(args, name, None)
    return default if value is None else value


# --------------------------------------------------------------------------- simulation


def ack_set_words(unacked: int, batch_size: int) -> list[int]:
    """Pulsar's ``ack_set``: bit i of word i // 64 set while index i is unacked, signed longs."""
    words = []
    for k in range((batch_size + 63) // 64):
        w = (unacked >> (64 * k)) & 0xFFFF_FFFF_FFFF_FFFF
        words.append(w - (1 << 64) if w >= 1 << 63 else w)
    return words


class _Sub:
    """One subscription on one topic partition, as the generator tracks it.

    `pending` is what each consumer has received and not acked; `stuck` the entries a consumer
    will never ack (the holes) until they are redelivered; `replay` what the broker will
    redispatch before reading on; `delayed` nacked entries with the time they become due.
    Entries are indexes into the partition's published list.
    """

    __slots__ = (
        "active",
        "consumers",
        "cumulative",
        "delayed",
        "earliest",
        "json_name",
        "live",
        "name",
        "names",
        "negative_ack_delay_ms",
        "next_consumer_id",
        "partial",
        "pending",
        "priority_levels",
        "read",
        "rejoin",
        "replay",
        "round_robin",
        "shared",
        "stuck",
        "sub_type",
    )

    def __init__(
        self, name: str, sub_type: str, cumulative: bool, earliest: bool, negative_ack_delay_ms: int
    ) -> None:
        self.name = name
        self.sub_type = sub_type
        self.shared = sub_type in ("Shared", "Key_Shared")
        self.json_name = json.dumps(name)
        self.cumulative = cumulative
        self.earliest = earliest
        self.negative_ack_delay_ms = negative_ack_delay_ms
        self.consumers: list[int] = []
        self.names: dict[int, str] = {}
        self.priority_levels: dict[int, int] = {}
        self.live: list[int] = []
        self.active = 0
        self.next_consumer_id = 1
        self.read = 0
        self.pending: dict[int, list[int]] = {}
        self.stuck: dict[int, list[int]] = {}
        self.partial: dict[int, int] = {}
        self.replay: deque[int] = deque()
        self.delayed: deque[tuple[int, int]] = deque()
        self.rejoin: list[str] = []
        self.round_robin = 0


class _Unit:
    """One topic partition: its clock, sequence, ledgers, published entries and subscriptions."""

    __slots__ = (
        "json_tail",
        "ledger_id",
        "ledger_room",
        "next_entry",
        "partition",
        "producers",
        "pub_entry",
        "pub_key",
        "pub_ledger",
        "pub_size",
        "seq",
        "startup",
        "subs",
        "time",
        "topic",
    )

    def __init__(self, topic: str, partition: int, start_time: int) -> None:
        self.topic = topic
        self.partition = partition
        self.json_tail = f',"topic":{json.dumps(topic)},"partition":{partition}'
        self.seq = 0
        self.time = start_time
        self.ledger_id = -1
        self.next_entry = 0
        self.ledger_room = 0
        self.pub_ledger: list[int] = []
        self.pub_entry: list[int] = []
        self.pub_size: list[int] = []
        self.pub_key: list[int] = []
        self.producers: list[list[Any]] = []  # [name, next sequence id]
        self.subs: list[_Sub] = []
        self.startup: deque[tuple[Any, ...]] = deque()


def generate_records(
    events: int,
    *,
    topics: int = DEFAULT_TOPICS,
    partitions: int = DEFAULT_PARTITIONS,
    subscriptions_per_topic: int = DEFAULT_SUBSCRIPTIONS,
    seed: int = 0,
) -> Iterator[dict[str, Any]]:
    """The well-formed records ``generate`` writes, as dicts, without files (the engine bench
    applies them directly)."""
    for record in _Simulation(events, topics, partitions, subscriptions_per_topic, 0.0, seed).records():
        assert isinstance(record, dict)
        yield record


class _Simulation:
    """The whole workload: topic partitions stepped in a seeded random interleaving."""

    def __init__(
        self,
        events: int,
        topics: int,
        partitions: int,
        subscriptions_per_topic: int,
        malformed_rate: float,
        seed: int,
        as_lines: bool = False,
    ) -> None:
        if events < 0 or topics < 1 or partitions < 0 or subscriptions_per_topic < 0:
            raise AckstateError(
                "generate needs events >= 0, topics >= 1, partitions >= 0 and subscriptions >= 0"
            )
        if not 0.0 <= malformed_rate <= 1.0:
            raise AckstateError(f"malformed rate must be within 0..1, got {malformed_rate}")
        self.events = events
        self.malformed_rate = malformed_rate
        self.malformed = 0
        self.rng = random.Random(seed)
        self.random = self.rng.random
        # When writing files, the three frequent types (PUBLISH, DISPATCH, ACK) are rendered
        # straight to their JSON line: the same bytes `_ENCODE` gives for the dict (a test
        # holds both paths equal), in a third of the time. Other types stay dicts.
        self.as_lines = as_lines
        self.prefix = f"g{seed}-"
        self.next_ledger = 10
        self.units = self._layout(topics, partitions, subscriptions_per_topic)
        self.publish_rate = 1.0 / (1.0 + 1.6 * max(1, subscriptions_per_topic))

    # ----------------------------------------------------------------- layout

    def _layout(self, topics: int, partitions: int, subs_per_topic: int) -> list[_Unit]:
        """Every other topic is partitioned (when partitions > 0); the others are not."""
        rng = self.rng
        units: list[_Unit] = []
        for t in range(topics):
            tenant = _TENANTS[t % len(_TENANTS)]
            namespace = _NAMESPACES[(t // len(_TENANTS)) % len(_NAMESPACES)]
            topic = f"persistent://{tenant}/{namespace}/{_TOPIC_NAMES[t % len(_TOPIC_NAMES)]}-{t}"
            indexes = list(range(partitions)) if partitions > 0 and t % 2 == 0 else [-1]
            sub_specs = []
            for j in range(subs_per_topic):
                role = _ROLES[j % len(_ROLES)]
                name = role if j < len(_ROLES) else f"{role}-{j // len(_ROLES)}"
                sub_type = _SUB_TYPES[(t + j) % len(_SUB_TYPES)]
                cumulative = sub_type in ("Exclusive", "Failover") and rng.random() < 0.5
                earliest = rng.random() < 0.8
                negative_ack_delay_ms = rng.choice((1000, 2000, 3000))
                consumers = {"Exclusive": 1, "Failover": 2, "Shared": rng.choice((2, 3)), "Key_Shared": 2}[
                    sub_type
                ]
                sub_specs.append((name, sub_type, cumulative, earliest, negative_ack_delay_ms, consumers))
            for p in indexes:
                unit = _Unit(topic, p, BASE_EVENT_TIME + 7 * len(units))
                unit.producers = [
                    [f"{topic.rsplit('/', 1)[1]}-producer-{k}", 0] for k in range(rng.choice((1, 2)))
                ]
                for _ in range(rng.randint(0, 3)):
                    unit.startup.append(("publish",))
                for name, sub_type, cumulative, earliest, negative_ack_delay_ms, consumers in sub_specs:
                    sub = _Sub(name, sub_type, cumulative, earliest, negative_ack_delay_ms)
                    unit.subs.append(sub)
                    for k in range(consumers):
                        # Failover on a non-partitioned topic: distinct priorities, so the
                        # broker's pick is the priority-0 consumer without the hash ring.
                        priority_level = k if sub_type == "Failover" and p < 0 else 0
                        unit.startup.append(("subscribe", sub, f"{name}-c{k + 1}", priority_level))
                units.append(unit)
        return units

    # ----------------------------------------------------------------- output

    def lines(self) -> Iterator[str]:
        """The records as JSON Lines (without newline); needs ``as_lines=True``."""
        encode = _ENCODE
        for rec in self.records():
            if rec.__class__ is str:
                yield rec
            elif MALFORMED_KEY in rec:
                yield (
                    rec[RAW_KEY]
                    if RAW_KEY in rec
                    else encode({k: v for k, v in rec.items() if k != MALFORMED_KEY})
                )
            else:
                yield encode(rec)

    def records(self) -> Iterator[Record]:
        """Dicts, or with ``as_lines`` a mix of dicts and ready JSON lines."""
        rng = self.rng
        random_ = rng.random
        units = self.units
        n_units = len(units)
        rate = self.malformed_rate
        for n in range(self.events):
            unit = units[int(random_() * n_units)]
            if rate and random_() < rate:
                self.malformed += 1
                yield self._malformed(unit, n)
            else:
                yield self._step(unit, n)

    # ----------------------------------------------------------------- events

    def _header(self, u: _Unit, n: int, type_: str) -> dict[str, Any]:
        u.seq += 1
        u.time += 1 + int(self.random() * _TIME_STEP_MS)
        return {
            "event_id": f"{self.prefix}{n}",
            "seq": u.seq,
            "event_time": u.time,
            "type": type_,
            "topic": u.topic,
            "partition": u.partition,
        }

    def _consumer_header(self, u: _Unit, n: int, type_: str, sub: _Sub, consumer_id: int) -> dict[str, Any]:
        u.seq += 1
        u.time += 1 + int(self.random() * _TIME_STEP_MS)
        return {
            "event_id": f"{self.prefix}{n}",
            "seq": u.seq,
            "event_time": u.time,
            "type": type_,
            "topic": u.topic,
            "partition": u.partition,
            "subscription": sub.name,
            "consumer_id": consumer_id,
        }

    def _consumer_line(self, u: _Unit, n: int, type_: str, sub: _Sub, consumer_id: int) -> str:
        """`_consumer_header` as the start of a JSON line (no closing brace)."""
        u.seq += 1
        u.time += 1 + int(self.random() * _TIME_STEP_MS)
        return (
            f'{{"event_id":"{self.prefix}{n}","seq":{u.seq},"event_time":{u.time},"type":"{type_}"'
            f'{u.json_tail},"subscription":{sub.json_name},"consumer_id":{consumer_id}'
        )

    def _ack_event(
        self, u: _Unit, n: int, sub: _Sub, consumer: int, ack_type: str, ids: list[dict[str, Any]]
    ) -> Record:
        if self.as_lines:
            rendered = ",".join(
                f'{{"ledger_id":{m["ledger_id"]},"entry_id":{m["entry_id"]}}}' if len(m) == 2 else _ENCODE(m)
                for m in ids
            )
            return (
                self._consumer_line(u, n, "ACK", sub, consumer)
                + f',"ack_type":"{ack_type}","message_ids":[{rendered}]}}'
            )
        ev = self._consumer_header(u, n, "ACK", sub, consumer)
        ev["ack_type"] = ack_type
        ev["message_ids"] = ids
        return ev

    def _step(self, u: _Unit, n: int) -> Record:
        if u.startup:
            action = u.startup.popleft()
            if action[0] == "publish":
                return self._publish(u, n)
            _, sub, name, priority_level = action
            return self._subscribe(u, n, sub, name, priority_level)
        rng = self.rng
        if rng.random() >= self.publish_rate and u.subs:
            sub = u.subs[int(rng.random() * len(u.subs))]
            ev = self._consume(u, n, sub)
            if ev is not None:
                return ev
        return self._publish(u, n)

    def _publish(self, u: _Unit, n: int) -> Record:
        rng = self.rng
        if u.next_entry >= u.ledger_room:
            self.next_ledger += 1 + int(rng.random() * 4)
            u.ledger_id = self.next_ledger
            u.next_entry = 0
            u.ledger_room = rng.randint(*_LEDGER_ENTRIES)
        size = 2 + int(rng.random() * 9) if rng.random() < _BATCH_RATE else 1
        key = int(rng.random() * _KEYS) if rng.random() < _KEY_RATE else -1
        producer = u.producers[int(rng.random() * len(u.producers))]
        ev: dict[str, Any] | str
        if self.as_lines:
            u.seq += 1
            u.time += 1 + int(self.random() * _TIME_STEP_MS)
            ev = (
                f'{{"event_id":"{self.prefix}{n}","seq":{u.seq},"event_time":{u.time},"type":"PUBLISH"'
                f'{u.json_tail},"ledger_id":{u.ledger_id},"entry_id":{u.next_entry},'
                f'"producer_name":"{producer[0]}","sequence_id":{producer[1]}'
            )
            if size > 1:
                ev += f',"batch_size":{size},"highest_sequence_id":{producer[1] + size - 1}'
            ev += f',"key":"key-{key}"}}' if key >= 0 else "}"
        else:
            ev = self._header(u, n, "PUBLISH")
            ev["ledger_id"] = u.ledger_id
            ev["entry_id"] = u.next_entry
            ev["producer_name"] = producer[0]
            ev["sequence_id"] = producer[1]
            if size > 1:
                ev["batch_size"] = size
                ev["highest_sequence_id"] = producer[1] + size - 1
            if key >= 0:
                ev["key"] = f"key-{key}"
        producer[1] += size
        u.pub_ledger.append(u.ledger_id)
        u.pub_entry.append(u.next_entry)
        u.pub_size.append(size)
        u.pub_key.append(key)
        u.next_entry += 1
        return ev

    def _subscribe(self, u: _Unit, n: int, sub: _Sub, name: str, priority_level: int) -> dict[str, Any]:
        rng = self.rng
        consumer_id = sub.next_consumer_id
        sub.next_consumer_id += 1
        first = not sub.consumers
        sub.consumers.append(consumer_id)
        sub.live.append(consumer_id)
        sub.names[consumer_id] = name
        sub.priority_levels[consumer_id] = priority_level
        sub.pending[consumer_id] = []
        sub.stuck[consumer_id] = []
        if first:
            sub.read = 0 if sub.earliest else len(u.pub_ledger)
        self._pick_active(u, sub)
        ev = self._consumer_header(u, n, "SUBSCRIBE", sub, consumer_id)
        ev["consumer_name"] = name
        ev["sub_type"] = sub.sub_type
        if sub.sub_type == "Failover" or priority_level or rng.random() < 0.2:
            ev["priority_level"] = priority_level
        if sub.shared:
            ev["negative_ack_delay_ms"] = sub.negative_ack_delay_ms
        if sub.earliest:
            ev["initial_position"] = "Earliest"
        elif rng.random() < 0.5:
            ev["initial_position"] = "Latest"
        return ev

    def _pick_active(self, u: _Unit, sub: _Sub) -> None:
        """The broker's active consumer for Exclusive/Failover (spec 5.1, modulo case)."""
        if sub.shared or not sub.live:
            return
        top = min(sub.priority_levels[c] for c in sub.live)
        group = sorted((c for c in sub.live if sub.priority_levels[c] == top), key=lambda c: sub.names[c])
        sub.active = group[u.partition % len(group)] if u.partition >= 0 else group[0]

    def _consume(self, u: _Unit, n: int, sub: _Sub) -> Record | None:
        """One consumer-side event of `sub`, or None when it has nothing to do."""
        if not sub.live:
            return None
        rng = self.rng
        while sub.delayed and sub.delayed[0][0] <= u.time:
            sub.replay.append(sub.delayed.popleft()[1])
        x = rng.random()
        if sub.rejoin and x < 0.05:
            return self._subscribe(u, n, sub, sub.rejoin.pop(), 0)
        if x < _NACK_RATE and sub.shared:
            return self._nack(u, n, sub)
        if x < _NACK_RATE + _REDELIVER_RATE:
            return self._redeliver(u, n, sub)
        if x < _NACK_RATE + _REDELIVER_RATE + _CLOSE_RATE and sub.sub_type == "Shared" and len(sub.live) > 1:
            return self._close(u, n, sub)
        can_dispatch = bool(sub.replay) or sub.read < len(u.pub_ledger)
        consumer = sub.live[int(rng.random() * len(sub.live))] if sub.shared else sub.active
        pending = sub.pending[consumer]
        if pending and (not can_dispatch or len(pending) > _WINDOW or rng.random() < 0.5):
            return self._ack(u, n, sub, consumer)
        if can_dispatch:
            return self._dispatch(u, n, sub)
        return None

    def _dispatch(self, u: _Unit, n: int, sub: _Sub) -> Record:
        if sub.replay:
            p = sub.replay.popleft()
        else:
            p = sub.read
            sub.read += 1
        key = u.pub_key[p]
        if sub.sub_type == "Shared":
            sub.round_robin += 1
            consumer = sub.live[sub.round_robin % len(sub.live)]
        elif sub.sub_type == "Key_Shared":
            consumer = sub.live[(key if key >= 0 else 0) % len(sub.live)]
        else:
            consumer = sub.active
        if self.rng.random() < _HOLE_RATE and not sub.cumulative:
            sub.stuck[consumer].append(p)
        else:
            sub.pending[consumer].append(p)
        size = u.pub_size[p]
        if self.as_lines:
            line = self._consumer_line(u, n, "DISPATCH", sub, consumer) + (
                f',"ledger_id":{u.pub_ledger[p]},"entry_id":{u.pub_entry[p]}'
            )
            if size > 1:
                line += f',"batch_size":{size}'
            return line + (f',"key":"key-{key}"}}' if key >= 0 else "}")
        ev = self._consumer_header(u, n, "DISPATCH", sub, consumer)
        ev["ledger_id"] = u.pub_ledger[p]
        ev["entry_id"] = u.pub_entry[p]
        if size > 1:
            ev["batch_size"] = size
        if key >= 0:
            ev["key"] = f"key-{key}"
        return ev

    def _ack(self, u: _Unit, n: int, sub: _Sub, consumer: int) -> Record | None:
        rng = self.rng
        pending = sub.pending[consumer]
        if sub.cumulative:
            # Cumulative: up to the newest received entry, or an older one now and then.
            upto = max(pending) if rng.random() < 0.7 else pending[int(rng.random() * len(pending))]
            pending[:] = [p for p in pending if p > upto]
            if sub.replay:
                sub.replay = deque(p for p in sub.replay if p > upto)
            for p in [p for p in sub.partial if p <= upto]:
                del sub.partial[p]
            ids = [{"ledger_id": u.pub_ledger[upto], "entry_id": u.pub_entry[upto]}]
            return self._ack_event(u, n, sub, consumer, "Cumulative", ids)
        count = 1 + int(rng.random() * 4) if rng.random() < _ACK_GROUP_RATE else 1
        ids: list[dict[str, Any]] = []
        seen: set[int] = set()
        for _ in range(count):
            if not pending:
                break
            j = int(rng.random() * len(pending))
            p = pending[j]
            if p in seen:
                break
            seen.add(p)
            size = u.pub_size[p]
            if size > 1 and (p in sub.partial or rng.random() < _BATCH_INDEX_ACK_RATE):
                unacked = sub.partial.get(p, (1 << size) - 1)
                left = [i for i in range(size) if unacked >> i & 1]
                if len(left) > 1 and rng.random() < 0.75:
                    for i in rng.sample(left, 1 + int(rng.random() * (len(left) - 1))):
                        unacked &= ~(1 << i)
                    sub.partial[p] = unacked
                    ids.append(
                        {
                            "ledger_id": u.pub_ledger[p],
                            "entry_id": u.pub_entry[p],
                            "batch_size": size,
                            "ack_set": ack_set_words(unacked, size),
                        }
                    )
                    continue  # the entry stays pending until its last index is acked
                sub.partial.pop(p, None)
            pending[j] = pending[-1]
            pending.pop()
            ids.append({"ledger_id": u.pub_ledger[p], "entry_id": u.pub_entry[p]})
        if not ids:
            return None
        return self._ack_event(u, n, sub, consumer, "Individual", ids)

    def _nack(self, u: _Unit, n: int, sub: _Sub) -> dict[str, Any] | None:
        """Client nack; the broker redelivers after the nack delay (event time)."""
        rng = self.rng
        holders = [c for c in sub.live if sub.pending[c]]
        if not holders:
            return None
        consumer = holders[int(rng.random() * len(holders))]
        pending = sub.pending[consumer]
        j = int(rng.random() * len(pending))
        p = pending[j]
        pending[j] = pending[-1]
        pending.pop()
        ev = self._consumer_header(u, n, "NACK", sub, consumer)
        ev["message_ids"] = [{"ledger_id": u.pub_ledger[p], "entry_id": u.pub_entry[p]}]
        # Well past the delay (the nack tracker rounds to 256 ms buckets or polls at delay/3).
        sub.delayed.append((u.time + 2 * sub.negative_ack_delay_ms + 1000, p))
        return ev

    def _redeliver(self, u: _Unit, n: int, sub: _Sub) -> dict[str, Any] | None:
        rng = self.rng
        if sub.shared:
            holders = [c for c in sub.live if sub.pending[c]]
            if not holders:
                return None
            consumer = holders[int(rng.random() * len(holders))]
            pending = sub.pending[consumer]
            chosen = set(rng.sample(pending, min(len(pending), 1 + int(rng.random() * 3))))
            pending[:] = [p for p in pending if p not in chosen]
            ids = sorted(chosen)
            sub.replay.extend(ids)
            message_ids = [{"ledger_id": u.pub_ledger[p], "entry_id": u.pub_entry[p]} for p in ids]
        else:
            # Redeliver-all from the active consumer: the broker rewinds to after mark-delete,
            # so everything it holds unacked, holes included, comes again.
            consumer = sub.active
            again = sorted(sub.pending[consumer] + sub.stuck[consumer])
            if not again:
                return None
            sub.pending[consumer] = []
            sub.stuck[consumer] = []
            sub.replay.extend(again)
            message_ids = []
        ev = self._consumer_header(u, n, "REDELIVER", sub, consumer)
        ev["message_ids"] = message_ids
        return ev

    def _close(self, u: _Unit, n: int, sub: _Sub) -> dict[str, Any]:
        """A Shared consumer leaves; what it held goes back for redelivery; it comes back later."""
        consumer = sub.live[int(self.rng.random() * len(sub.live))]
        sub.live.remove(consumer)
        sub.replay.extend(sorted(sub.pending.pop(consumer) + sub.stuck.pop(consumer)))
        sub.rejoin.append(sub.names[consumer])
        return self._consumer_header(u, n, "CLOSE_CONSUMER", sub, consumer)

    # ----------------------------------------------------------------- malformed

    def _malformed(self, u: _Unit, n: int) -> dict[str, Any]:
        """A bad record built from a plausible one; it changes no simulated state."""
        rng = self.rng
        kind = MALFORMED_KINDS[int(rng.random() * len(MALFORMED_KINDS))]
        ev: dict[str, Any]
        if u.pub_ledger and u.subs and u.subs[0].consumers:
            sub = u.subs[0]
            p = int(rng.random() * len(u.pub_ledger))
            ev = self._consumer_header(u, n, "ACK", sub, sub.consumers[0])
            ev["ack_type"] = "Individual"
            ev["message_ids"] = [{"ledger_id": u.pub_ledger[p], "entry_id": u.pub_entry[p]}]
        else:
            ev = self._header(u, n, "PUBLISH")
            ev["ledger_id"] = max(u.ledger_id, 0)
            ev["entry_id"] = u.next_entry
            ev["producer_name"] = "producer-x"
            ev["sequence_id"] = 0
        if kind == "truncated_json":
            line = _ENCODE(ev)
            return {MALFORMED_KEY: kind, RAW_KEY: line[: 1 + int(rng.random() * (len(line) - 2))]}
        if kind == "unknown_type":
            ev["type"] = _UNKNOWN_TYPES[int(rng.random() * len(_UNKNOWN_TYPES))]
        elif kind == "negative_entry_id":
            bad = -1 - int(rng.random() * 1000)
            if "message_ids" in ev:
                ev["message_ids"][0]["entry_id"] = bad
            else:
                ev["entry_id"] = bad
        else:
            required = COMMON_REQUIRED + REQUIRED[ev["type"]]
            del ev[required[int(rng.random() * len(required))]]
        ev[MALFORMED_KEY] = kind
        return ev
