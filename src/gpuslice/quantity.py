"""Numbers people write: Kubernetes quantities ("500m", "4Gi", "1e3") and shim memory sizes ("4g").

Owns: the one parser for Kubernetes `resource.Quantity` text (exact, as a Fraction), integer
quantities, the strict memory-size grammar the C shim shares (native/src/config.c), the CLI's
memory caps (the same grammar, but a bare number is MiB, as in HAMi), and MiB text.
Does not: know what a quantity means (dialects.py decides units and ranges).
Invariants: Kubernetes grammar exactly (sign, digits, one '.', decimal SI n u m k M G T P E,
binary Ki..Ei, integer e/E exponent); values are exact (no rounding to nano as the API server
does); memory sizes are bytes, every suffix binary, 1 <= bytes <= 2**63-1; at most MAX_DIGITS
digits are ever converted (Python refuses past 4,300, and the work grows with the length).
Failure: QuantityError (a ValueError) naming the field, the value and the fix; never a bare error.
Tests: tests/unit/test_quantity.py, tests/unit/test_quantity_properties.py,
tests/unit/test_cli_run.py (CLI caps)
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from gpuslice.errors import GpusliceError, brief

__all__ = [
    "MAX_DIGITS",
    "MAX_MEMORY_MIB",
    "MAX_MEMORY_SIZE",
    "QuantityError",
    "format_mib",
    "parse_int_quantity",
    "parse_memory_size",
    "parse_mib_or_size",
    "parse_quantity",
]

MAX_MEMORY_SIZE = 2**63 - 1
"""Largest memory size in bytes (what an int64 in the C shim holds)."""
MAX_MEMORY_MIB = 1 << 20
"""Largest bare-number cap on the command line, in MiB (1 TiB): more is a unit mix-up."""
MAX_DIGITS = 1000
"""Longest digit string a quantity may have (Python refuses to read ints past 4300 digits)."""

_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_EXPONENT = 1000  # far beyond any real quantity; keeps "1e999999999" from eating memory

# <sign>? then <digits> | <digits>. | <digits>.<digits> | .<digits>, then one suffix.
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:(?P<dot>\.)(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>[KMGTPE]i)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))"
)

_MEMORY_SUFFIXES = {
    "": 0,
    **{s: 10 for s in ("k", "K", "Ki", "KiB")},
    **{s: 20 for s in ("m", "M", "Mi", "MiB")},
    **{s: 30 for s in ("g", "G", "Gi", "GiB")},
    **{s: 40 for s in ("t", "T", "Ti", "TiB")},
}
_MEMORY = re.compile(r"[ \t\n\r\f\v]*(?P<digits>[0-9]+)(?P<suffix>[A-Za-z]*)[ \t\n\r\f\v]*")
_MEMORY_HINT = {"kb": "K", "mb": "M", "gb": "G", "tb": "T", "b": ""}


class QuantityError(GpusliceError, ValueError):
    """A quantity or size that does not parse or is out of range; the message says the fix."""


def _fail(field: str, value: object, what: str, fix: str) -> QuantityError:
    return QuantityError(f"{field}={brief(value)}: {what}; {fix}")


def parse_quantity(text: str | int | float, *, field: str = "quantity") -> Fraction:
    """Read a Kubernetes quantity exactly: "500m" -> 1/2, "4Gi" -> 4294967296, "1e3" -> 1000.

    Python ints and finite floats are accepted as their decimal value (YAML `gpu: 1`).
    """
    if isinstance(text, bool):
        raise _fail(field, text, "a boolean is not a quantity", "write a number such as 1")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        if not math.isfinite(text):
            raise _fail(field, text, "not a finite number", "write a number such as 1")
        return Fraction(repr(text))
    if not isinstance(text, str):
        raise _fail(
            field, text, f"expected a quantity string, got {type(text).__name__}",
            'write a number such as "1", "500m" or "4Gi"',
        )
    return _parse_text(text, field)


@lru_cache(maxsize=4096)  # a cluster writes few distinct quantities, each pod event reads ~10
def _parse_text(text: str, field: str) -> Fraction:
    m = _QUANTITY.fullmatch(text)
    if m is None or not (m["int"] or m["frac"]):
        raise _fail(
            field, text, "not a Kubernetes quantity",
            'write digits with an optional sign, decimal point and one suffix '
            '(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>), e.g. "1", "500m", "4Gi"',
        )
    digits = (m["int"] or "") + (m["frac"] or "")
    if len(digits) > MAX_DIGITS:
        raise _fail(field, text, f"{len(digits)} digits, more than {MAX_DIGITS}",
                    'write a value of a sensible size, e.g. "4Gi"')
    value = Fraction(int(digits), 10 ** len(m["frac"] or ""))
    if m["bin"]:
        value *= 2 ** _BINARY_SI[m["bin"]]
    else:
        exp = m["exp"][1:].lstrip("+-").lstrip("0") if m["exp"] else ""
        exponent = (_MAX_EXPONENT + 1 if len(exp) > 6 else int(m["exp"][1:])) if m["exp"] \
            else _DECIMAL_SI[m["dec"]]
        if abs(exponent) > _MAX_EXPONENT:
            raise _fail(field, text, f"exponent beyond ±{_MAX_EXPONENT}",
                        "write a value of a sensible size, e.g. \"1e3\"")
        value *= Fraction(10) ** exponent
    return -value if m["sign"] == "-" else value


def parse_int_quantity(text: str | int | float, *, field: str) -> int:
    """Read a quantity that must be a whole number ("2", "1k"); "1.5" and "500m" are errors."""
    value = parse_quantity(text, field=field)
    if value.denominator != 1:
        raise _fail(
            field, text, f"must be a whole number, got {float(value):g}",
            "write an integer such as 1 or 2",
        )
    return value.numerator


def parse_memory_size(text: str, *, field: str = "size") -> int:
    """Bytes from the shim's size grammar: digits + one of k K Ki KiB m M Mi MiB g .. TiB (binary).

    "4g" == "4G" == "4Gi" == "4GiB" == 4 * 2**30; surrounding whitespace is ignored.
    """
    if not isinstance(text, str):
        raise _fail(field, text, f"expected a size string, got {type(text).__name__}",
                    'write bytes or a size such as "4Gi"')
    m = _MEMORY.fullmatch(text)
    if m is None:
        raise _fail(
            field, text, "not a memory size",
            'write plain bytes or digits with one suffix k/K/Ki/KiB, m/M/Mi/MiB, g/G/Gi/GiB, '
            't/T/Ti/TiB (all binary), e.g. "4096m" or "4Gi"; no sign, decimals or spaces inside',
        )
    suffix = m["suffix"]
    if suffix not in _MEMORY_SUFFIXES:
        hint = _MEMORY_HINT.get(suffix.lower())
        if hint is not None and suffix.lower() != "b":
            fix = f'write "{m["digits"]}{hint}iB" or "{m["digits"]}{hint}" (suffixes are binary)'
        elif hint is not None:
            fix = f'write plain bytes "{m["digits"]}" without a suffix'
        else:
            fix = "use one of k/K/Ki/KiB, m/M/Mi/MiB, g/G/Gi/GiB, t/T/Ti/TiB (all binary)"
        raise _fail(field, text, f"unknown size suffix {suffix!r}", fix)
    digits = m["digits"].lstrip("0") or "0"
    size = int(digits) << _MEMORY_SUFFIXES[suffix] if len(digits) <= 20 else MAX_MEMORY_SIZE + 1
    if size == 0:
        raise _fail(field, text, "a size of 0 bytes allows nothing",
                    'give a positive size such as "4Gi" (unset the variable for no limit)')
    if size > MAX_MEMORY_SIZE:
        raise _fail(field, text, f"larger than {MAX_MEMORY_SIZE} bytes (2**63-1)",
                    "give a smaller size")
    return size


def parse_mib_or_size(text: str, *, field: str) -> int:
    """Bytes from a command-line memory cap: a bare number is MiB (as HAMi's nvidia.com/gpumem),
    anything else the size grammar of parse_memory_size ("4GiB", "512m")."""
    digits = text.strip() if isinstance(text, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        return parse_memory_size(text, field=field)
    digits = digits.lstrip("0") or "0"
    mib = int(digits) if len(digits) <= 20 else MAX_MEMORY_MIB + 1
    if mib == 0:
        raise _fail(field, text, "a cap of 0 MiB allows nothing", 'give a size such as "4GiB"')
    if mib > MAX_MEMORY_MIB:
        guess = f'; "{mib >> 20}" if you meant MiB' if mib % (1 << 20) == 0 else ""
        raise _fail(field, text, "a bare number is MiB, and this is more than 1 TiB per GPU "
                    "(bytes, perhaps?)", f'write a size with its unit, e.g. "4GiB"{guess}')
    return mib << 20


def format_mib(mib: int) -> str:
    """MiB as people read it: "20000 MiB", or exact GiB when it divides: "80 GiB"."""
    if mib != 0 and mib % 1024 == 0:
        return f"{mib // 1024} GiB"
    return f"{mib} MiB"
