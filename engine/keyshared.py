"""Key_Shared sticky keys and their hashes (spec section 6.1-6.3).

Every pending ack of a Key_Shared subscription carries the hash of its entry's sticky key
(``PendingAcksMap``; ``pending_acks.sticky_key_hash``), and draining, replay blocking and the
consumer choice all work on that hash, never on the key itself. Two keys with the same hash are
one key as far as ordering goes (spec 6, edge case 3).

Mirrors ``Commands.peekStickyKey`` (the key), ``StickyKeyConsumerSelectorUtils.makeStickyKeyHash``
(the hash within a selector's range) and the ranges of the selectors
(``ConsistentHashingStickyKeyConsumerSelector``, ``HashRangeAutoSplitStickyKeyConsumerSelector``,
``HashRangeExclusiveStickyKeyConsumerSelector``, and the classic dispatcher's consistent hashing).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np

from engine.hashing import MASK31, java_utf8, make_hash31, murmur3_32_many

NONE_KEY: Final = b"NONE_KEY"  # Commands.NONE_KEY: entries with neither ordering nor partition key
STICKY_KEY_HASH_NOT_SET: Final = 0  # StickyKeyConsumerSelector.STICKY_KEY_HASH_NOT_SET
DEFAULT_RANGE_SIZE: Final = 2 << 15  # StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE = 65536


class KeyHashRange(NamedTuple):
    """``org.apache.pulsar.client.api.Range``: inclusive on both ends, ``size = end - start + 1``."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start + 1


# selector -> the key hash range it hashes into (``getKeyHashRange()``), Pulsar 4.x
SELECTOR_RANGES: Final[dict[str, KeyHashRange]] = {
    # ConsistentHashingStickyKeyConsumerSelector: Range.of(STICKY_KEY_HASH_NOT_SET + 1, 65535)
    "consistent": KeyHashRange(1, DEFAULT_RANGE_SIZE - 1),
    # HashRangeAutoSplit... and HashRangeExclusive...: Range.of(0, rangeSize - 1)
    "auto_split": KeyHashRange(0, DEFAULT_RANGE_SIZE - 1),
    "exclusive": KeyHashRange(0, DEFAULT_RANGE_SIZE - 1),
    # PersistentStickyKeyDispatcherMultipleConsumersClassic: rangeMaxValue Integer.MAX_VALUE - 1
    "classic_consistent": KeyHashRange(1, 2**31 - 2),
}


def selector_range(selector: str) -> KeyHashRange:
    try:
        return SELECTOR_RANGES[selector]
    except KeyError:
        raise ValueError(
            f"unknown Key_Shared selector {selector!r}; expected one of {sorted(SELECTOR_RANGES)}"
        ) from None


def sticky_key(key: str | bytes | None) -> bytes:
    """The sticky key of an entry whose (ordering or partition) key is ``key``: its bytes (a
    string as UTF-8, as ``getBytes(UTF_8)``), or ``NONE_KEY`` when there is none. An empty key
    is a key (``hasPartitionKey()`` is true for ``""``), not ``NONE_KEY``."""
    if key is None:
        return NONE_KEY
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    return java_utf8(key)


_BASE64_BODY = re.compile(rb"[A-Za-z0-9+/]*")


def _java_base64_decode(text: str) -> bytes | None:
    """``java.util.Base64.getDecoder().decode(String)``; None where Java throws.

    Java's basic decoder, unlike ``base64.b64decode``, accepts missing padding but rejects any
    character outside the alphabet, a lone final character, wrong padding and anything after
    the padding."""
    raw = text.encode("latin-1", "replace")  # non-Latin-1 characters are illegal anyway
    pad_at = raw.find(b"=")
    body, padding = (raw, b"") if pad_at < 0 else (raw[:pad_at], raw[pad_at:])
    if not _BASE64_BODY.fullmatch(body) or len(body) % 4 == 1:
        return None
    if padding and not (
        (padding == b"=" and len(body) % 4 == 3) or (padding == b"==" and len(body) % 4 == 2)
    ):
        return None
    try:
        return base64.b64decode(body + b"=" * (-len(body) % 4), validate=True)
    except binascii.Error:  # pragma: no cover - the checks above already rule this out
        return None


def peek_sticky_key(
    ordering_key: bytes | None = None,
    partition_key: str | None = None,
    partition_key_b64_encoded: bool = False,
) -> bytes:
    """``Commands.peekStickyKey``: ``ordering_key`` if set, else ``partition_key`` (base64-decoded
    when flagged, else UTF-8), else ``NONE_KEY``. A flagged key that is not valid base64 makes
    Java throw inside the method's ``try``, which returns ``NONE_KEY`` too."""
    if ordering_key is not None:
        return bytes(ordering_key)
    if partition_key is not None:
        if partition_key_b64_encoded:
            decoded = _java_base64_decode(partition_key)
            return NONE_KEY if decoded is None else decoded
        return java_utf8(partition_key)
    return NONE_KEY


def hash_in_range(murmur31: int, key_range: KeyHashRange) -> int:
    """``StickyKeyConsumerSelectorUtils.makeStickyKeyHash``: ``m % size + start``, 0 -> 1."""
    value = murmur31 % key_range.size + key_range.start
    return STICKY_KEY_HASH_NOT_SET + 1 if value == STICKY_KEY_HASH_NOT_SET else value


def sticky_key_hash(key: str | bytes | None, selector: str = "consistent") -> int:
    """The ``stickyKeyHash`` Pulsar 4.x stores for an entry with key ``key``.

    ``consistent`` (the default selector, ``subscriptionKeySharedUseConsistentHashing=true``):
    ``m % 65535 + 1`` in [1, 65535]; ``auto_split`` / ``exclusive``: ``m % 65536`` with 0 -> 1;
    ``classic_consistent``: ``m % (2^31 - 2) + 1``. ``m`` is Murmur3 masked to 31 bits."""
    return hash_in_range(make_hash31(sticky_key(key)), selector_range(selector))


def hashes_in_range(murmur31: np.ndarray, key_range: KeyHashRange) -> np.ndarray:
    """``hash_in_range`` over an array; int32 (every range fits a Java int)."""
    value = np.asarray(murmur31, dtype=np.int64) % key_range.size + key_range.start
    value[value == STICKY_KEY_HASH_NOT_SET] = STICKY_KEY_HASH_NOT_SET + 1
    return value.astype(np.int32)


def sticky_key_hash_many(keys: Sequence[str | bytes | None], selector: str = "consistent") -> np.ndarray:
    """``sticky_key_hash`` of every key (int32), hashed in one vectorised pass."""
    murmur = murmur3_32_many([sticky_key(k) for k in keys]) & np.uint32(MASK31)
    return hashes_in_range(murmur, selector_range(selector))
