"""Kubernetes quantities, integer quantities, shim memory sizes and MiB text (quantity.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuslice.errors import GpusliceError
from gpuslice.quantity import (
    QuantityError,
    format_mib,
    parse_int_quantity,
    parse_memory_size,
    parse_quantity,
)

GiB = 2**30

QUANTITIES = {
    "a plain integer is itself": ("1", Fraction(1)),
    "a Python int from YAML is itself": (3, Fraction(3)),
    "a Python float is its decimal value, not its binary one": (0.1, Fraction(1, 10)),
    "milli divides by a thousand": ("500m", Fraction(1, 2)),
    "nano is ten to the minus nine": ("3n", Fraction(3, 10**9)),
    "micro is ten to the minus six": ("7u", Fraction(7, 10**6)),
    "kilo is lower-case k": ("2k", Fraction(2000)),
    "mega, giga, tera, peta, exa are decimal": ("1E", Fraction(10**18)),
    "Gi is binary": ("4Gi", Fraction(4 * GiB)),
    "Ei is two to the sixty": ("1Ei", Fraction(2**60)),
    "a decimal fraction is exact": ("1.5", Fraction(3, 2)),
    "a fraction with a binary suffix is exact": ("0.5Gi", Fraction(GiB // 2)),
    "a leading dot is allowed": (".5", Fraction(1, 2)),
    "a trailing dot is allowed (Kubernetes accepts 1.G)": ("1.G", Fraction(10**9)),
    "a leading plus sign is allowed": ("+2", Fraction(2)),
    "a minus sign negates": ("-1.5k", Fraction(-1500)),
    "an exponent multiplies by a power of ten": ("1e3", Fraction(1000)),
    "a capital E with digits is an exponent, not exa": ("12E2", Fraction(1200)),
    "a negative exponent divides": ("5e-1", Fraction(1, 2)),
    "an exponent may carry a plus sign": ("2e+2", Fraction(200)),
    "leading zeros are ignored": ("007", Fraction(7)),
}


@pytest.mark.parametrize("text, expected", QUANTITIES.values(), ids=QUANTITIES.keys())
def test_parse_quantity_reads_kubernetes_quantities_exactly(text, expected):
    assert parse_quantity(text) == expected, "Kubernetes' quantity grammar and exact value"


BAD_QUANTITIES = {
    "an empty string": "",
    "a lone dot": ".",
    "a lone sign": "-",
    "two signs": "+-1",
    "an unknown suffix K (kilo is lower-case)": "1K",
    "a decimal-style suffix with bytes": "1GB",
    "lower-case binary suffix": "1gi",
    "a space inside": "1 Gi",
    "surrounding spaces": " 1",
    "an exponent without digits": "1e",
    "an exponent with a decimal point": "1e1.5",
    "two suffixes": "1Kim",
    "two dots": "1.2.3",
    "unicode digits": "\u0661",
    "an absurd exponent": "1e999999",
}


@pytest.mark.parametrize("text", BAD_QUANTITIES.values(), ids=BAD_QUANTITIES.keys())
def test_parse_quantity_rejects_what_kubernetes_rejects(text):
    with pytest.raises(QuantityError) as err:
        parse_quantity(text, field="nvidia.com/gpu")
    message = str(err.value)
    assert message.startswith(f"nvidia.com/gpu={text!r}: "), "the message names field and value"
    assert "e.g." in message, "the message shows a valid example as the fix"


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_parse_quantity_rejects_values_that_are_not_numbers(value):
    with pytest.raises(QuantityError, match="limit"):
        parse_quantity(value, field="limit")


def test_quantity_error_is_a_value_error_and_a_gpuslice_error():
    with pytest.raises(ValueError):
        parse_quantity("x")
    assert issubclass(QuantityError, GpusliceError), "callers may catch the project's base error"


@pytest.mark.parametrize("text, expected", [("2", 2), (4, 4), ("1k", 1000), ("2000m", 2),
                                            ("1e2", 100), ("-3", -3), ("1Ki", 1024)])
def test_parse_int_quantity_accepts_whole_numbers_in_any_spelling(text, expected):
    assert parse_int_quantity(text, field="n") == expected


@pytest.mark.parametrize("text", ["1.5", "500m", "1e-1", 0.5])
def test_parse_int_quantity_rejects_fractions_and_says_so(text):
    with pytest.raises(QuantityError, match=r"^count=.*: must be a whole number, got .*; write"):
        parse_int_quantity(text, field="count")


SIZES = {
    "plain bytes": ("4096", 4096),
    "k is KiB": ("4k", 4 * 1024),
    "K is KiB": ("4K", 4 * 1024),
    "Ki is KiB": ("4Ki", 4 * 1024),
    "KiB is KiB": ("4KiB", 4 * 1024),
    "m is MiB, not milli": ("4m", 4 * 2**20),
    "MiB": ("4MiB", 4 * 2**20),
    "g is GiB (HAMi-core compatible)": ("4g", 4 * GiB),
    "G is GiB": ("4G", 4 * GiB),
    "Gi is GiB": ("4Gi", 4 * GiB),
    "GiB is GiB": ("4GiB", 4 * GiB),
    "t is TiB": ("2t", 2 * 2**40),
    "TiB": ("2TiB", 2 * 2**40),
    "surrounding whitespace is ignored": (" \t4Gi\n", 4 * GiB),
    "leading zeros are ignored": ("0010", 10),
    "the largest int64 is allowed": (str(2**63 - 1), 2**63 - 1),
}


@pytest.mark.parametrize("text, expected", SIZES.values(), ids=SIZES.keys())
def test_parse_memory_size_reads_the_shim_grammar_all_binary(text, expected):
    assert parse_memory_size(text) == expected, "every suffix is a power of 1024"


BAD_SIZES = {
    "GB (decimal-looking) suggests GiB or G": ("4GB", 'write "4GiB" or "4G"'),
    "mb suggests MiB or M": ("4mb", 'write "4MiB" or "4M"'),
    "a B alone suggests plain bytes": ("4B", 'write plain bytes "4"'),
    "an unknown suffix lists the valid ones": ("4x", "use one of k/K/Ki/KiB"),
    "lower-case gi is not in the grammar": ("4gi", "use one of"),
    "zero allows nothing": ("0", "a size of 0 bytes allows nothing"),
    "zero with a suffix allows nothing": ("0Gi", "a size of 0 bytes"),
    "a sign is refused": ("-4Gi", "no sign"),
    "a plus sign is refused": ("+4Gi", "no sign"),
    "decimals are refused": ("1.5Gi", "decimals"),
    "an empty string is refused": ("", "not a memory size"),
    "only whitespace is refused": ("  ", "not a memory size"),
    "a space between number and suffix is refused": ("4 Gi", "not a memory size"),
    "a suffix without digits is refused": ("Gi", "not a memory size"),
    "unicode digits are refused": ("\u0664Gi", "not a memory size"),
    "more than int64 is refused": (str(2**63), "larger than"),
    "more than int64 after the suffix is refused": ("8589934592Gi", "larger than"),
}


@pytest.mark.parametrize("text, fix", BAD_SIZES.values(), ids=BAD_SIZES.keys())
def test_parse_memory_size_refuses_anything_else_with_the_fix(text, fix):
    with pytest.raises(QuantityError) as err:
        parse_memory_size(text, field="CUDA_DEVICE_MEMORY_LIMIT")
    message = str(err.value)
    assert message.startswith(f"CUDA_DEVICE_MEMORY_LIMIT={text!r}: "), "names field and value"
    assert fix in message, f"the message should say how to fix it: {message}"


def test_parse_memory_size_refuses_non_strings():
    with pytest.raises(QuantityError, match="expected a size string, got int"):
        parse_memory_size(4096)  # type: ignore[arg-type]


@pytest.mark.parametrize("mib, text", [(20000, "20000 MiB"), (80 * 1024, "80 GiB"),
                                       (1024, "1 GiB"), (1536, "1536 MiB"), (0, "0 MiB")])
def test_format_mib_shows_exact_gib_only_when_it_divides(mib, text):
    assert format_mib(mib) == text
