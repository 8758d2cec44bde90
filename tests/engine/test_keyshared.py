"""Key_Shared sticky keys and hashes (spec 6.1-6.2; Commands.peekStickyKey,
StickyKeyConsumerSelectorUtils.makeStickyKeyHash)."""

from __future__ import annotations

import base64

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.keyshared import (
    NONE_KEY,
    SELECTOR_RANGES,
    KeyHashRange,
    hash_in_range,
    hashes_in_range,
    peek_sticky_key,
    selector_range,
    sticky_key,
    sticky_key_hash,
    sticky_key_hash_many,
)


def _m(key: bytes) -> int:
    """Murmur3_32Hash.makeHash with mmh3 as the oracle."""
    return mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF


# ---- sticky key -----------------------------------------------------------------------------
def test_no_key_is_none_key_and_empty_key_is_a_key() -> None:
    assert sticky_key(None) == NONE_KEY == b"NONE_KEY"
    assert sticky_key("") == b""
    assert sticky_key_hash(None) == sticky_key_hash("NONE_KEY")
    assert sticky_key_hash("") != sticky_key_hash(None)


def test_string_key_is_utf8_and_bytes_are_taken_as_they_are() -> None:
    assert sticky_key("clé") == "clé".encode()
    assert sticky_key(b"\x00\xff") == b"\x00\xff"


def test_ordering_key_wins_over_partition_key() -> None:
    assert peek_sticky_key(b"order", "part") == b"order"
    assert peek_sticky_key(b"", "part") == b""  # set but empty still wins (hasOrderingKey)
    assert peek_sticky_key(None, "part") == b"part"
    assert peek_sticky_key(None, None) == NONE_KEY


def test_base64_partition_key_is_decoded() -> None:
    raw = b"\x00\x01binary\xfe"
    assert peek_sticky_key(None, base64.b64encode(raw).decode(), True) == raw
    # Java's basic decoder does not require padding
    assert peek_sticky_key(None, "YWI", True) == b"ab"
    assert peek_sticky_key(None, "YQ", True) == b"a"


@pytest.mark.parametrize("bad", ["Y", "YQ=", "YWJj=x", "YQ===", "Y Q==", "YQ==YQ==", "éé==", "=", "YWJj?A=="])
def test_invalid_base64_partition_key_falls_back_to_none_key(bad: str) -> None:
    """Java throws inside peekStickyKey's try, which then returns NONE_KEY."""
    assert peek_sticky_key(None, bad, True) == NONE_KEY


def test_base64_flag_is_ignored_without_partition_key() -> None:
    assert peek_sticky_key(None, None, True) == NONE_KEY


# ---- hash ranges ----------------------------------------------------------------------------
def test_selector_ranges_are_pulsars() -> None:
    assert SELECTOR_RANGES["consistent"] == KeyHashRange(1, 65535)
    assert SELECTOR_RANGES["consistent"].size == 65535
    assert SELECTOR_RANGES["auto_split"].size == SELECTOR_RANGES["exclusive"].size == 65536
    assert SELECTOR_RANGES["classic_consistent"] == KeyHashRange(1, 2**31 - 2)
    with pytest.raises(ValueError, match="unknown Key_Shared selector"):
        selector_range("round_robin")


@pytest.mark.parametrize(
    ("m", "consistent", "auto_split"),
    [
        (0, 1, 1),  # auto-split: 0 is STICKY_KEY_HASH_NOT_SET, becomes 1
        (65536, 2, 1),  # 65536 % 65535 + 1 = 2 ; 65536 % 65536 = 0 -> 1
        (65535, 1, 65535),  # 65535 % 65535 + 1 = 1 ; the top of auto-split's range
        (65534, 65535, 65534),  # the top of consistent hashing's range
        (1, 2, 1),  # 1 and 0 collide on 1 under auto-split
        (2**31 - 1, (2**31 - 1) % 65535 + 1, (2**31 - 1) % 65536),
    ],
)
def test_hash_in_range_edges(m: int, consistent: int, auto_split: int) -> None:
    assert hash_in_range(m, SELECTOR_RANGES["consistent"]) == consistent
    assert hash_in_range(m, SELECTOR_RANGES["auto_split"]) == auto_split
    assert hashes_in_range(np.array([m]), SELECTOR_RANGES["consistent"]).tolist() == [consistent]
    assert hashes_in_range(np.array([m]), SELECTOR_RANGES["auto_split"]).tolist() == [auto_split]


def test_real_keys_at_the_range_edges() -> None:
    """Keys found by search whose Murmur3 hits each edge (checked against mmh3 here)."""
    assert _m(b"key-30884") % 65536 == 0
    assert sticky_key_hash("key-30884", "auto_split") == 1  # would be 0
    assert sticky_key_hash("key-30884", "consistent") == _m(b"key-30884") % 65535 + 1
    assert _m(b"key-4415") % 65535 == 0
    assert sticky_key_hash("key-4415", "consistent") == 1
    assert _m(b"key-6364") % 65535 == 65534
    assert sticky_key_hash("key-6364", "consistent") == 65535
    assert _m(b"key-57996") % 65536 == 65535
    assert sticky_key_hash("key-57996", "auto_split") == 65535
    assert sticky_key_hash("key-57996", "exclusive") == 65535


def test_classic_range_is_almost_the_raw_hash() -> None:
    m = _m(b"k")
    assert sticky_key_hash("k", "classic_consistent") == m % (2**31 - 2) + 1


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=30), st.binary(max_size=30)))
def test_hash_is_in_range_and_never_zero(key: str | bytes | None) -> None:
    for selector, key_range in SELECTOR_RANGES.items():
        value = sticky_key_hash(key, selector)
        assert key_range.start <= value <= key_range.end
        assert value != 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.text(max_size=20), st.binary(max_size=20)), max_size=50),
    st.sampled_from(sorted(SELECTOR_RANGES)),
)
def test_many_matches_scalar(keys: list[str | bytes | None], selector: str) -> None:
    got = sticky_key_hash_many(keys, selector)
    assert got.dtype == np.int32
    assert got.tolist() == [sticky_key_hash(k, selector) for k in keys]


def test_many_keys_spread_over_the_whole_consistent_range() -> None:
    hashes = sticky_key_hash_many([f"k{i}" for i in range(20_000)])
    assert hashes.min() >= 1 and hashes.max() <= 65535
    assert np.unique(hashes).size > 15_000  # 20,000 keys in 65,535 slots: few collisions
