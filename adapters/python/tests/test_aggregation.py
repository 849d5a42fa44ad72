"""Window-global coefficients for every mode (models/loss_aggregation.h)."""

from __future__ import annotations

from fractions import Fraction as Q

import pytest
from builders import seq

from accumcheck_adapter import Counts, count_scope, sequence_coefficient, window_coefficients
from accumcheck_adapter.scenario import Aggregation


def tokens(n: int, valid: int) -> object:
    return seq([[0]] * n, [[0]] * n, [1] * valid + [0] * (n - valid))


# The catalogue's smallest trigger: two one-sequence micro-batches with 1 and 3 tokens, plus an empty one
# and a fully masked one on the second micro-batch.
WINDOW = [[[tokens(1, 1)]], [[tokens(3, 3), tokens(0, 0), tokens(2, 0)]]]


@pytest.mark.parametrize(("mode", "expected"), [
    ("token-mean", [[[Q(1, 4)]], [[Q(1, 4)] * 3]]),
    ("seq-mean-token-sum", [[[Q(1, 2)]], [[Q(1, 2), Q(0), Q(0)]]]),
    ("seq-mean-token-mean", [[[Q(1, 2)]], [[Q(1, 6), Q(0), Q(0)]]]),
    ("seq-mean-token-sum-norm", [[[Q(1, 8)]], [[Q(1, 8)] * 3]]),
    ("sum", [[[Q(1)]], [[Q(1)] * 3]]),
])
def test_coefficients_are_window_global(mode, expected):
    assert window_coefficients(Aggregation(mode, Q(8)), WINDOW) == expected


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_an_empty_scope_gives_zero_never_nan(mode):
    window = [[[tokens(0, 0), tokens(2, 0)]]]
    assert count_scope(window[0][0]) == Counts(0, 0)
    assert window_coefficients(Aggregation(mode), window) == [[[Q(0), Q(0)]]]


def test_the_constant_must_be_positive():
    with pytest.raises(ValueError, match="norm_constant"):
        sequence_coefficient(Aggregation("seq-mean-token-sum-norm", Q(0)), 1, Counts(1, 1))
