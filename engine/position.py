"""Positions of entries in a topic partition's managed ledger.

A position is (ledger id, entry id), ordered lexicographically, printed ``"L:E"``. Entry id -1
means "before the first entry of that ledger" and is a normal mark-delete value. The broker
keys all cursor state by (ledger, entry) only: batch indexes live in ``ack_set``.
"""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """An entry position; tuple ordering is Pulsar's ``ENTRY_COMPARATOR`` (ledger, then entry)."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        # PositionImpl.toString: "ledgerId:entryId"
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Read ``"L:E"``, the form Pulsar's tooling prints."""
        ledger, sep, entry = text.partition(":")
        if not sep:
            raise ValueError(f"not a position (expected 'ledger:entry'): {text!r}")
        return cls(int(ledger), int(entry))


# PositionFactory.EARLIEST: a cursor that knows no ledger yet sits here.
EARLIEST = Position(-1, -1)
