"""A subscription cursor with Pulsar's exact acknowledgement semantics (ManagedCursorImpl).

State (spec 2.1): the mark-delete position (every entry at or below it is acked), the set of
individually acked entries above it (``AckRangeSet``), and, when batch-index acks are on, the
unacked-index bit mask of each partially acked batch entry above mark-delete.

Whether they are on is the acking methods' ``acknowledgment_at_batch_index_level_enabled``: the
broker setting, which ``BrokerService`` hands the managed ledger as its config's
``deletionAtBatchIndexLevelEnabled``, the flag ManagedCursorImpl reads.

Every public method names the Pulsar method it mirrors. Refusals raise ``EngineRefusal``
subclasses after applying exactly what Pulsar applies before failing.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from engine.ackset import mask_to_words, next_set_bit, unacked_count, words_to_mask
from engine.codec import StateReader, frame
from engine.errors import AckBeyondLastPublished, MarkDeleteBeforeMarkDelete
from engine.ledgers import Ledgers
from engine.position import EARLIEST, Position, position_text
from engine.rangeset import AckRangeSet

SUB_TYPES = ("Exclusive", "Failover", "Shared", "Key_Shared")
_MAGIC = b"AKC"
# 2 adds ``consumed_overcount`` after the header; a cursor without one is written as version 1,
# byte for byte as before
_VERSION = 2
_VERSION_1 = 1
_HEADER = struct.Struct("<Bqq")  # sub type index, mark-delete ledger, entry
_OVERCOUNT = struct.Struct("<q")
_BATCH = struct.Struct("<qqiI")  # ledger, entry, batch size, word count


class MessageId(NamedTuple):
    """What an ACK names: an entry, and for a batch-index ack its unacked-index mask."""

    position: Position
    ack_set: int | None = None  # bit set = still unacked; None = the whole entry
    batch_size: int = 1


@dataclass(slots=True)
class BatchAck:
    """A partially acked batch entry (``batchDeletedIndexes`` value): set bit = unacked."""

    batch_size: int
    unacked: int

    @property
    def acked_count(self) -> int:
        # Consumer.getAckedCountForTransactionAck: batchSize - cardinality(ackSet)
        return self.batch_size - unacked_count(self.unacked)

    @property
    def words(self) -> list[int]:
        return mask_to_words(self.unacked)


def _beyond_last_published(pos: Position, lac: Position) -> AckBeyondLastPublished:
    """asyncDelete's refusal of an ack beyond the last entry (one message for both ack paths)."""
    return AckBeyondLastPublished(
        f"ack of {position_text(pos)} beyond the last published entry {position_text(lac)}"
    )


def _check_mark_delete(pos: Position, lac: Position, what: str) -> None:
    """A mark-delete the broker set itself lies at or below the last entry, or is ``L:-1`` of a
    ledger after it: before that ledger's first entry, as the broker names the place of a
    cursor on a ledger that has no entry yet (a topic partition no message reached)."""
    if pos > lac and pos[1] != -1:
        raise AckBeyondLastPublished(
            f"{what} to {position_text(pos)} beyond the last published entry {position_text(lac)}"
        )


def _previous_as_of(ledgers: Ledgers, pos: Position, lac: Position) -> Position:
    """getPreviousPosition as the ledgers stood when ``lac`` was the last entry.

    A batch applies its publishes first, so ``ledgers`` may already hold later entries. Only the
    ledger lookup of entry 0 can see them, and only for a position beyond ``lac``: then the
    nearest earlier ledger, at that time, ended at ``lac`` (or did not exist yet).
    """
    prev = ledgers.previous(pos)
    if pos[1] <= 0 and prev > lac:
        return lac if lac != EARLIEST else (pos[0], -1)
    return prev


class Cursor:
    """One subscription's cursor over the ledgers of its topic partition."""

    __slots__ = ("acked", "batch_acks", "consumed_overcount", "mark_delete", "sub_type")

    def __init__(self, sub_type: str, mark_delete: Position = EARLIEST) -> None:
        self.sub_type = sub_type
        self.mark_delete = mark_delete
        self.acked = AckRangeSet()
        self.batch_acks: dict[Position, BatchAck] = {}
        # entries the broker's messagesConsumedCounter counts as consumed beyond the truth, left by
        # cursor resets (``reset``); what ``msg_backlog`` takes off the precise backlog
        self.consumed_overcount = 0

    @classmethod
    def subscribe(cls, sub_type: str, initial_position: str, ledgers: Ledgers, lac: Position) -> Cursor:
        """ManagedLedgerImpl.asyncOpenCursor with InitialPosition: Latest puts mark-delete on
        the last entry; Earliest before the first entry of the first ledger (``L:-1``)."""
        if initial_position == "Earliest":
            first = ledgers.first_ledger_id
            start = EARLIEST if first is None or lac == EARLIEST else (first, -1)
        else:
            start = lac
        return cls(sub_type, start)

    # ---- queries --------------------------------------------------------------------
    def is_deleted(self, pos: Position) -> bool:
        """ManagedCursorImpl.isMessageDeleted: at or below mark-delete, or individually acked."""
        return pos <= self.mark_delete or pos in self.acked

    def backlog(self, ledgers: Ledgers) -> int:
        """getNumberOfEntriesInBacklog(isPrecise=true), in entries: entries in
        (markDelete, last] minus those individually acked."""
        lac = ledgers.last_position
        if self.mark_delete >= lac:
            return 0
        return ledgers.count_between(self.mark_delete, lac) - self.acked.count_existing(ledgers)

    def msg_backlog(self, ledgers: Ledgers) -> int:
        """The backlog the broker's stats report: getNumberOfEntriesInBacklog(isPrecise=false).

        That is the entries added minus ``messagesConsumedCounter``, which every ack and
        mark-delete keeps equal to the precise backlog, and a cursor reset does not
        (``consumed_overcount``). When the difference is negative the broker falls back to the
        precise count. A broker that reloads the topic counts afresh (the cursor's recovery
        sets the counter from the precise backlog): LOAD_TOPIC sets the overcount to 0.
        """
        precise = self.backlog(ledgers)
        reported = precise - self.consumed_overcount
        return reported if reported >= 0 else precise

    @property
    def individually_deleted_messages(self) -> str:
        """getIndividuallyDeletedMessages(): the internal-stats string."""
        return str(self.acked)

    @property
    def non_contiguous_deleted_ranges(self) -> int:
        """PersistentTopic.getInternalStats nonContiguousDeletedMessagesRanges = IDM.size()."""
        return self.acked.size()

    # ---- individual acks ------------------------------------------------------------
    def ack(
        self,
        message_ids: list[MessageId],
        ledgers: Ledgers,
        lac: Position,
        acknowledgment_at_batch_index_level_enabled: bool,
    ) -> None:
        """ManagedCursorImpl.asyncDelete, one call, positions in the given order (spec 2.3).

        A position beyond the last entry fails the whole call; the ones before it stay applied.
        """
        refused: Position | None = None
        for mid in message_ids:
            pos = mid.position
            if pos > lac:
                # asyncDelete: "Invalid mark deleted position"; earlier positions stay applied
                refused = pos
                break
            self._delete_one(mid, acknowledgment_at_batch_index_level_enabled)
        self._auto_advance(ledgers, lac)
        if refused is not None:
            raise _beyond_last_published(refused, lac)

    def can_stage_acks(self, acknowledgment_at_batch_index_level_enabled: bool, ledgers: Ledgers) -> bool:
        """Whether individual acks may be staged (``stage_ack``) and applied later at once.

        With batch-index acks off and no batch state, an individual ack's only cursor effect is
        to add whole entries to the range set and move mark-delete, and nothing else an ack or a
        DISPATCH does reads either; with batch state, an ack's message id and the consumer side
        read it, so the calls must apply one by one. The acked entries must all exist, too:
        auto-advance moves onto a range that only entries that do not exist separate from
        mark-delete, but the run that extends it does not skip them, so with such an entry
        acked it can take one call per step (see ``apply_staged``).
        """
        return (
            not acknowledgment_at_batch_index_level_enabled
            and not self.batch_acks
            and self.acked.all_exist(ledgers)
        )

    @staticmethod
    def stage_ack(
        message_ids: list[MessageId], last_entries: Mapping[int, int], lac: Position, staged: list[Position]
    ) -> bool:
        """``ack``'s checks for one asyncDelete call, its cursor changes deferred: the whole-entry
        positions it would apply are appended to ``staged`` for ``apply_staged``.

        Only when ``can_stage_acks``: then an id with an ack set changes nothing (asyncDelete
        ignores it with batch-index deletion off, and there is no batch state to drop). A
        position beyond ``lac`` fails the call as ``ack`` does, the positions before it staged.
        Returns False, staging nothing, for a call that names (before any position beyond
        ``lac``) a position that does not exist (``last_entries``: each ledger's last entry id,
        ``dict(ledgers)``), a negative entry id included: only ``ack``, one call at a time,
        applies those as Pulsar does.
        """
        start = len(staged)
        for mid in message_ids:
            pos = mid.position
            if pos > lac:
                raise _beyond_last_published(pos, lac)
            if not 0 <= pos[1] <= last_entries.get(pos[0], -1):
                del staged[start:]
                return False
            if mid.ack_set is None:
                staged.append(pos)
        return True

    @staticmethod
    def stage_entry_acks(
        positions: list[Position], last_entries: Mapping[int, int], lac: Position, staged: list[Position]
    ) -> bool:
        """``stage_ack`` of a call whose ids all name whole entries, given as their positions:
        most acks are such a call (of one id), taken without building a ``MessageId`` each."""
        start = len(staged)
        for pos in positions:
            if pos > lac:
                raise _beyond_last_published(pos, lac)
            if not 0 <= pos[1] <= last_entries.get(pos[0], -1):
                del staged[start:]
                return False
            staged.append(pos)
        return True

    def apply_staged(self, staged: list[Position], ledgers: Ledgers, lac: Position) -> None:
        """Apply the positions ``stage_ack`` collected, as one run, then auto-advance once.

        Equivalent to ``ack`` per call in order, without a Python call chain and an
        auto-advance per ack (on the generated mix that per-call cursor work was a quarter of
        the engine's time): adding entries commutes, and with every acked entry existing
        (``can_stage_acks``, ``stage_ack``) one auto-advance with the last call's ``lac`` ends
        where one per call does. It moves mark-delete onto the first range when no entry exists
        between them and extends it over the acked entries that follow, so it stops at an
        existing unacked entry, or past the last call's ``lac``, beyond every acked one. A
        position at or below mark-delete is already deleted and is skipped; one that
        auto-advance passes later is purged by it. Auto-advance runs even with nothing staged,
        as ``ack`` runs it for a call that applied nothing.
        """
        self.acked.add_above(staged, self.mark_delete)
        self._auto_advance(ledgers, lac)

    def _delete_one(self, mid: MessageId, acknowledgment_at_batch_index_level_enabled: bool) -> None:
        pos = mid.position
        if self.is_deleted(pos):
            # asyncDelete: already deleted -> drop leftover batch state, no error
            self.batch_acks.pop(pos, None)
        elif mid.ack_set is None:
            # asyncDelete: whole entry -> drop batch state, add (prev(pos), pos] to the range set
            self.batch_acks.pop(pos, None)
            self.acked.add(pos)
        elif acknowledgment_at_batch_index_level_enabled:
            self._merge_batch_ack(pos, mid.ack_set, mid.batch_size)
        # else asyncDelete: an ack set with batch-index deletion disabled has no effect at all

    def _merge_batch_ack(self, pos: Position, ack_set: int, batch_size: int) -> None:
        """asyncDelete with an ack set: AND-merge the unacked bits; empty means the entry is done."""
        current = self.batch_acks.get(pos)
        merged = ack_set if current is None else current.unacked & ack_set
        if merged == 0:
            self.batch_acks.pop(pos, None)
            self.acked.add(pos)
        elif current is None:
            self.batch_acks[pos] = BatchAck(batch_size, merged)
        else:
            current.unacked = merged

    def ack_entries(
        self,
        entries_by_ledger: dict[int, np.ndarray],
        batch_ids: list[MessageId],
        ledgers: Ledgers,
        lac: Position,
        acknowledgment_at_batch_index_level_enabled: bool,
    ) -> None:
        """A run of individual acks with no order-sensitive event between them, applied at once.

        Equivalent to asyncDelete called for each ack in order: set union and AND-merge commute,
        deleted entries only ever grow, and auto-advance reaches the same fixpoint whether it runs
        after every ack or once at the end. The positions are already checked against the last
        entry of their time.
        """
        for ledger_id, entries in entries_by_ledger.items():
            self.acked.add_entries(ledger_id, entries)
        if self.batch_acks:
            for pos in [p for p in self.batch_acks if p in self.acked]:
                del self.batch_acks[pos]
        for mid in batch_ids:
            self._delete_one(mid, acknowledgment_at_batch_index_level_enabled)
        self.acked.remove_at_most(self.mark_delete)
        self._auto_advance(ledgers, lac)

    def _auto_advance(self, ledgers: Ledgers, lac: Position) -> None:
        """asyncDelete steps 3-5: move mark-delete onto the first range when nothing unacked
        lies between them (the range touches mark-delete, or only empty ledgers are between).

        Most acks leave a hole before the first range: that is decided from the first acked
        entry alone; the range's end is looked up only when mark-delete moves onto it.
        """
        md = self.mark_delete
        lowest = self.acked.first_entry()
        if lowest is None:
            return
        ledger_id, entry_id = lowest
        if (
            ledger_id == md[0]
            and entry_id - 1 > md[1]
            and ledgers.has_entries_in(ledger_id, md[1], entry_id - 1)
        ):
            return  # the usual hole, in mark-delete's ledger, asked without building Positions
        if lowest > md:
            lower = (lowest[0], lowest[1] - 1)
            if lower > md and ledgers.has_entries_between(md, lower):
                return  # an unacked entry lies between mark-delete and the first range
        first = self.acked.first_range()
        if first is not None and first[1] <= self.mark_delete:
            self.acked.remove_at_most(self.mark_delete)
            first = self.acked.first_range()
        if first is None:
            return
        lower, upper = first
        if lower <= self.mark_delete or ledgers.count_between(self.mark_delete, lower) <= 0:
            self._set_acknowledged_position(upper, ledgers, lac)

    def _set_acknowledged_position(self, new_md: Position, ledgers: Ledgers, lac: Position) -> None:
        """ManagedCursorImpl.setAcknowledgedPosition: refuse going back, extend over contiguous
        acked runs (across ledgers), then purge ranges and batch state at or below it."""
        if new_md < self.mark_delete:
            raise MarkDeleteBeforeMarkDelete(
                f"cumulative ack of {position_text(new_md)} is below mark-delete "
                f"{position_text(self.mark_delete)}"
            )
        acked = self.acked
        if new_md != self.mark_delete and acked:  # nothing to extend over with no range
            nxt = ledgers.next_valid(new_md)
            while nxt <= lac and nxt in acked:
                new_md = acked.range_upper(nxt)
                nxt = ledgers.next_valid(new_md)
        self.mark_delete = new_md
        if acked:
            acked.remove_at_most(new_md)
        if self.batch_acks:
            self._align_batch_acks()

    def _align_batch_acks(self) -> None:
        """internalMarkDelete -> alignAcknowledgeStatus: batch state at or below mark-delete is
        dropped once the mark-delete persists. Persisting always succeeds here, so the invariant
        "batch state only above mark-delete" holds after every command, refused ones included."""
        if self.batch_acks:
            for pos in [p for p in self.batch_acks if p <= self.mark_delete]:
                del self.batch_acks[pos]

    # ---- cumulative ack -------------------------------------------------------------
    def ack_cumulative(
        self,
        mid: MessageId,
        ledgers: Ledgers,
        lac: Position,
        acknowledgment_at_batch_index_level_enabled: bool,
    ) -> None:
        """ManagedCursorImpl.asyncMarkDelete (spec 2.5)."""
        new_pos = mid.position
        if mid.ack_set is not None:
            new_pos = self._ack_batch_position(mid, ledgers, lac, acknowledgment_at_batch_index_level_enabled)
        try:
            if new_pos > lac:
                # asyncMarkDelete: "Invalid mark deleted position". Pulsar's exception (MD at the
                # end of its ledger and a next valid ledger after LAC's) cannot arise here: a
                # ledger is known only through its published entries, all at or below LAC.
                raise AckBeyondLastPublished(
                    f"cumulative ack of {position_text(mid.position)} beyond the last published entry "
                    f"{position_text(lac)}"
                )
            self._set_acknowledged_position(new_pos, ledgers, lac)
        finally:
            if self.batch_acks:  # ackBatchPosition may have recorded state below mark-delete
                self._align_batch_acks()

    def mark_delete_run(self, positions: list[Position], lacs: list[Position], start: int, stop: int) -> int:
        """``ack_cumulative`` of the whole-entry positions ``positions[start:stop]`` in order, each
        with the last published entry of its time (``lacs``), for as long as each only moves
        mark-delete: with no acked range and no batch state there is nothing to extend over or
        purge (``_set_acknowledged_position``), and no call's lines but the assignment run. It
        stops at a position beyond its last published entry or below mark-delete, which the
        plain call refuses. Returns the index of the first position it did not apply.

        One loop for the run instead of a chain of four calls per ack: a quarter of the generated
        mix's acks are an Exclusive or Failover consumer's cumulative acks, in long runs.
        ``tests/engine/test_fast_paths.py`` holds it to the plain calls.
        """
        if self.acked or self.batch_acks:
            return start
        md = self.mark_delete
        k = start
        while k < stop:
            pos = positions[k]
            if pos > lacs[k] or pos < md:
                break
            md = pos
            k += 1
        self.mark_delete = md
        return k

    def _ack_batch_position(
        self,
        mid: MessageId,
        ledgers: Ledgers,
        lac: Position,
        acknowledgment_at_batch_index_level_enabled: bool,
    ) -> Position:
        """ManagedCursorImpl.ackBatchPosition: keep the batch mask only when it moved further
        (no roll back), drop batch state below, and stop mark-delete before the entry."""
        pos = mid.position
        new_pos = _previous_as_of(ledgers, pos, lac)
        if acknowledgment_at_batch_index_level_enabled:
            assert mid.ack_set is not None
            current = self.batch_acks.get(pos)
            if current is None or next_set_bit(mid.ack_set) > next_set_bit(current.unacked):
                self.batch_acks[pos] = BatchAck(mid.batch_size, mid.ack_set)
            for stale in [p for p in self.batch_acks if p < new_pos]:
                del self.batch_acks[stale]
        return new_pos

    # ---- the broker's own cursor operations -----------------------------------------
    def reset(self, mark_delete: Position, ledgers: Ledgers, lac: Position) -> None:
        """ManagedCursorImpl.internalResetCursor, as it completes (RESET_CURSOR).

        A consumer's seek and the admin API's reset-cursor end here
        (``PersistentSubscription.resetCursor``). Mark-delete becomes the entry before the new
        read position, backwards or forwards, and every individual and batch-index ack is
        forgotten (``individualDeletedMessages.clear()``, ``batchDeletedIndexes.clear()``):
        everything above mark-delete is unacked again. The event names the resulting
        mark-delete, which the broker holds once the reset is done. Pulsar keeps the batch mask
        of a seek to one message of a batch (the reset position's ack set); the event does not
        carry it, so that entry counts as wholly unacked here.

        The broker's consumed counter keeps counting the forgotten individual acks: the reset
        first mark-deletes (``internalAsyncMarkDelete``, which drops the acks at or below the
        new mark-delete), then moves the counter by the entries between the two mark-deletes
        (``getNumberOfEntries``), counting the dropped acks a second time, and clears the acks
        above without counting them back. Either way every individual ack held before the reset
        stays counted as consumed (``consumed_overcount``, see ``msg_backlog``).
        """
        _check_mark_delete(mark_delete, lac, "cursor reset")
        self.consumed_overcount += self.acked.count_existing(ledgers)
        self.mark_delete = mark_delete
        self.acked = AckRangeSet()
        self.batch_acks = {}

    def mark_delete_to(self, mark_delete: Position, ledgers: Ledgers, lac: Position) -> None:
        """ManagedCursorImpl.asyncMarkDelete from the broker itself (MARK_DELETE).

        The admin API's skip (``asyncSkipEntries``), clear-backlog (``asyncClearBacklog``) and
        expire-messages (``PersistentMessageExpiryMonitor``) move mark-delete forwards as a
        cumulative ack does, with no consumer: acked runs after it are absorbed, and ranges and
        batch state at or below it purged. A position below mark-delete is refused, as
        ``setAcknowledgedPosition`` refuses it (the broker then reports the backlog as already
        cleared).
        """
        _check_mark_delete(mark_delete, lac, "mark-delete")
        self._set_acknowledged_position(mark_delete, ledgers, lac)

    # ---- ledger deletion ------------------------------------------------------------
    def advance_past_deleted_ledgers(
        self, highest_deleted: Position, ledgers: Ledgers, lac: Position
    ) -> bool:
        """ManagedLedgerImpl.advanceCursorsIfNecessary: before deleting ledgers, a cursor whose
        mark-delete lies below the last entry of the deleted ledgers (``highestPositionToDelete``)
        is mark-deleted there, like a consumer's cumulative ack (asyncMarkDelete): mark-delete
        moves onto that entry, absorbs the acked runs that follow it (across ledgers), and every
        acked range and batch state at or below it is purged. Returns whether it moved.

        Pulsar moves a cursor only when ``highestPositionToDelete`` is above its mark-delete and
        not above the last confirmed entry; a cursor already past the deleted ledgers keeps its
        state (its acked ranges all lie above mark-delete, so none is in a deleted ledger).
        """
        if highest_deleted <= self.mark_delete or highest_deleted > lac:
            return False
        self.ack_cumulative(
            MessageId(highest_deleted), ledgers, lac, acknowledgment_at_batch_index_level_enabled=False
        )
        return True

    # ---- projections ----------------------------------------------------------------
    def batch_ack_rows(self) -> list[tuple[Position, BatchAck]]:
        return sorted(self.batch_acks.items())

    # ---- encoding -------------------------------------------------------------------
    def encode(self) -> bytes:
        """Versioned, exact, unbounded binary form (the `cursors.state` column).

        Layout (little endian): b"AKC", version u8, sub-type index u8, mark-delete ledger i64 and
        entry i64; in version 2 only, ``consumed_overcount`` i64 (a cursor without one is written
        as version 1, so cursors no reset touched keep their bytes); the range set (ledger count
        u32, then per ledger: id i64, byte length u32, portable roaring bitmap of acked entry
        ids); batch entries (count u32, then per entry: ledger i64, entry i64, batch size i32,
        word count u32, words i64...).
        """
        out = [
            frame(_MAGIC, _VERSION if self.consumed_overcount else _VERSION_1),
            _HEADER.pack(SUB_TYPES.index(self.sub_type), *self.mark_delete),
        ]
        if self.consumed_overcount:
            out.append(_OVERCOUNT.pack(self.consumed_overcount))
        self.acked.encode_into(out)
        out.append(struct.pack("<I", len(self.batch_acks)))
        for pos, batch in sorted(self.batch_acks.items()):
            words = batch.words
            out.append(_BATCH.pack(pos[0], pos[1], batch.batch_size, len(words)))
            out.append(struct.pack(f"<{len(words)}q", *words))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> Cursor:
        reader = StateReader(data, _MAGIC, _VERSION, "cursor state", older=(_VERSION_1,))
        sub_index, md_ledger, md_entry = reader.unpack(_HEADER)
        if sub_index >= len(SUB_TYPES):
            raise reader.corrupt(f"unknown subscription type {sub_index}")
        cursor = cls(SUB_TYPES[sub_index], (md_ledger, md_entry))
        if reader.version >= _VERSION:
            (cursor.consumed_overcount,) = reader.unpack(_OVERCOUNT)
        cursor.acked = AckRangeSet.read_from(reader)
        for _ in range(reader.u32()):
            ledger_id, entry_id, batch_size, nwords = reader.unpack(_BATCH)
            words = reader.longs(nwords)
            cursor.batch_acks[(ledger_id, entry_id)] = BatchAck(batch_size, words_to_mask(words))
        reader.end()
        return cursor

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Cursor)
            and self.sub_type == other.sub_type
            and self.mark_delete == other.mark_delete
            and self.acked == other.acked
            and self.batch_acks == other.batch_acks
            and self.consumed_overcount == other.consumed_overcount
        )

    def __repr__(self) -> str:
        md = position_text(self.mark_delete)
        return f"Cursor({self.sub_type}, md={md}, acked={self.acked}, batch={self.batch_acks})"
