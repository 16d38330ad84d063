"""Kubernetes resource.Quantity text as kube-apiserver stores and returns it.
Owns: `stored(value, milli=)`: the text a real server answers with for a quantity a client
sent (JSON decode, the core/v1 defaulting that rounds every ResourceList value up to milli
precision when `milli`, the protobuf round trip through etcd, JSON encode), and
QuantityError with the decoder's words. A port of k8s.io/apimachinery v0.36
pkg/api/resource (ParseQuantity, RoundUp, CanonicalizeBytes), quirks included: "3000" is
"3k", "16384Mi" is "16Gi", "0.5Gi" is "512Mi", "1.5" is "1500m", but a string already in a
canonical shape is kept as sent ("+5", "01", "1e3", "1.G"), "1000E" comes back as "1" (no SI
suffix for 10^21), binary values past 2^63-1 are capped, and values finer than a nano are
rounded up.
Does not: know which fields hold quantities (objects.py does).
Tests: tests/integration/kubeapi/test_quantities_are_stored_canonically.py (against the
examples a Go program printed with the real library: quantity_examples.json there)"""

from __future__ import annotations

import functools
from typing import Any

FORMAT_WRONG = ("quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
NUMERIC = "unable to parse numeric part of quantity"
SUFFIX = "unable to parse quantity's suffix"

DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX = {e: s for s, e in _DECIMAL.items()}
_BINARY_SUFFIX = {e: s for s, e in _BINARY.items()}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_MAX_INT64 = 2**63 - 1
_MIN_INT64 = -(2**63)
# strings.TrimSpace: Unicode White_Space
_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008" \
         "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


class QuantityError(ValueError):
    """A value the real server's JSON decoder refuses; str() is its message."""


def stored(value: Any, *, milli: bool = False) -> str:
    """The text kube-apiserver returns for `value` (a JSON string, number or null) sent as a
    Quantity; `milli` for core/v1 ResourceLists (pod resources, node capacity), which the
    server rounds up to milli precision. Raises QuantityError as its decoder does."""
    if isinstance(value, str):
        return _stored(value, milli)
    if value is None:  # null decodes to the zero Quantity
        return "0"
    if isinstance(value, int) and not isinstance(value, bool):
        return _stored(str(value), milli)
    if isinstance(value, float):
        return _stored(repr(value), milli)
    raise QuantityError(FORMAT_WRONG)  # true, [...], {...}: not a number at all


@functools.lru_cache(maxsize=4096)
def _stored(text: str, milli: bool) -> str:
    mantissa, exp, fmt, cached = parse(text.strip(_SPACE))
    if milli and exp < -3:  # Quantity.RoundUp(-3): away from zero; the kept text is dropped
        mantissa, exp, cached = _round_up(mantissa, exp, -3), -3, None
    return cached if cached is not None else canonical(mantissa, exp, fmt)


def parse(text: str) -> tuple[int, int, str, str | None]:
    """ParseQuantity: (mantissa, exponent, format, text kept as sent or None); the value is
    mantissa * 10**exponent."""
    if not text:
        raise QuantityError(FORMAT_WRONG)
    if text == "0":
        return 0, 0, DECIMAL_SI, "0"
    positive, value, num, denom, suffix = _split(text)
    base, exponent, fmt = _interpret(suffix)
    if fmt == BINARY_SI:
        if exponent >= 0 and not denom:
            mantissa = 1 << exponent
            precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        else:
            mantissa, precision = 1, -1
        scale = 0
    else:
        mantissa, scale = 1, exponent
        precision = 18 - (len(num) + len(denom))
    if precision >= 0:  # the int64 fast path
        scale -= len(denom)
        if scale >= -9:
            shifted = num + denom
            digits = int(shifted)
            result = digits * mantissa
            if result <= _MAX_INT64:
                if not positive:
                    result = -result
                keep = None
                if fmt == BINARY_SI:
                    if exponent % 10 == 0 and digits & 7:
                        keep = text
                elif scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0":
                    keep = text
                return result, scale, fmt, keep
    amount, amount_exp = _decimal(value)
    if base == 10:
        amount_exp += exponent
    else:
        amount <<= exponent
    negative = amount < 0
    amount = abs(amount)
    if amount and amount_exp < -9:  # rounded up to a nano: asking for a little gets a little
        amount, amount_exp = _round_up(amount, amount_exp, -9), -9
    if fmt == BINARY_SI:
        if _compare(amount, amount_exp, _MAX_INT64) > 0:
            amount, amount_exp = _MAX_INT64, 0
        if amount and _compare(amount, amount_exp, 1) < 0:
            fmt = DECIMAL_SI
    return (-amount if negative else amount), amount_exp, fmt, None


def canonical(mantissa: int, exp: int, fmt: str) -> str:
    """Quantity.CanonicalizeBytes of mantissa * 10**exp in `fmt`."""
    if mantissa == 0:
        return "0"
    if fmt == BINARY_SI:
        if _compare(abs(mantissa), exp, 1024) < 0:
            fmt = DECIMAL_SI
        else:
            whole = _round_up(mantissa, exp, 0)
            if _compare(abs(whole), 0, abs(mantissa), exp) != 0:
                fmt = DECIMAL_SI  # not a whole number: do not lose the fraction
            else:
                times = 0
                while whole % 1024 == 0:
                    whole //= 1024
                    times += 1
                return f"{whole}{_BINARY_SUFFIX.get(times * 10, '')}"
    while mantissa % 10 == 0:
        mantissa //= 10
        exp += 1
    while exp % 3:
        mantissa *= 10
        exp -= 1
    if fmt == DECIMAL_SI:
        return f"{mantissa}{_DECIMAL_SUFFIX.get(exp, '')}"  # no SI suffix: none at all (Go)
    return f"{mantissa}e{exp}" if exp else str(mantissa)


def value_of(text: Any) -> tuple[int, int]:
    """(mantissa, exponent) of a quantity, without trailing zeros, for comparing values."""
    return _value_of(text) if isinstance(text, str) else _value(stored(text))


@functools.lru_cache(maxsize=4096)
def _value_of(text: str) -> tuple[int, int]:
    return _value(stored(text))


def _value(text: str) -> tuple[int, int]:
    mantissa, exp, _, _ = parse(text)
    while mantissa and mantissa % 10 == 0:
        mantissa //= 10
        exp += 1
    return (mantissa, exp) if mantissa else (0, 0)


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, value, num, denom, suffix)."""
    positive, pos, end = True, 0, len(text)
    if text[0] == "-":
        positive, pos = False, 1
    elif text[0] == "+":
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value, suffix_start = text[:pos], pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    if text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(FORMAT_WRONG)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], DECIMAL_SI
    if suffix in _BINARY:
        return 2, _BINARY[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[:1] in ("+", "-") else digits
        if not body or not body.isascii() or not body.isdigit():
            raise QuantityError(SUFFIX)
        parsed = int(digits)
        if not _MIN_INT64 <= parsed <= _MAX_INT64:
            raise QuantityError(SUFFIX)
        return 10, (parsed + 2**31) % 2**32 - 2**31, DECIMAL_EXPONENT  # int32(parsed)
    raise QuantityError(SUFFIX)


def _decimal(value: str) -> tuple[int, int]:
    """inf.Dec.SetString: a sign, digits and at most one point, all of `value`."""
    sign, digits, point = "", "", -1
    for i, ch in enumerate(value):
        if ch in "+-" and i == 0:
            sign = ch
        elif ch == "." and point < 0:
            point = len(digits)
        elif ch in _DIGITS:
            digits += ch
        else:
            raise QuantityError(NUMERIC)
    if not digits:
        raise QuantityError(NUMERIC)
    return int(sign + digits), -(len(digits) - point) if point >= 0 else 0


def _round_up(mantissa: int, exp: int, to: int) -> int:
    """mantissa * 10**exp as a multiple of 10**to, rounded away from zero; the multiple."""
    if exp >= to:
        return mantissa * 10 ** (exp - to)
    step = 10 ** (to - exp)
    whole, rest = divmod(abs(mantissa), step)
    whole += 1 if rest else 0
    return -whole if mantissa < 0 else whole


def _compare(m1: int, e1: int, m2: int, e2: int = 0) -> int:
    if e1 > e2:
        m1 *= 10 ** (e1 - e2)
    else:
        m2 *= 10 ** (e2 - e1)
    return (m1 > m2) - (m1 < m2)
