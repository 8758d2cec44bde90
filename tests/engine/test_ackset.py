from __future__ import annotations

from engine.ackset import (
    full_mask,
    mask_from_acked,
    mask_to_words,
    next_set_bit,
    unacked_count,
    words_to_mask,
)


def test_worked_examples_of_spec_1_3():
    # batch of 10: ack only index 3 -> [1015]; cumulative up to 3 -> [1008]; nothing acked -> [1023]
    assert mask_to_words(mask_from_acked(10, [3])) == [1015]
    assert mask_to_words(mask_from_acked(10, [0, 1, 2, 3])) == [1008]
    assert mask_to_words(full_mask(10)) == [1023]


def test_words_are_signed_and_trailing_zero_words_are_dropped():
    mask = full_mask(64)
    assert mask_to_words(mask) == [-1]
    assert words_to_mask([-1]) == mask
    assert mask_to_words(1 << 64) == [0, 1]
    assert words_to_mask([5, 0, 0]) == 5
    assert mask_to_words(0) == []


def test_cardinality_and_next_set_bit():
    assert unacked_count(words_to_mask([249])) == 6
    assert next_set_bit(words_to_mask([65472])) == 6
    assert next_set_bit(0) == -1
