"""The four encoded states through ``engine.codec``: any damage is ``CorruptState``, nothing else.

A state column read back from a damaged file or written by a foreign or newer writer must fail
in the one way its readers report (``stats``, ``compact`` and the apply UDF catch
``CorruptState``), never as a ``struct.error`` or ``IndexError`` from inside a decoder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import CorruptState, Cursor, Ledgers
from engine.dedup import Producer, Producers
from engine.subscription import Subscription
from tests.engine.conftest import make_ledgers
from tests.engine.test_encoding import cursor_with_everything
from tests.engine.test_subscription import shared_with_two


def _producers() -> Producers:
    state = Producers()
    state.dedup_enabled = True
    state.by_name["p-\u00fc"] = Producer(4, 2, 7, 9)
    state.by_name["q"] = Producer(None, 5, 0, 11)
    state.in_flight[3] = [5, 6]
    return state


def _subscription() -> Subscription:
    """Consumers with pending acks, a nack, a redeliver-all's replays and the tracker."""
    s = shared_with_two()
    s.apply(s.subscribe(3, ack_timeout_ms=5000, max_redeliver_count=3), s.dispatch(3, 10, 0))
    s.apply(s.dispatch(1, 10, 1), s.ids("NACK", 1, (10, 1)), s.dispatch(2, 10, 2), s.ids("REDELIVER", 2))
    return s.sub()


def _reset_cursor() -> Cursor:
    """A cursor a reset left with a consumed overcount: written as version 2."""
    cursor = cursor_with_everything()
    cursor.consumed_overcount = 12
    return cursor


STATES: dict[str, tuple[bytes, Callable[[bytes], object]]] = {
    "cursor": (cursor_with_everything().encode(), Cursor.decode),
    "cursor after a reset": (_reset_cursor().encode(), Cursor.decode),
    "ledgers": (make_ledgers(3, 1, 7).encode(), Ledgers.decode),
    "producers": (_producers().encode() or b"", Producers.decode),
    "subscription": (_subscription().encode(), Subscription.decode),
}


def _decodes_or_is_corrupt(decode: Callable[[bytes], object], data: bytes) -> None:
    with contextlib.suppress(CorruptState):
        decode(data)


@pytest.mark.parametrize("name", sorted(STATES))
def test_every_truncation_is_corrupt_state(name: str) -> None:
    data, decode = STATES[name]
    for cut in range(1, len(data)):
        with pytest.raises(CorruptState):
            decode(data[:cut])
    with pytest.raises(CorruptState, match="trailing bytes"):
        decode(data + b"\0")


@pytest.mark.parametrize("name", sorted(STATES))
def test_every_flipped_byte_decodes_or_is_corrupt_state(name: str) -> None:
    data, decode = STATES[name]
    for at in range(len(data)):
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        _decodes_or_is_corrupt(decode, bytes(damaged))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(STATES)), st.data())
def test_random_damage_decodes_or_is_corrupt_state(name: str, draw: st.DataObject) -> None:
    data, decode = STATES[name]
    damaged = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        damaged[draw.draw(st.integers(0, len(data) - 1))] = draw.draw(st.integers(0, 255))
    _decodes_or_is_corrupt(decode, bytes(damaged))


@pytest.mark.parametrize("name", sorted(STATES))
def test_a_foreign_magic_or_a_newer_version_is_refused_by_name(name: str) -> None:
    data, decode = STATES[name]
    with pytest.raises(CorruptState, match="bad magic"):
        decode(b"XYZ" + data[3:])
    with pytest.raises(CorruptState, match="unsupported version 9"):
        decode(data[:3] + b"\x09" + data[4:])
