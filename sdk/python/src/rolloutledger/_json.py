"""JSON as the ledger reads and writes it.

Reading: request bodies are parsed the way the server's decoder sees them.
Objects keep their earlier duplicate keys (a map's earlier values are still
type-checked by the server), integer literals stay distinct from other
numbers, non-integer literals keep their text (so a float32 is rounded from
the decimal, not from a float64). A "\\ud800"-style escape of a lone
surrogate stays in a string value, for the strict decoder to refuse as the
server does at ingest; in an object's key it becomes U+FFFD, as in the
server's unknown_field errors, and the object notes it (``lone``). Nesting
of any depth is accepted, as the server accepts it.

Writing: the canonical form the server stores (events/envelope.go): no
insignificant space, no HTML escaping, U+2028 and U+2029 escaped, numbers in
the shortest form that reads back to the same float64 or float32, with an
exponent only below 1e-6 or from 1e21 on.
"""

from __future__ import annotations

import decimal
import json
import json.decoder
import math
import re
import struct

import numpy as np

__all__ = [
    "JSONSyntaxError",
    "JObject",
    "FloatLiteral",
    "BigIntLiteral",
    "NEG_ZERO",
    "parse_value",
    "fix_surrogates",
    "lone_surrogate",
    "encode_string",
    "format_float",
    "float32_from",
    "Float32Overflow",
]


class JSONSyntaxError(ValueError):
    """The text is not JSON."""


class JObject(dict):
    """A JSON object. ``dups`` lists (key, value) pairs that a later pair with
    the same key replaced, in document order; ``lone`` is the first lone
    surrogate a key held before it became U+FFFD ("" when none did)."""

    __slots__ = ("dups", "lone")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.dups = []
        self.lone = ""


class FloatLiteral(float):
    """A JSON number written with a fraction or an exponent. ``text`` is the
    literal; the float value is its correctly rounded float64 (inf when out of
    range)."""

    __slots__ = ("text",)

    def __new__(cls, text: str):
        self = super().__new__(cls, text)
        self.text = text
        return self


class BigIntLiteral:
    """An integer literal too long for any int64: kept as text."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"BigIntLiteral({self.text!r})"


class _NegZero(int):
    """The integer literal ``-0``: 0 as an integer, -0.0 as a float."""

    def __repr__(self) -> str:
        return "NEG_ZERO"


NEG_ZERO = _NegZero(0)


def _parse_int(text: str):
    digits = len(text) - (text[0] == "-")
    if digits > 20:
        return BigIntLiteral(text)
    if text == "-0":
        return NEG_ZERO
    return int(text)


def _reject_constant(name: str):
    raise JSONSyntaxError(f"{name} is not JSON")


_SURROGATE = re.compile("[\ud800-\udfff]")


def fix_surrogates(s: str) -> str:
    """Replaces lone surrogates (from \\uD800-style escapes) with U+FFFD, as
    the server's decoder does."""
    if _SURROGATE.search(s) is None:
        return s
    return _SURROGATE.sub("\ufffd", s)


def lone_surrogate(v) -> str:
    """The first lone surrogate in the strings of v (a parsed JSON value or
    a builder's value: keys, values, and the earlier values of a repeated
    key), or "". After parsing, a surrogate can only come from a \\u
    escape that is half of a pair: a pair becomes one character, and
    invalid UTF-8 is refused before."""
    if isinstance(v, str):
        m = _SURROGATE.search(v)
        return m.group() if m is not None else ""
    if isinstance(v, dict):
        found = getattr(v, "lone", "")
        if found:
            return found
        for k, x in v.items():
            found = lone_surrogate(k) or lone_surrogate(x)
            if found:
                return found
        for k, x in getattr(v, "dups", ()):
            found = lone_surrogate(k) or lone_surrogate(x)
            if found:
                return found
        return ""
    if isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, (str, dict, list, tuple)):
                found = lone_surrogate(x)
                if found:
                    return found
    return ""


def _object_pairs(pairs):
    obj = JObject()
    for k, v in pairs:
        if not obj.lone:
            m = _SURROGATE.search(k)
            if m is not None:
                obj.lone = m.group()
        k = fix_surrogates(k)
        if k in obj:
            obj.dups.append((k, obj[k]))
        obj[k] = v
    return obj


_decoder = json.JSONDecoder(
    object_pairs_hook=_object_pairs,
    parse_float=FloatLiteral,
    parse_int=_parse_int,
    parse_constant=_reject_constant,
    strict=True,
)
_scan_once = _decoder.scan_once

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def skip_ws(s: str, i: int) -> int:
    return _WS.match(s, i).end()


def parse_value(s: str, i: int) -> tuple[object, int]:
    """Parses one JSON value of ``s`` starting exactly at ``i``; returns it
    and the index just after it. Raises :class:`JSONSyntaxError`."""
    try:
        return _scan_once(s, i)
    except StopIteration:
        raise JSONSyntaxError(f"expected a value at character {i}") from None
    except json.JSONDecodeError as e:
        raise JSONSyntaxError(str(e)) from None
    except RecursionError:
        return _parse_deep(s, i)


def _parse_deep(s: str, i: int) -> tuple[object, int]:
    """parse_value without recursion, for nesting deeper than the C scanner
    goes."""
    n = len(s)
    stack: list = []  # frames: [container, pending key or None]

    def fail(msg: str):
        raise JSONSyntaxError(f"{msg} at character {i}")

    while True:
        # Parse one value starting at i.
        if i >= n:
            fail("unexpected end of input")
        c = s[i]
        value = None
        opened = False
        if c == "{":
            j = skip_ws(s, i + 1)
            if j < n and s[j] == "}":
                value, i = _object_pairs([]), j + 1
            else:
                if j >= n or s[j] != '"':
                    fail("expected a key")
                try:
                    key, j = json.decoder.scanstring(s, j + 1, True)
                except json.JSONDecodeError as e:
                    raise JSONSyntaxError(str(e)) from None
                j = skip_ws(s, j)
                if j >= n or s[j] != ":":
                    fail("expected ':'")
                stack.append([[], key, "{"])
                i = skip_ws(s, j + 1)
                opened = True
        elif c == "[":
            j = skip_ws(s, i + 1)
            if j < n and s[j] == "]":
                value, i = [], j + 1
            else:
                stack.append([[], None, "["])
                i = j
                opened = True
        elif c == '"':
            try:
                value, i = json.decoder.scanstring(s, i + 1, True)
            except json.JSONDecodeError as e:
                raise JSONSyntaxError(str(e)) from None
        elif s.startswith("true", i):
            value, i = True, i + 4
        elif s.startswith("false", i):
            value, i = False, i + 5
        elif s.startswith("null", i):
            value, i = None, i + 4
        else:
            m = _NUMBER.match(s, i)
            if m is None:
                fail("expected a value")
            if m.group(2) or m.group(3):
                value = FloatLiteral(m.group(0))
            else:
                value = _parse_int(m.group(0))
            i = m.end()
        if opened:
            continue
        # Attach the value to its container, closing containers as they end.
        while True:
            if not stack:
                return value, i
            frame = stack[-1]
            items, key, kind = frame
            if kind == "{":
                items.append((key, value))
            else:
                items.append(value)
            i = skip_ws(s, i)
            if i < n and s[i] == ",":
                i = skip_ws(s, i + 1)
                if kind == "{":
                    if i >= n or s[i] != '"':
                        fail("expected a key")
                    try:
                        key, j = json.decoder.scanstring(s, i + 1, True)
                    except json.JSONDecodeError as e:
                        raise JSONSyntaxError(str(e)) from None
                    j = skip_ws(s, j)
                    if j >= n or s[j] != ":":
                        fail("expected ':'")
                    frame[1] = key
                    i = skip_ws(s, j + 1)
                break  # parse the next element
            closer = "}" if kind == "{" else "]"
            if i < n and s[i] == closer:
                stack.pop()
                value = _object_pairs(items) if kind == "{" else items
                i += 1
                continue
            fail(f"expected ',' or '{closer}'")


# --- writing ---------------------------------------------------------------

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
for _c in range(0x20):
    _ESCAPES.setdefault(chr(_c), "\\u%04x" % _c)
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\u2028\u2029]')


def encode_string(s: str) -> str:
    """The canonical JSON string literal of ``s``."""
    if _NEEDS_ESCAPE.search(s) is None:
        return '"' + s + '"'
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], s) + '"'


_F32_MAX = struct.unpack("<f", bytes.fromhex("ffff7f7f"))[0]
_F32_E_LOW = struct.unpack("<f", struct.pack("<f", 1e-6))[0]
_F32_E_HIGH = struct.unpack("<f", struct.pack("<f", 1e21))[0]


class Float32Overflow(ValueError):
    """A number beyond the float32 range."""


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _f32_of_bits(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def float32_from(value, text: str | None = None) -> float:
    """Rounds ``value`` to the nearest float32 (ties to even), as Go's
    strconv.ParseFloat(text, 32) does when ``text`` is the literal it came
    from. Returns the float32 as a Python float; raises Float32Overflow past
    the float32 range."""
    d = float(value)
    if math.isinf(d) or math.isnan(d):
        if math.isnan(d) or text is None:
            return d
        raise Float32Overflow(text)
    try:
        f = struct.unpack("<f", struct.pack("<f", d))[0]
    except OverflowError:
        f = math.copysign(math.inf, d)
    if f == d:
        return f
    # d rounds to f. Rounding the float64 d instead of the decimal can only
    # go wrong when d lies exactly halfway between two float32s: then decide
    # by the exact decimal.
    if math.isinf(f):
        other = math.copysign(_F32_MAX, d)
        mid = math.copysign(_F32_MAX + 2.0**103, d)
    else:
        bits = _f32_bits(abs(f))
        step = -1 if abs(d) < abs(f) else 1
        other = math.copysign(_f32_of_bits(bits + step), d) if bits + step < 0x7F800000 else None
        mid = None if other is None else (f + other) / 2
    if mid is not None and d == mid and text is not None:
        exact = decimal.Decimal(text)
        dm = decimal.Decimal(mid)
        if exact != dm:
            # Round toward the side the exact value lies on.
            f_side = (decimal.Decimal(f) > dm) if not math.isinf(f) else (d > 0)
            exact_side = exact > dm
            f = f if f_side == exact_side else other
    if math.isinf(f):
        if text is None:
            return f
        raise Float32Overflow(text)
    return f


def _shortest(x: float, bits: int) -> tuple[str, int]:
    """Shortest digits d1d2...dn and exponent e with x = 0.d1d2...dn * 10**e,
    x > 0 finite."""
    if bits == 32:
        s = np.format_float_scientific(np.float32(x), unique=True, trim="-")
    else:
        s = repr(x)
    mant, _, exp = s.partition("e")
    e = int(exp) if exp else 0
    whole, _, frac = mant.partition(".")
    digits = whole + frac
    point = len(whole) + e
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    return digits, point


def format_float(x: float, bits: int = 64) -> str:
    """The canonical JSON number of a float64 (bits=64) or of a float32
    value (bits=32), as the server writes it."""
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{x} has no JSON form")
    sign = "-" if x < 0 else ""
    a = abs(x)
    if bits == 32:
        use_e = a < _F32_E_LOW or a >= _F32_E_HIGH
    else:
        use_e = a < 1e-6 or a >= 1e21
    digits, point = _shortest(a, bits)
    if use_e:
        exp = point - 1
        out = digits[0]
        if len(digits) > 1:
            out += "." + digits[1:]
        # Go writes at least two exponent digits and JSON then trims "e-0X".
        if exp < 0:
            e = str(-exp)
            out += "e-" + e
        else:
            out += "e+" + ("%02d" % exp)
        return sign + out
    if point <= 0:
        return sign + "0." + "0" * (-point) + digits
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return sign + digits[:point] + "." + digits[point:]
