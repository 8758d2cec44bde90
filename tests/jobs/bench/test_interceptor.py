"""``bench --interceptor``'s design: rounds in rotated order, the loss paired within a round."""

from __future__ import annotations

import pytest

from jobs.bench.interceptor import LABELS, paired_loss, round_order


def test_every_broker_takes_every_place_in_the_round_order() -> None:
    rounds = [round_order(i) for i in range(len(LABELS))]
    assert all(sorted(r) == sorted(LABELS) for r in rounds)
    for place in range(len(LABELS)):
        assert {r[place] for r in rounds} == set(LABELS)
    assert round_order(len(LABELS)) == round_order(0)


def test_the_loss_is_the_median_of_each_rounds_ratio_not_a_ratio_of_medians() -> None:
    # the machine speeds up run by run: without and with are equal within every round
    without = [50.0, 60.0, 70.0, 80.0, 90.0]
    with_ = [50.0, 60.0, 70.0, 80.0, 90.0]
    assert paired_loss(with_, without) == (0.0, [0.0] * 5)
    # one slow round does not move the median
    loss, losses = paired_loss([45.0, 60.0, 40.0, 80.0, 90.0], without)
    assert losses[0] == pytest.approx(10.0)
    assert loss == 0.0
