"""Numbers on the wire and correct rounding."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest

from accumcheck_adapter.errors import ProtocolError
from accumcheck_adapter.exact import (
    encode_number,
    is_float32,
    parse_float,
    parse_number,
    parse_rational,
    rational_parts,
    round_to_dtype,
)


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_rationals_parse_and_print_like_gmp():
    assert parse_rational("-1/4", "p") == Fraction(-1, 4)
    assert parse_rational(3, "p") == 3
    assert parse_rational("1.25", "p") == Fraction(5, 4)
    assert str(Fraction(-6, 8)) == "-3/4" and str(Fraction(3)) == "3"
    for bad in ("1/0", "x", 1.5, True, None):
        with pytest.raises(ValueError, match="p"):
            parse_rational(bad, "p")


def test_non_finite_numbers_are_strings():
    assert [encode_number(x) for x in (math.inf, -math.inf, 1.5, Fraction(1, 3))] == ["inf", "-inf", 1.5, "1/3"]
    assert encode_number(math.nan) == "nan" and math.isnan(parse_number("nan", "p"))
    assert parse_number("-inf", "p") == -math.inf and parse_number("2/3", "p") == Fraction(2, 3)


@pytest.mark.parametrize("n", [3, 5, 7, 9, 10, 11, 13, 100, 1000, 12345, 2**24 + 1])
def test_rounding_to_fp32_is_correct(n):
    q = Fraction(1, n)
    r = round_to_dtype(q, "fp32")
    assert is_float32(r)
    bits = struct.unpack("<I", struct.pack("<f", r))[0]
    for nb in (bits - 1, bits + 1):
        neighbour = struct.unpack("<f", struct.pack("<I", nb))[0]
        assert abs(Fraction(neighbour) - q) >= abs(Fraction(r) - q)
    assert round_to_dtype(-q, "fp32") == -r
    assert round_to_dtype(q, "fp64") == 1 / n


def test_rounding_once_differs_from_rounding_through_a_double():
    # Just above the midpoint between 1 and the next float32: a double rounds it to the midpoint itself,
    # and that then rounds to even (1.0); rounded once it goes up.
    q = Fraction(1) + Fraction(1, 2**24) + Fraction(1, 2**80)
    assert f32(float(q)) == 1.0
    assert round_to_dtype(q, "fp32") == 1.0 + 2.0**-23


def test_rational_parts_reads_only_what_the_cpp_side_writes():
    assert [rational_parts(t) for t in ("3", "-1/4", "0", "6/8", "007/2")] == [(3, 1), (-1, 4), (0, 1), (6, 8),
                                                                                (7, 2)]
    for other in ("", "-", "+1", " 1", "1 ", "1/", "/2", "1/-2", "1/+2", "1/ 2", "1_0", "1/0", "1.5", "1e3", "\u0661",
                  "²", "1/2/3", "9" * 5000):
        assert rational_parts(other) is None, other


@pytest.mark.parametrize("text", ["+1", " 1", "1 ", " -3/4 ", "1_0", "1.25", "1e3", "\u0661/\u0662", "6/8", "-0"])
def test_parse_rational_still_reads_what_fraction_reads(text):
    assert parse_rational(text, "p") == Fraction(text)


def test_a_json_integer_beyond_the_doubles_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="p: .* beyond the range of a double"):
        parse_float(10**400, "p")

