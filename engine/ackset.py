"""Batch-index ``ack_set`` words <-> an integer bit mask.

Pulsar's ``MessageIdData.ack_set`` is ``java.util.BitSet.toLongArray()``: batch index i is bit
i % 64 of word i // 64, words are signed 64-bit, trailing zero words are omitted, and **a set
bit means the message is still unacknowledged**. Python ints hold the same bits exactly and make
the broker's operations one-liners: AND-merge, cardinality, ``nextSetBit(0)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_M64 = (1 << 64) - 1


def words_to_mask(words: Iterable[int]) -> int:
    """BitSet.valueOf(long[]) as an int; negative words are two's complement."""
    mask = 0
    for i, word in enumerate(words):
        mask |= (int(word) & _M64) << (64 * i)
    return mask


def mask_to_words(mask: int) -> list[int]:
    """BitSet.toLongArray(): signed words, no trailing zero words (empty for an empty set)."""
    words: list[int] = []
    while mask:
        word = mask & _M64
        words.append(word - (1 << 64) if word >> 63 else word)
        mask >>= 64
    return words


def next_set_bit(mask: int) -> int:
    """BitSet.nextSetBit(0): lowest still-unacked index, -1 when every index is acked."""
    return (mask & -mask).bit_length() - 1 if mask else -1


def unacked_count(mask: int) -> int:
    """BitSet.cardinality(): messages of the batch still unacked."""
    return mask.bit_count()


def full_mask(batch_size: int) -> int:
    """Every index of a batch unacked (what the broker starts a batch with)."""
    return (1 << batch_size) - 1


def mask_from_acked(batch_size: int, acked: Sequence[int]) -> int:
    """The ack_set a client sends after acking the given indexes of a batch."""
    mask = full_mask(batch_size)
    for index in acked:
        mask &= ~(1 << index)
    return mask
