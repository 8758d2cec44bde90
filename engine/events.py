"""Events of one topic partition in columnar form: what the engine applies.

The UDF layer turns a grouped Arrow batch into an ``EventBatch`` without a Python loop per
event; tests and tools build one from plain records. Message ids of ACK/NACK/REDELIVER events
are flattened (``msg_*`` arrays, ``msg_offsets`` per event), and so are their ``ack_set`` words
(``ackset_words``, ``ackset_offsets`` per message id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

EVENT_TYPES = (
    "SUBSCRIBE",
    "CLOSE_CONSUMER",
    "PUBLISH",
    "SEND",
    "SEND_FAILED",
    "DISPATCH",
    "ACK",
    "NACK",
    "REDELIVER",
    # contract additions (README, "Contract additions"): cursor operations of the broker's own
    "RESET_CURSOR",
    "MARK_DELETE",
    "UNSUBSCRIBE",
    # contract additions: the broker loaded the topic partition afresh, or deleted it
    "LOAD_TOPIC",
    "DELETE_TOPIC",
    # contract addition: the admin API made a subscription with no consumer
    "CREATE_SUBSCRIPTION",
)
TYPE_CODE = {name: code for code, name in enumerate(EVENT_TYPES)}

# The contract's defaults of absent event fields (Pulsar 4.0 where Pulsar has one), declared
# once: validation fills them in (``schemas.events``), and so does the engine for events built
# from records or Arrow columns. ``highest_sequence_id`` has no constant default: it defaults to
# the event's own ``sequence_id``.
EVENT_DEFAULTS: dict[str, object] = {
    "partition": -1,
    "batch_size": 1,
    "priority_level": 0,
    "ack_timeout_ms": 0,
    "negative_ack_delay_ms": 60_000,  # ConsumerConfigurationData.negativeAckRedeliveryDelayMicros
    "max_redeliver_count": 0,
    "initial_position": "Latest",
    "num_messages": 1,
    "marker": False,  # CommandSend.marker
}
(
    SUBSCRIBE,
    CLOSE_CONSUMER,
    PUBLISH,
    SEND,
    SEND_FAILED,
    DISPATCH,
    ACK,
    NACK,
    REDELIVER,
    RESET_CURSOR,
    MARK_DELETE,
    UNSUBSCRIBE,
    LOAD_TOPIC,
    DELETE_TOPIC,
    CREATE_SUBSCRIPTION,
) = range(len(EVENT_TYPES))
# what the broker does to a subscription's cursor by itself: no consumer issues them
CURSOR_OPERATIONS = (RESET_CURSOR, MARK_DELETE, UNSUBSCRIBE, CREATE_SUBSCRIPTION)
# what the broker does to a whole topic partition: applied between the events around them
TOPIC_OPERATIONS = (LOAD_TOPIC, DELETE_TOPIC)


def type_table(types: Sequence[int]) -> np.ndarray:
    """A membership table over type codes: ``table[codes]`` is ``np.isin(codes, types)``.

    ``np.isin`` sorts both sides on every call, about 20 us on the few hundred events of a
    subscription in a batch, and the apply asked it several times per subscription; a lookup
    is one gather. Any int8 code indexes the table, the absent code -1 included (its last
    slot, never set).
    """
    table = np.zeros(256, dtype=bool)
    table[list(types)] = True
    return table


def among(values: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """``np.isin(values, ids)`` for the few ids of a subscription's consumers: one comparison
    per id, where ``np.isin`` sorts both sides (see ``type_table``)."""
    if len(ids) > 8:
        return np.isin(values, np.asarray(ids, dtype=np.int64))
    found = np.zeros(values.shape, dtype=bool)
    for value in ids:
        found |= values == value
    return found


ACK_INDIVIDUAL, ACK_CUMULATIVE = 0, 1
ACK_TYPE_CODE = {"Individual": ACK_INDIVIDUAL, "Cumulative": ACK_CUMULATIVE}


@dataclass(slots=True)
class EventBatch:
    """Events of one topic partition, ordered by ``seq``. Missing numbers are -1."""

    seq: np.ndarray  # int64
    event_time: np.ndarray  # int64
    type: np.ndarray  # int8, TYPE_CODE
    sub_code: np.ndarray  # int32, index into sub_names, -1 when absent
    sub_names: list[str]
    ack_type: np.ndarray  # int8, ACK_TYPE_CODE, -1 when absent
    ledger_id: np.ndarray  # int64 (PUBLISH, DISPATCH, RESET_CURSOR, MARK_DELETE, CREATE_SUBSCRIPTION)
    entry_id: np.ndarray  # int64
    batch_size: np.ndarray  # int32
    sub_type: np.ndarray  # object: str or None (SUBSCRIBE)
    initial_position: np.ndarray  # object: str or None (SUBSCRIBE)
    msg_offsets: np.ndarray  # int64, len n + 1
    msg_ledger: np.ndarray  # int64
    msg_entry: np.ndarray  # int64
    msg_batch_size: np.ndarray  # int32
    ackset_offsets: np.ndarray  # int64, len m + 1
    ackset_words: np.ndarray  # int64
    row: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # caller's row ids
    # consumer columns (SUBSCRIBE, CLOSE_CONSUMER, DISPATCH, ACK, NACK, REDELIVER); a batch built
    # without them gets the contract's defaults
    consumer_id: np.ndarray | None = None  # int64, -1 when absent
    consumer_name: np.ndarray | None = None  # object
    priority_level: np.ndarray | None = None  # int32, default 0
    ack_timeout_ms: np.ndarray | None = None  # int64, default 0 (off)
    negative_ack_delay_ms: np.ndarray | None = None  # int64, default in EVENT_DEFAULTS
    max_redeliver_count: np.ndarray | None = None  # int32, default 0 (no dead letter)
    key: np.ndarray | None = None  # object: str or None (PUBLISH, DISPATCH)
    sends: SendColumns | None = None  # producer fields (SEND, SEND_FAILED, PUBLISH); None: none given

    def __post_init__(self) -> None:
        n = self.seq.size
        if self.row.size != n:
            self.row = np.arange(n, dtype=np.int64)
        for name, default, dtype in CONSUMER_COLUMNS:
            if getattr(self, name) is None:
                if dtype is object:
                    setattr(self, name, np.full(n, default, dtype=object))
                else:
                    setattr(self, name, np.full(n, default, dtype=dtype))

    def __len__(self) -> int:
        return int(self.seq.size)

    def take(self, order: np.ndarray) -> EventBatch:
        """The same events reordered (used to sort by seq); message arrays are regathered."""
        counts = np.diff(self.msg_offsets)[order]
        starts = self.msg_offsets[:-1][order]
        midx = gather_ranges(starts, counts)
        ac_counts = np.diff(self.ackset_offsets)[midx]
        ac_idx = gather_ranges(self.ackset_offsets[:-1][midx], ac_counts)
        return EventBatch(
            seq=self.seq[order],
            event_time=self.event_time[order],
            type=self.type[order],
            sub_code=self.sub_code[order],
            sub_names=self.sub_names,
            ack_type=self.ack_type[order],
            ledger_id=self.ledger_id[order],
            entry_id=self.entry_id[order],
            batch_size=self.batch_size[order],
            sub_type=self.sub_type[order],
            initial_position=self.initial_position[order],
            msg_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
            msg_ledger=self.msg_ledger[midx],
            msg_entry=self.msg_entry[midx],
            msg_batch_size=self.msg_batch_size[midx],
            ackset_offsets=np.concatenate(([0], np.cumsum(ac_counts))).astype(np.int64),
            ackset_words=self.ackset_words[ac_idx],
            row=self.row[order],
            **{name: getattr(self, name)[order] for name, _, _ in CONSUMER_COLUMNS},
            sends=self.sends.take(order) if self.sends is not None else None,
        )

    def slice(self, lo: int, hi: int) -> EventBatch:
        """Events ``lo`` to ``hi - 1`` as a batch of their own: views of these arrays, the message
        and ack-set offsets rebased, and subscription codes renumbered in the order the slice
        first names them (``first_appearance``), as converting those events alone numbers them.

        The apply UDF converts a bucket of topic partitions at once and hands the engine each
        partition's slice; the renumbering keeps the order in which the engine meets a
        partition's subscriptions, and so the order of its output, what it was."""
        m_lo, m_hi = int(self.msg_offsets[lo]), int(self.msg_offsets[hi])
        a_lo, a_hi = int(self.ackset_offsets[m_lo]), int(self.ackset_offsets[m_hi])
        sub_code, sub_names = first_appearance(self.sub_code[lo:hi], self.sub_names)
        return EventBatch(
            seq=self.seq[lo:hi],
            event_time=self.event_time[lo:hi],
            type=self.type[lo:hi],
            sub_code=sub_code,
            sub_names=sub_names,
            ack_type=self.ack_type[lo:hi],
            ledger_id=self.ledger_id[lo:hi],
            entry_id=self.entry_id[lo:hi],
            batch_size=self.batch_size[lo:hi],
            sub_type=self.sub_type[lo:hi],
            initial_position=self.initial_position[lo:hi],
            msg_offsets=self.msg_offsets[lo : hi + 1] - m_lo,
            msg_ledger=self.msg_ledger[m_lo:m_hi],
            msg_entry=self.msg_entry[m_lo:m_hi],
            msg_batch_size=self.msg_batch_size[m_lo:m_hi],
            ackset_offsets=self.ackset_offsets[m_lo : m_hi + 1] - a_lo,
            ackset_words=self.ackset_words[a_lo:a_hi],
            row=self.row[lo:hi],
            **{name: getattr(self, name)[lo:hi] for name, _, _ in CONSUMER_COLUMNS},
            sends=self.sends.slice(lo, hi) if self.sends is not None else None,
        )

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]]) -> EventBatch:
        """Build from contract-shaped dicts (tests, tools); defaults as in CONTRACT.md."""
        n = len(records)
        sub_index: dict[str, int] = {}
        cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "seq",
                "event_time",
                "type",
                "sub_code",
                "ack_type",
                "ledger_id",
                "entry_id",
                "batch_size",
                "sub_type",
                "initial_position",
                *(name for name, _, _ in CONSUMER_COLUMNS),
            )
        }
        offsets, mled, ment, mbs, aoff, words = [0], [], [], [], [0], []
        for rec in records:
            cols["seq"].append(rec["seq"])
            cols["event_time"].append(rec.get("event_time") or 0)
            cols["type"].append(TYPE_CODE[rec["type"]])
            sub = rec.get("subscription")
            cols["sub_code"].append(-1 if sub is None else sub_index.setdefault(sub, len(sub_index)))
            cols["ack_type"].append(ACK_TYPE_CODE.get(rec.get("ack_type") or "", -1))
            cols["ledger_id"].append(_num(rec.get("ledger_id")))
            cols["entry_id"].append(_num(rec.get("entry_id")))
            cols["batch_size"].append(rec.get("batch_size") or 1)
            cols["sub_type"].append(rec.get("sub_type"))
            cols["initial_position"].append(rec.get("initial_position") or "Latest")
            for name, default, _ in CONSUMER_COLUMNS:
                value = rec.get(name)
                cols[name].append(default if value is None else value)
            for mid in rec.get("message_ids") or ():
                mled.append(mid["ledger_id"])
                ment.append(mid["entry_id"])
                mbs.append(mid.get("batch_size") or 0)  # 0: not given
                words.extend(mid.get("ack_set") or ())
                aoff.append(len(words))
            offsets.append(len(mled))
        return cls(
            seq=np.asarray(cols["seq"], dtype=np.int64),
            event_time=np.asarray(cols["event_time"], dtype=np.int64),
            type=np.asarray(cols["type"], dtype=np.int8),
            sub_code=np.asarray(cols["sub_code"], dtype=np.int32),
            sub_names=list(sub_index),
            ack_type=np.asarray(cols["ack_type"], dtype=np.int8),
            ledger_id=np.asarray(cols["ledger_id"], dtype=np.int64),
            entry_id=np.asarray(cols["entry_id"], dtype=np.int64),
            batch_size=np.asarray(cols["batch_size"], dtype=np.int32),
            sub_type=np.asarray(cols["sub_type"], dtype=object).reshape(n),
            initial_position=np.asarray(cols["initial_position"], dtype=object).reshape(n),
            msg_offsets=np.asarray(offsets, dtype=np.int64),
            msg_ledger=np.asarray(mled, dtype=np.int64),
            msg_entry=np.asarray(ment, dtype=np.int64),
            msg_batch_size=np.asarray(mbs, dtype=np.int32),
            ackset_offsets=np.asarray(aoff, dtype=np.int64),
            ackset_words=np.asarray(words, dtype=np.int64),
            **{name: np.asarray(cols[name], dtype=dtype).reshape(n) for name, _, dtype in CONSUMER_COLUMNS},
            sends=SendColumns.from_records(records),
        )


# (column, contract default, dtype) of the consumer columns: what fills an absent value, in
# records (``EventBatch.from_records``) and in Arrow columns (``udfs.apply.events_to_batch``)
CONSUMER_COLUMNS: tuple[tuple[str, Any, Any], ...] = (
    ("consumer_id", -1, np.int64),
    ("consumer_name", None, object),
    ("priority_level", EVENT_DEFAULTS["priority_level"], np.int32),
    ("ack_timeout_ms", EVENT_DEFAULTS["ack_timeout_ms"], np.int64),
    ("negative_ack_delay_ms", EVENT_DEFAULTS["negative_ack_delay_ms"], np.int64),
    ("max_redeliver_count", EVENT_DEFAULTS["max_redeliver_count"], np.int32),
    ("key", None, object),
)


def _num(value: Any) -> int:
    return -1 if value is None else int(value)


def gather_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices ``starts[i] .. starts[i] + counts[i] - 1`` for all i, concatenated, no loop."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    bases = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    return (np.arange(total, dtype=np.int64) + bases).astype(np.int64)


def first_appearance(codes: np.ndarray, names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """``codes`` (indices into ``names``, -1 for none) renumbered 0, 1, ... in the order they
    first occur, and the names of the new codes: a dictionary encoding of the named values
    alone, as Arrow's ``dictionary_encode`` of just those values gives it."""
    present = codes >= 0
    if not present.any():
        return codes.astype(np.int32), []
    used, first = np.unique(codes[present], return_index=True)
    used = used[np.argsort(first)]
    local = np.full(int(used.max()) + 1, -1, dtype=np.int32)
    local[used] = np.arange(used.size, dtype=np.int32)
    renumbered = np.where(present, local[np.where(present, codes, 0)], -1).astype(np.int32)
    return renumbered, [names[c] for c in used.tolist()]


@dataclass(slots=True)
class SendColumns:
    """The producer fields of every event of a batch (CommandSend, and PUBLISH's producer).

    One array per field, aligned with the batch's events; absent numbers are -1 (sequence ids
    and positions are never negative once validated), an absent ``num_messages`` is 1.
    """

    producer_code: np.ndarray  # int32, index into producer_names, -1 when absent
    producer_names: list[str]
    sequence_id: np.ndarray  # int64
    highest_sequence_id: np.ndarray  # int64 (-1: the event's sequence_id)
    num_messages: np.ndarray  # int32
    connection_id: np.ndarray  # int64 (contract addition; -1: the one unnamed connection)
    completed_at: np.ndarray  # int64 epoch ms (contract addition; -1: completed at once)
    chunk_id: np.ndarray  # int32 (contract addition; -1: not a chunk)
    num_chunks_from_msg: np.ndarray  # int32
    marker: np.ndarray  # bool (contract addition)

    def take(self, order: np.ndarray) -> SendColumns:
        return SendColumns(
            producer_code=self.producer_code[order],
            producer_names=self.producer_names,
            sequence_id=self.sequence_id[order],
            highest_sequence_id=self.highest_sequence_id[order],
            num_messages=self.num_messages[order],
            connection_id=self.connection_id[order],
            completed_at=self.completed_at[order],
            chunk_id=self.chunk_id[order],
            num_chunks_from_msg=self.num_chunks_from_msg[order],
            marker=self.marker[order],
        )

    def slice(self, lo: int, hi: int) -> SendColumns:
        """Events ``lo`` to ``hi - 1``, producer codes renumbered as ``EventBatch.slice`` says."""
        producer_code, producer_names = first_appearance(self.producer_code[lo:hi], self.producer_names)
        return SendColumns(
            producer_code=producer_code,
            producer_names=producer_names,
            sequence_id=self.sequence_id[lo:hi],
            highest_sequence_id=self.highest_sequence_id[lo:hi],
            num_messages=self.num_messages[lo:hi],
            connection_id=self.connection_id[lo:hi],
            completed_at=self.completed_at[lo:hi],
            chunk_id=self.chunk_id[lo:hi],
            num_chunks_from_msg=self.num_chunks_from_msg[lo:hi],
            marker=self.marker[lo:hi],
        )

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]]) -> SendColumns:
        names: dict[str, int] = {}
        codes = []
        for rec in records:
            name = rec.get("producer_name")
            codes.append(-1 if name is None else names.setdefault(name, len(names)))

        def column(key: str, fill: int, dtype: Any) -> np.ndarray:
            return np.asarray(
                [fill if rec.get(key) is None else rec[key] for rec in records], dtype=dtype
            ).reshape(len(records))

        return cls(
            producer_code=np.asarray(codes, dtype=np.int32).reshape(len(records)),
            producer_names=list(names),
            sequence_id=column("sequence_id", -1, np.int64),
            highest_sequence_id=column("highest_sequence_id", -1, np.int64),
            num_messages=column("num_messages", 1, np.int32),
            connection_id=column("connection_id", -1, np.int64),
            completed_at=column("completed_at", -1, np.int64),
            chunk_id=column("chunk_id", -1, np.int32),
            num_chunks_from_msg=column("num_chunks_from_msg", -1, np.int32),
            marker=column("marker", False, bool),
        )
