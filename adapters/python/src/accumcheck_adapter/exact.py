"""Numbers on the wire: rationals as strings "n" or "n/d", floats that parse back exactly, and correct
rounding of an exact rational into the run's float type."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

from accumcheck_adapter.errors import ProtocolError

Number = float | Fraction
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def rational_parts(text: str) -> tuple[int, int] | None:
    """(n, d) with d > 0, not necessarily in lowest terms, of a rational as the C++ side writes one: "n", "-n"
    or "n/d" in ASCII digits. None for any other text, which parse_rational hands to Fraction (str.partition
    and int() are several times faster than Fraction's regular expression, on every request's rationals)."""
    num, slash, den = text.partition("/")
    digits = num[1:] if num[:1] == "-" else num
    if not (digits.isascii() and digits.isdigit()) or (slash and not (den.isascii() and den.isdigit())):
        return None
    try:
        n, d = int(num), int(den) if slash else 1
    except ValueError:  # more digits than int() converts (sys.set_int_max_str_digits)
        return None
    return (n, d) if d else None


def parse_rational(value: object, path: str) -> Fraction:
    """A rational of the scenario: a string "n", "n/d" or a decimal, or a JSON integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        return Fraction(value)
    if not isinstance(value, str):
        raise ProtocolError(path, f'expected a rational as a string ("n" or "n/d"), got {value!r}')
    parts = rational_parts(value)
    if parts is not None:
        return Fraction(*parts)
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise ProtocolError(path, f"cannot parse {value!r} as a rational (expected n, n/d or a decimal)") from None


def format_rational(value: Fraction) -> str:
    """ "n" for an integer, else "n/d" in lowest terms (what GMP's mpq_get_str writes)."""
    return str(value)


def parse_float(value: object, path: str) -> float:
    """A JSON number, or one of the strings "inf", "-inf", "nan"."""
    if isinstance(value, bool):
        raise ProtocolError(path, f"expected a number, got {value!r}")
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # a JSON integer beyond the doubles
            raise ProtocolError(path, f"{value} is beyond the range of a double") from None
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    raise ProtocolError(path, f"expected a number, got {value!r}")


def parse_number(value: object, path: str) -> Number:
    """A number of a result: a JSON number or non-finite string (float), or a rational string (Fraction)."""
    if isinstance(value, str) and value not in _NON_FINITE:
        return parse_rational(value, path)
    return parse_float(value, path)


def encode_number(value: Number) -> float | str:
    """A float as itself (json writes the shortest text that parses back to it), a non-finite float as
    "inf"/"-inf"/"nan", a Fraction as "n/d"."""
    if isinstance(value, Fraction):
        return format_rational(value)
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def _float32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _float32_of_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def is_float32(x: float) -> bool:
    """True when x is exactly a float32 value (finite)."""
    try:
        return math.isfinite(x) and struct.unpack("<f", struct.pack("<f", x))[0] == x
    except OverflowError:
        return False


def round_to_dtype(value: Fraction, dtype: str) -> float:
    """The float nearest to value in "fp64" or "fp32" (ties to even), as a Python float; rounded once, as the
    C++ side's from_rational does (going through a double first could round twice for fp32)."""
    if dtype == "fp64":
        return float(value)  # int / int true division: correctly rounded
    if dtype != "fp32":
        raise ValueError(f"dtype: expected 'fp32' or 'fp64', got {dtype!r}")
    magnitude = abs(value)
    try:
        candidate = struct.unpack("<f", struct.pack("<f", float(magnitude)))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
    bits = _float32_bits(candidate)
    best, best_error = candidate, abs(Fraction(candidate) - magnitude) if math.isfinite(candidate) else None
    for neighbour in (bits - 1, bits + 1):
        if neighbour < 0 or neighbour >= 0x7F800000:
            continue
        f = _float32_of_bits(neighbour)
        error = abs(Fraction(f) - magnitude)
        if best_error is None or error < best_error or (error == best_error and neighbour % 2 == 0):
            best, best_error = f, error
    return math.copysign(best, value) if value != 0 else 0.0
