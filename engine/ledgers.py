"""The ledgers of one topic partition, as known from PUBLISH events.

A ledger exists once an entry was published into it; its entries are 0..last. This is the part
of ``ManagedLedgerImpl`` the cursor needs: the last published position (LAC), next/previous
valid position across ledgers, and entry counts between two positions.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterator

import numpy as np

from engine.codec import StateReader, frame
from engine.position import EARLIEST, Position

_MAGIC = b"AKL"
_VERSION = 1


class Ledgers:
    """Ledger ids in ascending order with their last entry id; entries are contiguous from 0."""

    __slots__ = ("_counts_before", "_ids", "_last")

    def __init__(self, ids: list[int] | None = None, last: list[int] | None = None) -> None:
        self._ids: list[int] = list(ids or [])
        self._last: list[int] = list(last or [])
        self._counts_before: list[int] | None = None

    # ---- building -------------------------------------------------------------------
    def publish(self, pos: Position) -> None:
        """Record an appended entry. Callers guarantee ``pos > last_position`` (append only)."""
        if self._ids and self._ids[-1] == pos[0]:
            self._last[-1] = max(self._last[-1], pos[1])
        else:
            self._ids.append(pos[0])
            self._last.append(pos[1])
        self._counts_before = None

    def publish_run(self, ledger_ids: np.ndarray, entry_ids: np.ndarray) -> None:
        """``publish`` of each position in order, at once: positions ascending, all after
        ``last_position`` (a batch's accepted publishes). Each run of one ledger id leaves its
        last entry as the ledger's last; a run in the last known ledger extends it."""
        if ledger_ids.size == 0:
            return
        ends = [*np.flatnonzero(np.diff(ledger_ids)).tolist(), ledger_ids.size - 1]
        ids = ledger_ids[ends].tolist()
        lasts = entry_ids[ends].tolist()
        if self._ids and self._ids[-1] == ids[0]:
            self._last[-1] = max(self._last[-1], lasts[0])
            ids, lasts = ids[1:], lasts[1:]
        self._ids.extend(ids)
        self._last.extend(lasts)
        self._counts_before = None

    def trim_before(self, first_retained_ledger_id: int) -> list[tuple[int, int]]:
        """Delete the ledgers below ``first_retained_ledger_id``; return them as (id, last entry).

        ManagedLedgerImpl.internalTrimLedgers + doDeleteLedgers, with the list of ledgers to
        delete given by the caller (a topic's retention decided it). As there, the ledger being
        written to is never deleted ("currentLedger can not be deleted"): the last known ledger
        holds the last published entry, which later events are checked against, so it is kept
        even when ``first_retained_ledger_id`` lies beyond it.
        """
        keep_from = bisect.bisect_left(self._ids, first_retained_ledger_id)
        keep_from = min(keep_from, max(len(self._ids) - 1, 0))
        removed = list(zip(self._ids[:keep_from], self._last[:keep_from], strict=True))
        if removed:
            del self._ids[:keep_from]
            del self._last[:keep_from]
            self._counts_before = None
        return removed

    # ---- queries --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(ledger id, last entry id) in ascending order."""
        return zip(self._ids, self._last, strict=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ledgers) and self._ids == other._ids and self._last == other._last

    def __repr__(self) -> str:
        return f"Ledgers({list(self)})"

    @property
    def last_position(self) -> Position:
        """ManagedLedgerImpl.getLastConfirmedEntry; EARLIEST when nothing was published."""
        if not self._ids:
            return EARLIEST
        return (self._ids[-1], self._last[-1])

    @property
    def first_ledger_id(self) -> int | None:
        return self._ids[0] if self._ids else None

    def last_entry(self, ledger_id: int) -> int | None:
        """Last entry id of a ledger, or None if the ledger has no entries (does not exist)."""
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            return self._last[i]
        return None

    def exists(self, pos: Position) -> bool:
        last = self.last_entry(pos[0])
        return last is not None and 0 <= pos[1] <= last

    def next_valid(self, pos: Position) -> Position:
        """ManagedLedgerImpl.getNextValidPosition: next existing entry, else LAC.next."""
        i = bisect.bisect_left(self._ids, pos[0])
        if i < len(self._ids) and self._ids[i] == pos[0]:
            if pos[1] + 1 <= self._last[i]:
                return (pos[0], pos[1] + 1)
            i += 1
        if i < len(self._ids):
            return (self._ids[i], 0)
        lac = self.last_position
        return (lac[0], lac[1] + 1)

    def previous(self, pos: Position) -> Position:
        """ManagedLedgerImpl.getPreviousPosition: entry-1, else the last entry of the nearest
        earlier non-empty ledger, else ``L:-1``."""
        if pos[1] > 0:
            return (pos[0], pos[1] - 1)
        i = bisect.bisect_left(self._ids, pos[0])
        if i > 0:
            return (self._ids[i - 1], self._last[i - 1])
        return (pos[0], -1)

    def _prefix(self) -> list[int]:
        if self._counts_before is None:
            counts = [0]
            for last in self._last:
                counts.append(counts[-1] + last + 1)
            self._counts_before = counts
        return self._counts_before

    def count_upto(self, pos: Position) -> int:
        """Number of existing entries at or before ``pos``."""
        prefix = self._prefix()
        i = bisect.bisect_left(self._ids, pos[0])
        total = prefix[i]
        if i < len(self._ids) and self._ids[i] == pos[0]:
            total += max(0, min(pos[1], self._last[i]) + 1)
        return total

    def count_between(self, lower_open: Position, upper_closed: Position) -> int:
        """ManagedLedgerImpl.getNumberOfEntries(Range.openClosed(lower, upper))."""
        if upper_closed <= lower_open:
            return 0
        return self.count_upto(upper_closed) - self.count_upto(lower_open)

    def has_entries_between(self, lower_open: Position, upper_closed: Position) -> bool:
        """``count_between(lower_open, upper_closed) > 0``, answered without the prefix counts
        when both ends are in one ledger (a cursor's hole before its first acked range, asked
        after every ack): an entry lies between them iff that ledger's entries ``0..last``
        meet ``(lower, upper]``."""
        if upper_closed <= lower_open:
            return False
        if lower_open[0] == upper_closed[0]:
            return self.has_entries_in(lower_open[0], lower_open[1], upper_closed[1])
        return self.count_between(lower_open, upper_closed) > 0

    def has_entries_in(self, ledger_id: int, after_entry: int, up_to_entry: int) -> bool:
        """Whether ledger ``ledger_id`` holds an entry in ``(after_entry, up_to_entry]``: its
        entries are ``0..last``. Plain ints, for the cursor's check after every ack."""
        last = self.last_entry(ledger_id)
        return last is not None and max(after_entry + 1, 0) <= min(up_to_entry, last)

    @property
    def total_entries(self) -> int:
        return self._prefix()[-1]

    # ---- encoding -------------------------------------------------------------------
    def encode(self) -> bytes:
        """Versioned binary form: magic, version, count, ledger ids, last entry ids (LE i64)."""
        ids = np.asarray(self._ids, dtype="<i8")
        last = np.asarray(self._last, dtype="<i8")
        return frame(_MAGIC, _VERSION) + struct.pack("<I", len(ids)) + ids.tobytes() + last.tobytes()

    @classmethod
    def decode(cls, data: bytes | None) -> Ledgers:
        if not data:
            return cls()
        reader = StateReader(data, _MAGIC, _VERSION, "ledger state")
        n = reader.u32()
        ids = reader.int64s(n).tolist()
        last = reader.int64s(n).tolist()
        reader.end()
        return cls(ids, last)
