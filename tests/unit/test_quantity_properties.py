"""Properties of quantity.py: agreement with a reference reading of Kubernetes quantities,
and memory sizes that round-trip `f"{n}{suffix}"`."""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

from hypothesis import given
from hypothesis import strategies as st

from gpuslice.quantity import QuantityError, parse_memory_size, parse_quantity

_DEC = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def reference_quantity(text: str) -> Fraction | None:
    """A character scan in the manner of apimachinery's parseQuantityString + interpret.

    Written independently of quantity.py (no regex). Two documented differences from the
    Go code: a number needs at least one digit ("." is refused, as the OpenAPI pattern does)
    and the value is exact (no rounding up to nano, no cap at 2**63-1). None means "rejected".
    """
    pos, end = 0, len(text)
    negative = pos < end and text[pos] == "-"
    if pos < end and text[pos] in "+-":
        pos += 1
    start = pos
    while pos < end and text[pos] in "0123456789":
        pos += 1
    whole = text[start:pos]
    frac = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in "0123456789":
            pos += 1
        frac = text[start:pos]
    if not whole and not frac:
        return None
    suffix = text[pos:]
    with localcontext() as ctx:
        ctx.prec = 200
        number = Decimal(f"{whole or 0}.{frac or 0}")
    value = Fraction(number)
    if suffix in _DEC:
        value *= Fraction(10) ** _DEC[suffix]
    elif suffix in _BIN:
        value *= 2 ** _BIN[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE":
        exp = suffix[1:]
        body = exp[1:] if exp[0] in "+-" else exp
        if not body or any(c not in "0123456789" for c in body) or abs(int(exp)) > 1000:
            return None
        value *= Fraction(10) ** int(exp)
    else:
        return None
    return -value if negative else value


def ours(text: str) -> Fraction | None:
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


digits = st.text("0123456789", max_size=6)
well_formed = st.builds(
    lambda sign, whole, dot, frac, suffix: f"{sign}{whole}{dot}{frac}{suffix}",
    st.sampled_from(["", "+", "-"]), digits, st.sampled_from(["", "."]), digits,
    st.one_of(st.sampled_from([*_DEC, *_BIN]),
              st.builds(lambda e, s, n: f"{e}{s}{n}", st.sampled_from("eE"),
                        st.sampled_from(["", "+", "-"]), st.integers(0, 40))),
)
near_misses = st.text("0123456789.+-eEinumkKMGTPB ", max_size=8)


@given(st.one_of(well_formed, near_misses))
def test_parse_quantity_agrees_with_a_reference_reading_of_kubernetes(text):
    assert ours(text) == reference_quantity(text), "same accept/reject and same exact value"


@given(st.integers(1, 2**40), st.sampled_from(
    [("", 0), ("k", 10), ("K", 10), ("Ki", 10), ("KiB", 10), ("m", 20), ("M", 20), ("Mi", 20),
     ("MiB", 20), ("g", 30), ("G", 30), ("Gi", 30), ("GiB", 30), ("t", 40), ("T", 40),
     ("Ti", 40), ("TiB", 40)]))
def test_parse_memory_size_round_trips_number_and_suffix(n, suffix_shift):
    suffix, shift = suffix_shift
    size = n << shift
    if size <= 2**63 - 1:
        assert parse_memory_size(f"{n}{suffix}") == size, "suffixes are binary multipliers"
    else:
        try:
            parse_memory_size(f"{n}{suffix}")
        except QuantityError as err:
            assert "larger than" in str(err)
        else:
            raise AssertionError("sizes over int64 must be refused, the C side cannot hold them")


@given(st.text(max_size=12))
def test_parse_memory_size_raises_only_quantity_errors(text):
    try:
        size = parse_memory_size(text)
    except QuantityError:
        return
    assert 0 < size <= 2**63 - 1, "a parsed size is a positive int64"
