"""MurmurHash3 x86_32 as Pulsar's ``Murmur3_32Hash``: known vectors, ``mmh3`` as the oracle."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.hashing import (
    MASK31,
    java_utf8,
    make_hash31,
    murmur3_32,
    murmur3_32_many,
    murmur3_32_suffixed,
)

# Published MurmurHash3 x86_32 values (seed 0 unless given), every tail length 0-3 and 1-2 blocks.
KNOWN = [
    (b"", 0, 0),
    (b"", 1, 0x514E28B7),
    (b"a", 0, 1009084850),
    (b"ab", 0, 2613040991),
    (b"abc", 0, 3017643002),
    (b"abcd", 0, 1139631978),
    (b"abcde", 0, 3902511862),
    (b"abcdef", 0, 1635893381),
    (b"abcdefg", 0, 2285673222),
    (b"abcdefgh", 0, 1239272644),
    (b"abcdefghi", 0, 1108608752),
    (b"Turn me into a hash", 1234, 4138100590),
]

# Pulsar's masked hash (Murmur3_32Hash.makeHash), as the pulsar-client-dotnet tests pin it.
KNOWN_MASKED = [
    (b"I will not buy this record, it is scratched.", 684731290),
    (b"Hello world", 764499724),
]


@pytest.mark.parametrize(("data", "seed", "expected"), KNOWN)
def test_known_vectors(data: bytes, seed: int, expected: int) -> None:
    assert murmur3_32(data, seed) == expected
    assert murmur3_32_many([data], seed).tolist() == [expected]


@pytest.mark.parametrize(("data", "expected"), KNOWN_MASKED)
def test_make_hash31_is_pulsars_masked_hash(data: bytes, expected: int) -> None:
    assert make_hash31(data) == expected
    assert make_hash31(data) == murmur3_32(data) & 0x7FFFFFFF


def test_vectorised_known_vectors_in_one_call_keep_input_order() -> None:
    seed0 = [(d, e) for d, s, e in KNOWN if s == 0]
    got = murmur3_32_many([d for d, _ in seed0])
    assert got.dtype == np.uint32
    assert got.tolist() == [e for _, e in seed0]


def test_empty_input_gives_empty_output() -> None:
    assert murmur3_32_many([]).shape == (0,)
    assert murmur3_32_suffixed([], [b"0"]).shape == (0, 1)
    assert murmur3_32_suffixed([b"x"], []).shape == (1, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=60), st.integers(0, 2**32 - 1))
def test_many_hashes_every_key_in_input_order(keys: list[bytes], seed: int) -> None:
    assert murmur3_32_many(keys, seed).tolist() == [murmur3_32(k, seed) for k in keys]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.binary(max_size=13), min_size=1, max_size=30),
    st.lists(st.binary(max_size=7), min_size=1, max_size=8),
)
def test_suffixed_is_the_hash_of_every_concatenation(prefixes: list[bytes], suffixes: list[bytes]) -> None:
    """Ten names or more with short suffixes (<= 4 bytes) take the shared-prefix numpy path,
    fewer names or longer suffixes the per-key one."""
    got = murmur3_32_suffixed(prefixes, suffixes)
    assert got.shape == (len(prefixes), len(suffixes))
    assert got.tolist() == [[mmh3.hash(p + s, 0, signed=False) for s in suffixes] for p in prefixes]


def test_suffixed_takes_the_numpy_path_for_a_ring_of_many_names() -> None:
    names = [f"consumer-{i}".encode() for i in range(50)]
    suffixes = [str(j).encode() for j in range(100)]
    got = murmur3_32_suffixed(names, suffixes)
    assert got.tolist() == [[mmh3.hash(n + s, 0, signed=False) for s in suffixes] for n in names]


def test_suffixed_ring_keys_share_no_separator() -> None:
    """The Failover ring key is name + j: "c1" + "10" is the key "c110"."""
    got = murmur3_32_suffixed([b"c1", b"c11"], [b"10", b"0"])
    assert got[0, 0] == got[1, 1] == murmur3_32(b"c110")


def test_long_keys_hash_like_short_ones() -> None:
    keys = [bytes(range(256)) * 4, b"x" * 1001, b"y"]
    assert murmur3_32_many(keys).tolist() == [mmh3.hash(k, 0, signed=False) for k in keys]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("consumer-1", b"consumer-1"),
        ("é中", "é中".encode()),
        ("\U0001f600", b"\xf0\x9f\x98\x80"),
        ("a\ud800b", b"a?b"),  # a lone surrogate: Java's encoder writes '?'
        ("\ud83d\ude00", b"\xf0\x9f\x98\x80"),  # a pair held as two code points is one character
    ],
)
def test_java_utf8_encodes_like_string_get_bytes(text: str, expected: bytes) -> None:
    assert java_utf8(text) == expected


def test_mask31_is_integer_max_value() -> None:
    assert MASK31 == 2**31 - 1
