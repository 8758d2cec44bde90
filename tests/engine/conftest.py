"""Helpers for engine tests: build ledgers and cursors the way Pulsar's tests do."""

from __future__ import annotations

import pytest

from engine import Cursor, Ledgers


def make_ledgers(*sizes: int, first_id: int = 10) -> Ledgers:
    """Ledgers 10, 11, ... holding the given number of entries each (maxEntriesPerLedger)."""
    ledgers = Ledgers()
    for offset, size in enumerate(sizes):
        for entry in range(size):
            ledgers.publish((first_id + offset, entry))
    return ledgers


@pytest.fixture
def earliest():
    """A cursor opened on the ledgers before any ack: markDelete = first ledger : -1."""

    def build(ledgers: Ledgers, sub_type: str = "Exclusive") -> Cursor:
        return Cursor.subscribe(sub_type, "Earliest", ledgers, ledgers.last_position)

    return build
