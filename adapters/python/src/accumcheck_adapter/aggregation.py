"""Loss aggregation as per-sequence coefficients (models/loss_aggregation.h; catalogue section 4).

Every mode is J = sum_i c_i sum_t M_it l_it, with c_i depending on the sequence's valid-token count T_i and on
counts over a normalisation scope:
  token-mean               c_i = 1 / N_tokens
  seq-mean-token-sum       c_i = 1 / N_seqs        (0 for an empty sequence)
  seq-mean-token-mean      c_i = 1 / (N_seqs T_i)  (0 for an empty sequence)
  seq-mean-token-sum-norm  c_i = 1 / C
  sum                      c_i = 1
The correct scope is the whole window on every rank. A scope without a valid token gives c_i = 0 (objective
0, zero gradients), never 0/0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from accumcheck_adapter.scenario import Aggregation, Sequence, Window


@dataclass(frozen=True)
class Counts:
    """Counts over a normalisation scope."""

    valid_tokens: int = 0
    nonempty_sequences: int = 0


def count_scope(sequences: Iterable[Sequence]) -> Counts:
    valid = [seq.valid_token_count for seq in sequences]
    return Counts(sum(valid), sum(1 for v in valid if v > 0))


def sequence_coefficient(aggregation: Aggregation, valid_tokens: int, scope: Counts) -> Fraction:
    """c_i, exactly, for a sequence with `valid_tokens` valid tokens in a scope with counts `scope`."""
    mode = aggregation.mode
    if mode == "token-mean":
        return Fraction(0) if scope.valid_tokens == 0 else Fraction(1, scope.valid_tokens)
    if mode == "seq-mean-token-sum":
        return Fraction(0) if valid_tokens == 0 else Fraction(1, scope.nonempty_sequences)
    if mode == "seq-mean-token-mean":
        return Fraction(0) if valid_tokens == 0 else Fraction(1, scope.nonempty_sequences * valid_tokens)
    if mode == "seq-mean-token-sum-norm":
        if aggregation.norm_constant <= 0:
            raise ValueError(f"aggregation.norm_constant: C = {aggregation.norm_constant} must be positive")
        return 1 / aggregation.norm_constant
    if mode == "sum":
        return Fraction(1)
    raise ValueError(f"aggregation.mode: unknown mode {mode!r}")


def window_coefficients(aggregation: Aggregation, window: Window) -> list[list[list[Fraction]]]:
    """c_i of every sequence of a window, `[k][r][i]` as the window, with window-global counts (every
    micro-batch on every rank): what a correct micro-batched loop weighs each sequence's token losses by."""
    scope = count_scope(seq for ranks in window for seqs in ranks for seq in seqs)
    return [[[sequence_coefficient(aggregation, seq.valid_token_count, scope) for seq in seqs]
             for seqs in ranks] for ranks in window]
