"""Positions of entries in a topic partition's managed ledger.

A position is (ledger id, entry id), ordered lexicographically, printed ``"L:E"``. Entry id -1
means "before the first entry of that ledger" and is a normal mark-delete value. The broker
keys all cursor state by (ledger, entry) only: batch indexes live in ``ack_set``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from operator import itemgetter
from typing import TypeAlias

import numpy as np

Position: TypeAlias = tuple[int, int]
"""An entry position ``(ledger_id, entry_id)``: tuple ordering is Pulsar's ``ENTRY_COMPARATOR``
(ledger, then entry). Code reads it by unpacking, or ``pos[0]`` (ledger) and ``pos[1]`` (entry).

A plain tuple, not a ``NamedTuple``: the engine makes one per event of a batch (each DISPATCH's
and ACK's position, each event's last published entry), and CPython creates and frees a tuple
subclass's instance through its generic type machinery, about four times the cost of a tuple's.
On the generated mix (``bench --engine``) the named form was a tenth of the apply's
instructions (536M against 478M). Printed with ``position_text``, never ``str``.
"""


def position_text(pos: Position) -> str:
    """``"L:E"``: ``PositionImpl.toString``, the form Pulsar's stats and tooling print."""
    return f"{pos[0]}:{pos[1]}"


def parse_position(text: str) -> Position:
    """Read ``"L:E"``, the form Pulsar's tooling prints."""
    ledger, sep, entry = text.partition(":")
    if not sep:
        raise ValueError(f"not a position (expected 'ledger:entry'): {text!r}")
    return (int(ledger), int(entry))


def positions_of(ledgers: Sequence[int], entries: Sequence[int]) -> list[Position]:
    """``[(l, e) for l, e in zip(ledgers, entries)]`` without a Python step per position. The
    per-event paths of a batch read their positions from such a list."""
    return list(zip(ledgers, entries, strict=True))


_SORT_IN_NUMPY = 256  # below this, sorted() on the tuples is quicker than building arrays


def position_columns(positions: Sequence[Position]) -> tuple[np.ndarray, np.ndarray]:
    """(ledger ids, entry ids) of ``positions`` as int64 columns, in the order given."""
    n = len(positions)
    ledgers = np.fromiter(map(itemgetter(0), positions), dtype=np.int64, count=n)
    entries = np.fromiter(map(itemgetter(1), positions), dtype=np.int64, count=n)
    return ledgers, entries


def position_order(positions: Sequence[Position], first: Sequence[int] | None = None) -> list[int]:
    """Indexes that put ``positions`` in position order (``first``, if given, sorts before the
    position: ``(first[i], positions[i])`` order), as a stable ``sorted`` would.

    A million positions (a batch's changed pending acks or redeliveries) take several seconds to
    ``sorted()`` as tuples in random memory order; two int64 columns and a ``lexsort`` take a
    fraction of that. Small inputs are sorted as tuples.
    """
    n = len(positions)
    if n < _SORT_IN_NUMPY:
        keys = positions if first is None else list(zip(first, positions, strict=True))
        return sorted(range(n), key=keys.__getitem__)
    ledgers, entries = position_columns(positions)
    columns = (entries, ledgers) if first is None else (entries, ledgers, np.asarray(first, dtype=np.int64))
    return np.lexsort(columns).tolist()


def sorted_columns(positions: Collection[Position]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``positions`` in position order as int64 columns (ledger ids, entry ids), and the order
    itself: row ``k`` is the ``order[k]``-th position as iterated. The projections of a
    redeliver-all write a million positions from these columns without a Python int each."""
    keys = list(positions)
    ledgers, entries = position_columns(keys)
    order = np.lexsort((entries, ledgers))
    return ledgers[order], entries[order], order


def packed_keys(ledgers: np.ndarray, entries: np.ndarray, universe: np.ndarray) -> np.ndarray:
    """(ledger, entry) pairs as one int64 each, ordered as the positions are, for ``np.isin`` and
    ``np.searchsorted`` between two sets of positions: the ledger's rank in ``universe`` (sorted,
    holding every ledger id of both sets) in the high 32 bits, ``entry + 1`` in the low 32.

    Entry ids of real entries are at most ``rangeset.MAX_ENTRY_ID`` (2**32 - 2), so ``entry + 1``
    fits; ranks are below 2**31 for any partition's ledger count.
    """
    return (np.searchsorted(universe, ledgers).astype(np.int64) << 32) | (entries + 1)


def sorted_positions(positions: Collection[Position]) -> list[Position]:
    """``sorted(positions)``, through ``position_order`` (columns when there are many)."""
    keys = list(positions)
    return list(map(keys.__getitem__, position_order(keys)))


def sorted_after(positions: Collection[Position], floor: Position) -> list[Position]:
    """The positions above ``floor``, in position order (a consumer's pending acks handed back
    by a redeliver-all: up to millions, sorted as columns like ``position_order``)."""
    if len(positions) < _SORT_IN_NUMPY:
        return sorted(p for p in positions if p > floor)
    keys = list(positions)
    ledgers, entries = position_columns(keys)
    order = np.lexsort((entries, ledgers))
    floor_ledger, floor_entry = floor
    above = (ledgers[order] > floor_ledger) | (
        (ledgers[order] == floor_ledger) & (entries[order] > floor_entry)
    )
    return list(map(keys.__getitem__, order[above].tolist()))


# PositionFactory.EARLIEST: a cursor that knows no ledger yet sits here.
EARLIEST: Position = (-1, -1)
