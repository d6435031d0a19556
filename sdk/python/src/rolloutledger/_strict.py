"""The strict decoder: a fact's JSON checked by the catalogue's schema.

This is the server's events package (strict.go, rules.go, envelope.go) on
top of the compiled schema (:mod:`._schema`): the same checks in the same
order, so that a body gets the same verdict, code, event index and field
here and there. The rules come from the schema; what is written here by
hand is what the schema names but does not define: the wire formats
(integer literals and their widths, float32 rounding, strings as UTF-8),
the order of the checks (events/schema/README.md, "The order of checks"),
the canonical encoding, and the words of errors the schema does not give.

Values come either from parsed JSON (see _json) or from the typed builders
(Python ints, floats, strings, lists, NumPy arrays); both go through
:func:`decode_object`, which returns normalized values: ints, floats (float32
fields rounded to float32), str, and NumPy arrays for int32 and float32
arrays.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
import re

import numpy as np

from . import errors as E
from ._json import (
    NEG_ZERO,
    BigIntLiteral,
    Float32Overflow,
    FloatLiteral,
    encode_string,
    fix_surrogates,
    float32_from,
    lone_surrogate,
    format_float,
)
from ._schema import (
    BOOL,
    BYTES,
    CATALOGUE,
    ENVELOPE,
    FACTS,
    FLOAT,
    FLOAT32S,
    FLOAT32LE,
    FLOATS,
    FMAP,
    FORMATS,
    INT,
    INT32LE,
    INT32S,
    RAW,
    STR,
    STRS,
    STRUCT,
    STRUCTS,
    Field,
    Rule,
    Spec,
    format_check,
)

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

_WANT = {
    STR: "a string",
    BOOL: "a boolean",
    INT: "an integer",
    FLOAT: "a number",
    INT32S: "an array of 32-bit integers",
    FLOAT32S: "an array of numbers",
    FLOATS: "an array of numbers",
    FMAP: "an object of numbers",
    INT32LE: "a base64 string of int32le values",
    FLOAT32LE: "a base64 string of float32le values",
    BYTES: "a base64 string of bytes values",
    STRS: "an array of strings",
}
_SCALARS = (STR, BOOL, INT, FLOAT)
_ARRAYS = (INT32S, FLOAT32S, FLOATS, FMAP, INT32LE, FLOAT32LE, BYTES, STRS)


# --- decoding: wire formats --------------------------------------------------


def _err(code: str, path: str, detail: str) -> E.ValidationError:
    return E.ValidationError(code, path, detail)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "an array"
    if isinstance(v, (int, float, BigIntLiteral)):
        return "a number"
    return type(v).__name__


class _Mismatch(Exception):
    """A value of the wrong JSON type (or one that does not fit)."""


class _OutOfRange(_Mismatch):
    """A number too large for its float type: ``got`` says which, as the
    server's message does."""

    def __init__(self, text: str, bits: int):
        super().__init__(text)
        self.text, self.bits = _clip(text), bits
        self.got = f"the number {self.text}, out of range of a {bits}-bit float"

    def within(self, got: str) -> "_OutOfRange":
        self.got = got
        return self


def _clip(s: str) -> str:
    return s if len(s) <= 64 else s[:61] + "..."


def _int(v, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _Mismatch
    v = int(v)
    if not lo <= v <= hi:
        raise _Mismatch
    return v


def _float64(v) -> float:
    if isinstance(v, (bool, np.bool_)):
        raise _Mismatch
    if v is NEG_ZERO:
        return -0.0
    if isinstance(v, FloatLiteral):
        if math.isinf(v):
            raise _OutOfRange(v.text, 64)
        return float(v)
    if isinstance(v, BigIntLiteral):
        f = float(v.text)
        if math.isinf(f):
            raise _OutOfRange(v.text, 64)
        return f
    if isinstance(v, (int, np.integer)):
        try:
            return float(int(v))
        except OverflowError:
            raise _OutOfRange(str(int(v)), 64) from None
    if isinstance(v, (float, np.floating)):
        return float(v)  # NaN and inf are left to the value checks
    raise _Mismatch


def _float32(v) -> float:
    if isinstance(v, (bool, np.bool_)):
        raise _Mismatch
    text = None
    try:
        if v is NEG_ZERO:
            return -0.0
        if isinstance(v, FloatLiteral):
            text = v.text
            return float32_from(float(v), v.text)
        if isinstance(v, BigIntLiteral):
            text = v.text
            return float32_from(float(v.text), v.text)
        if isinstance(v, (int, np.integer)):
            v = int(v)
            text = str(v)
            try:
                return float32_from(float(v), str(v))
            except OverflowError:
                raise _OutOfRange(text, 32) from None
        if isinstance(v, (float, np.floating)):
            f = float(v)
            text = repr(f)
            r = float32_from(f)
            if math.isinf(r) and not math.isinf(f):
                raise _OutOfRange(text, 32)
            return r
    except Float32Overflow:
        raise _OutOfRange(text or repr(v), 32) from None
    raise _Mismatch


def _elements(v, conv):
    """Converts each element of the list ``v`` with ``conv``, naming the
    element that is out of range as the server does."""
    out = []
    for i, x in enumerate(v):
        try:
            out.append(conv(x))
        except _OutOfRange as e:
            raise e.within(f"an array whose element {i}, {e.text}, is out of range of a {e.bits}-bit float") from None
    return out


def _null_element(v, kind: int, path: str):
    """The server refuses a null inside an array (or object) of scalars
    before it reads the values' types."""
    if kind in (INT32S, FLOAT32S, FLOATS) and isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            if x is None:
                raise _err(E.WRONG_TYPE, f"{path}[{i}]", "null is not allowed")
    elif kind == FMAP and isinstance(v, dict):
        for k in sorted(v, key=_key_order):
            if v[k] is None:
                raise _err(E.WRONG_TYPE, f"{path}.{k}", "null is not allowed")


def _key_order(k):
    return k if isinstance(k, str) else str(k)


def _int_array(v, lo: int, hi: int) -> np.ndarray:
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Mismatch
        if v.dtype.kind in "iu":
            if v.size and (int(v.min()) < lo or int(v.max()) > hi):
                raise _Mismatch
            return v.astype(np.int32)
        if v.dtype.kind != "O":
            raise _Mismatch
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise _Mismatch
    return np.fromiter((_int(x, lo, hi) for x in v), dtype=np.int32, count=len(v))


def _float32_array(v) -> np.ndarray:
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Mismatch
        if v.dtype.kind in "f":
            with np.errstate(over="ignore"):
                out = v.astype(np.float32)
            over = np.isinf(out) & ~np.isinf(v)
            if np.any(over):
                i = int(np.argmax(over))
                raise _OutOfRange(repr(float(v[i])), 32).within(
                    f"an array whose element {i}, {float(v[i])!r}, is out of range of a 32-bit float")
            return out
        if v.dtype.kind in "iu":
            return np.array(_elements([int(x) for x in v.tolist()], _float32), dtype=np.float32)
        if v.dtype.kind != "O":
            raise _Mismatch
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise _Mismatch
    return np.array(_elements(v, _float32), dtype=np.float32)


def _float_list(v) -> list[float]:
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Mismatch
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise _Mismatch
    return _elements(v, _float64)


def _float_map(v) -> dict[str, float]:
    if not isinstance(v, dict):
        raise _Mismatch
    out = {}
    for k, x in v.items():
        if isinstance(k, bool) or not isinstance(k, (str, int)):
            raise _Mismatch
        out[fix_surrogates(str(k))] = _member(k, x)
    # Earlier values of a repeated key are decoded too, and may fail.
    for k, x in getattr(v, "dups", ()):
        if x is not None:
            _member(k, x)
    return out


def _member(k, x) -> float:
    try:
        return _float64(x)
    except _OutOfRange as e:
        key = _clip(fix_surrogates(str(k)))
        raise e.within(f"an object whose member {json.dumps(key, ensure_ascii=False)}, {e.text}, is out of range of a 64-bit float") from None


# --- decoding: objects -------------------------------------------------------


def decode_object(obj, spec: Spec, path: str) -> dict:
    """Decodes the JSON object ``obj`` by ``spec``: a repeated key first (the
    first repeated in document order), unknown fields next (the first in
    sorted order), then each field in order — missing, null, wrong type,
    then the field's keywords."""
    if not isinstance(obj, dict):
        raise _err(E.WRONG_TYPE, path, f"want an object, got {_kind(obj)}")
    dups = getattr(obj, "dups", None)
    if dups:
        k = dups[0][0]
        raise _err(E.DUPLICATE_FIELD, _join(path, k), f"{k!r} is given more than once")
    unknown = sorted(k for k in obj if k not in spec.by_name)
    if unknown:
        k = unknown[0]
        raise _err(E.UNKNOWN_FIELD, _join(path, k), f"{k!r} is not a field of {path or 'the envelope'}")
    out = {}
    for f in spec.fields:
        fpath = _join(path, f.name)
        if f.name not in obj:
            if f.optional:
                out[f.name] = None
                continue
            raise _err(E.MISSING_FIELD, fpath, "required")
        v = obj[f.name]
        if v is None:
            raise _err(E.WRONG_TYPE, fpath, "null is not allowed")
        if f.kind not in (STRUCT, STRUCTS, RAW):
            # A parser turns the escape into U+FFFD: not what was sent.
            lone = lone_surrogate(v)
            if lone:
                raise _err(
                    E.INVALID_VALUE, fpath, f"\\u{ord(lone):04x} is half of a UTF-16 surrogate pair, alone: not a Unicode character"
                )
        out[f.name] = _decode_value(v, f, fpath)
    return out


def _decode_value(v, f: Field, path: str):
    kind = f.kind
    if kind == RAW:
        return v
    if kind == STRUCT:
        return decode_object(v, f.sub, path)
    if kind == STRUCTS:
        if not isinstance(v, (list, tuple)):
            raise _err(E.WRONG_TYPE, path, f"want an array of objects, got {_kind(v)}")
        return [decode_object(item, f.sub, f"{path}[{i}]") for i, item in enumerate(v)]
    if kind in (INT32LE, FLOAT32LE):
        return _decode_binary(v, f, path)
    if kind == BYTES:
        if not isinstance(v, str):
            raise _err(E.WRONG_TYPE, path, f"want {_WANT[kind]}, got {_kind(v)}")
        if v == "":
            return None
        b = _b64decode(v)
        if b is None:
            raise _err(E.INVALID_VALUE, path, _b64_problem(v))
        return b
    if kind == STRS:
        if not isinstance(v, (list, tuple)):
            raise _err(E.WRONG_TYPE, path, f"want {_WANT[kind]}, got {_kind(v)}")
        for i, x in enumerate(v):
            if x is None:
                raise _err(E.WRONG_TYPE, f"{path}[{i}]", "null is not allowed")
            if not isinstance(x, str):
                raise _err(E.WRONG_TYPE, path, f"want {_WANT[kind]}, got an array holding {_kind(x)}")
        for i, x in enumerate(v):
            check_string(x, f.elem, f"{path}[{i}]")
        return list(v)
    if kind == FMAP and getattr(v, "dups", None):
        k = v.dups[0][0]
        raise _err(E.DUPLICATE_FIELD, f"{path}.{k}", f"key {k!r} is given more than once")
    _null_element(v, kind, path)
    want = _WANT[kind]
    try:
        if kind == STR:
            if not isinstance(v, str):
                raise _Mismatch
            val = v
        elif kind == BOOL:
            if not isinstance(v, (bool, np.bool_)):
                raise _Mismatch
            val = bool(v)
        elif kind == INT:
            val = _int(v, *((INT32_MIN, INT32_MAX) if f.bits == 32 else (INT64_MIN, INT64_MAX)))
            want = "a 32-bit integer" if f.bits == 32 else want
        elif kind == FLOAT:
            val = _float32(v) if f.bits == 32 else _float64(v)
        elif kind == INT32S:
            val = _int_array(v, INT32_MIN, INT32_MAX)
        elif kind == FLOAT32S:
            val = _float32_array(v)
        elif kind == FLOATS:
            val = _float_list(v)
        else:
            val = _float_map(v)
    except _OutOfRange as e:
        raise _err(E.WRONG_TYPE, path, f"want {want}, got {e.got}") from None
    except _Mismatch:
        raise _err(E.WRONG_TYPE, path, f"want {want}, got {_kind(v)}") from None
    _check_value(val, f, path)
    return val


# --- binary fields (catalogue v2) -----------------------------------------------

_B64_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _decode_binary(v, f: Field, path: str):
    """A binary field: a string of strict standard base64 (padded, unused
    bits zero) of little-endian 4-byte values; "" is absent (None)."""
    if not isinstance(v, str):
        raise _err(E.WRONG_TYPE, path, f"want {_WANT[f.kind]}, got {_kind(v)}")
    if v == "":
        return None
    b = _b64decode(v)
    if b is None:
        raise _err(E.INVALID_VALUE, path, _b64_problem(v))
    name = "int32" if f.kind == INT32LE else "float32"
    if len(b) % 4:
        raise _err(E.INVALID_VALUE, path, f"{len(b)} bytes is not a whole number of {name} values")
    val = np.frombuffer(b, dtype="<i4" if f.kind == INT32LE else "<f4").astype(np.int32 if f.kind == INT32LE else np.float32)
    if val.size:
        bad = np.zeros(val.shape, dtype=bool) if f.kind == INT32LE else ~np.isfinite(val)
        if f.minimum is not None:
            bad |= val < f.minimum
        if f.maximum is not None:
            bad |= val > f.maximum
        if bad.any():
            i = int(np.argmax(bad))
            x, p = val[i], f"{path}[{i}]"
            if f.kind == INT32LE:
                words = "must not be negative" if f.minimum == 0 and x < 0 else f"must be at most {_go_value(f.maximum)}"
                raise _err(E.INVALID_VALUE, p, f"{words}, got {int(x)}")
            if math.isnan(x):
                raise _err(E.INVALID_VALUE, p, "NaN is not a finite number")
            if math.isinf(x):
                raise _err(E.INVALID_VALUE, p, f"{'+' if x > 0 else '-'}Inf is not a finite number")
            _check_number(float(x), f, p)
    return val


def _b64decode(s: str) -> bytes | None:
    """The bytes s encodes when it is their one canonical standard base64
    encoding, else None. Python's decoder does not check the unused bits of
    a padded group: encoding the result again and comparing does."""
    try:
        raw = s.encode("ascii")
        b = base64.b64decode(raw, validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError):
        return None
    return b if base64.b64encode(b) == raw else None


def _b64_problem(s: str) -> str:
    """Why s is not strict standard base64, worded as the server words it."""
    body = s.rstrip("=")
    pad = len(s) - len(body)
    if pad > 2:
        return f"not base64: {pad} padding characters at the end, at most 2"
    for i, c in enumerate(body):
        if c not in _B64_ALPHABET:
            at = len(body[:i].encode("utf-8", "surrogatepass"))
            if c == "=":
                return f"not base64: padding '=' at byte {at}, before the end"
            return f"not base64: {_go_rune(c)} at byte {at} is not in the standard alphabet (A-Z a-z 0-9 + /)"
    if len(s) % 4:
        return f"not base64: {len(s)} characters, not a whole number of 4-character groups (padded with '=')"
    if len(body) % 4 == 1:
        return "not base64: the last group holds a single character"
    return "not base64: the unused bits of the last group are not zero (the encoding is not canonical)"


def _go_rune(c: str) -> str:
    """Go's %q of a rune, near enough for messages."""
    q = _go_quote(c)[1:-1]
    return "'" + ("\\'" if c == "'" else q.replace('\\"', '"')) + "'"


def encode_binary(a: np.ndarray, kind: int) -> str:
    """The wire form of a binary field's values."""
    return base64.b64encode(np.ascontiguousarray(a, dtype="<i4" if kind == INT32LE else "<f4").tobytes()).decode("ascii")


def _check_number(x, f: Field, path: str):
    if f.minimum is not None and x < f.minimum:
        words = "must not be negative" if f.minimum == 0 else f"must be at least {_go_value(f.minimum)}"
        raise _err(E.INVALID_VALUE, path, f"{words}, got {_go_value(x)}")
    if f.maximum is not None and x > f.maximum:
        raise _err(E.INVALID_VALUE, path, f"must be at most {_go_value(f.maximum)}, got {_go_value(x)}")


def _check_float(x: float, f: Field, path: str):
    if math.isnan(x) or math.isinf(x):
        raise _err(E.INVALID_VALUE, path, "not a finite number")
    _check_number(x, f, path)


# A "." or ".." segment of an entity id, which ingest refuses.
_DOT_SEGMENT = re.compile(r"(?:^|/)\.{1,2}(?:/|$)")


def check_string(s: str, f: Field, path: str):
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError:
        b = None
    n = len(b if b is not None else s.encode("utf-8", "surrogatepass"))
    if f.max_bytes is not None and n > f.max_bytes:
        raise _err(E.INVALID_VALUE, path, f"{n} bytes, more than {f.max_bytes}")
    if f.max_length is not None and len(s) > f.max_length:
        raise _err(E.INVALID_VALUE, path, f"{len(s)} characters, more than {f.max_length}")
    if b is None:
        raise _err(E.INVALID_VALUE, path, "not valid UTF-8")
    if len(s) < f.min_length:
        raise _err(E.INVALID_VALUE, path, "must not be empty")
    if f.pattern is not None and f.pattern.match(s) is None:
        if "\x00" in s and not f.what:
            raise _err(E.INVALID_VALUE, path, "contains a NUL character")
        if f.what == "entity-id" and _DOT_SEGMENT.search(s):
            raise _err(
                E.INVALID_VALUE, path,
                f"{s[:64]!r} has a . or .. path segment, which would read as a path wherever the id names a file or a URL",
            )
        raise _err(E.INVALID_VALUE, path, f"{s[:64]!r} is not {f.what or 'text'} ({f.pattern.pattern})")
    if f.enum is not None and s not in f.enum:
        raise _err(E.INVALID_VALUE, path, f"{s[:64]!r} is not one of {', '.join(f.enum)}")


def _check_value(val, f: Field, path: str):
    kind = f.kind
    if kind == STR:
        check_string(val, f, path)
    elif kind == INT:
        _check_number(val, f, path)
    elif kind == FLOAT:
        _check_float(val, f, path)
    elif kind == INT32S:
        if val.size:
            bad = np.zeros(val.shape, dtype=bool)
            if f.minimum is not None:
                bad |= val < f.minimum
            if f.maximum is not None:
                bad |= val > f.maximum
            if bad.any():
                i = int(np.argmax(bad))
                _check_number(int(val[i]), f, f"{path}[{i}]")
    elif kind == FLOAT32S:
        if val.size:
            bad = ~np.isfinite(val)
            if f.minimum is not None:
                bad |= val < f.minimum
            if f.maximum is not None:
                bad |= val > f.maximum
            if bad.any():
                i = int(np.argmax(bad))
                _check_float(float(val[i]), f, f"{path}[{i}]")
    elif kind == FLOATS:
        for i, x in enumerate(val):
            _check_float(x, f, f"{path}[{i}]")
    elif kind == FMAP:
        for k in sorted(val):
            check_string(k, f.keys, path)
            _check_float(val[k], f, f"{path}.{k}")


# --- rules (x-rolloutledger-rules) -------------------------------------------

_ABSENT = object()


def _get(values: dict, spec: Spec, name: str):
    """A property's value, its default standing in when it is absent. An
    optional scalar without a default is absent when it holds its zero
    value, as the canonical form leaves it out."""
    v = values.get(name)
    f = spec.by_name[name]
    if v is None:
        return _ABSENT if f.default is None else f.default
    if _zero_is_absent(f, v):
        return _ABSENT
    return v


def _zero_is_absent(f: Field, v) -> bool:
    if not f.optional or f.default is not None or f.keep_zero or f.kind not in _SCALARS:
        return False
    if f.kind == FLOAT:
        return v == 0 and math.copysign(1.0, v) > 0
    return v == "" if f.kind == STR else not v


def _less(a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return float(a) < float(b)


def _bound(b, values: dict, spec: Spec):
    if b is None or not isinstance(b, dict):
        return _ABSENT if b is None else b
    x = _get(values, spec, b["field"])
    if x is _ABSENT:
        return _ABSENT
    if "minus" in b:
        m = _get(values, spec, b["minus"])
        return int(x) - (0 if m is _ABSENT else int(m))
    scale, offset = b.get("scale", 1), b.get("offset", 0)
    if scale == 1 and offset == 0:
        return x
    return float(scale * float(x)) + offset


_BOUND_TESTS = (
    ("minimum", lambda x, b: _less(x, b)),
    ("maximum", lambda x, b: _less(b, x)),
    ("exclusiveMinimum", lambda x, b: not _less(b, x) and not _nan(x, b)),
    ("exclusiveMaximum", lambda x, b: not _less(x, b) and not _nan(x, b)),
)


def _out_of_bounds(r: Rule, x, values: dict, spec: Spec) -> bool:
    for key, fails in _BOUND_TESTS:
        b = _bound(getattr(r, key), values, spec)
        if b is not _ABSENT and fails(x, b):
            return True
    return False


def _violated(r: Rule, v, values: dict, spec: Spec) -> bool:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and _out_of_bounds(r, v, values, spec):
        return True
    n = _bound(r.length, values, spec)
    if n is not _ABSENT and (not isinstance(n, int) or len(v) != n):
        return True
    n = _bound(r.minItems, values, spec)
    if n is not _ABSENT and len(v) < n:
        return True
    n = _bound(r.maxItems, values, spec)
    if n is not _ABSENT and len(v) > n:
        return True
    if r.interval is not None and len(v) == 2:
        lo, hi = float(v[0]), float(v[1])
        if lo < r.interval[0] or hi > r.interval[1] or lo > hi:
            return True
    return r.enum is not None and v not in r.enum


def _nan(*xs) -> bool:
    return any(isinstance(x, float) and math.isnan(x) for x in xs)


def _check_rule(r: Rule, values: dict, spec: Spec, path: str) -> E.ValidationError | None:
    v = _get(values, spec, r.field)
    fpath = _join(path, r.field)
    if r.requiredBy is not None and v is _ABSENT and _get(values, spec, r.requiredBy) is not _ABSENT:
        return _err(r.code, fpath, _render(r, values, spec, v))
    if v is _ABSENT:
        return None
    if r.format is not None:
        pattern, description = FORMATS[r.format]
        why = "" if pattern.match(v) else description
        why = why or format_check(r.format, v)
        if why:
            return _err(r.code, fpath, f"{v[:64]!r} is not a {r.format}: {why}")
    if r.items is not None:
        return _check_items(r, v, values, spec, fpath)
    if r.ascending:
        # Sorted and unique; strings compare by their UTF-8 bytes, as Go's do.
        for j in range(1, len(v)):
            a, b = v[j - 1], v[j]
            if not (a.encode("utf-8") < b.encode("utf-8") if isinstance(a, str) else _less(a, b)):
                return _err(r.code, f"{fpath}[{j}]", _render(r, values, spec, v, item=(j, b, a)))
        return None
    if r.propertyNames is not None:
        for k in sorted(v):
            if r.propertyNames.match(k) is None:
                return _err(r.code, f"{fpath}.{k}", _render(r, values, spec, v, key=k))
    if _violated(r, v, values, spec):
        return _err(r.code, fpath, _render(r, values, spec, v))
    return None


def _check_items(r: Rule, v, values: dict, spec: Spec, path: str) -> E.ValidationError | None:
    """A rule over the member r.items of each element of the array v (or
    of the one object v)."""
    if isinstance(v, dict):
        x = v[r.items]
        bad = False
        if r.first is not None:
            b = _bound(r.first, values, spec)
            bad = b is not _ABSENT and (_less(x, b) or _less(b, x))
        if bad or _out_of_bounds(r, x, values, spec):
            return _err(r.code, f"{path}.{r.items}", _render(r, values, spec, v, item=(0, x, 0)))
        return None
    prev = 0
    for j, el in enumerate(v):
        x = el[r.items]
        bad = False
        if r.first is not None and j == 0:
            b = _bound(r.first, values, spec)
            bad = b is not _ABSENT and (_less(x, b) or _less(b, x))
        if r.ascending and j > 0 and not _less(prev, x):
            bad = True
        if j >= r.from_ and _out_of_bounds(r, x, values, spec):
            bad = True
        if bad:
            return _err(r.code, f"{path}[{j}].{r.items}", _render(r, values, spec, v, item=(j, x, prev)))
        prev = x
    return None


def check_rules(values: dict, spec: Spec, path: str):
    """Runs the rules of the decoded object ``values`` and of every object
    inside it, innermost first in field order; raises the first failure,
    or, where the object reports all, one error naming the first and
    listing them all."""
    for f in spec.fields:
        v = values.get(f.name)
        if v is None:
            continue
        if f.kind == STRUCT:
            check_rules(v, f.sub, _join(path, f.name))
        elif f.kind == STRUCTS:
            for i, x in enumerate(v):
                check_rules(x, f.sub, f"{_join(path, f.name)}[{i}]")
    errs = []
    for r in spec.rules:
        e = _check_rule(r, values, spec, path)
        if e is not None:
            if not spec.report_all:
                raise e
            errs.append(e)
    if errs:
        raise _err(errs[0].code, errs[0].field, "; ".join(f"{e.field}: {e.detail}" for e in errs))


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _render(r: Rule, values: dict, spec: Spec, v, key: str = "", item: tuple | None = None) -> str:
    """A rule's message with its placeholders filled in (README: "Rules")."""

    def fill(m: re.Match) -> str:
        name = m.group(1)
        if name == "$key":
            return _go_quote(key)
        if name == "$len":
            return str(len(v))
        if name in ("$index", "$value", "$previous"):
            return "" if item is None else _go_value(item[("$index", "$value", "$previous").index(name)])
        if name.startswith("$"):
            b = _bound(getattr(r, name[1:]), values, spec)
        else:
            b = _get(values, spec, name)
        return "" if b is _ABSENT else _go_value(b)

    return _PLACEHOLDER.sub(fill, r.message)


def _go_value(v) -> str:
    """v as the Go decoder words it: %d, %g, %q, [a, b]."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return _go_g(float(v))
    if isinstance(v, str):
        return _go_quote(v)
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_go_value(x) for x in v) + "]"
    return str(v)


def _go_g(x: float) -> str:
    """Go's %g: the shortest digits that read back, with an exponent when
    the decimal exponent is below -4 or at least 6."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digits, exp = decimal.Decimal(repr(x)).normalize().as_tuple()
    ds = "".join(map(str, digits))
    e10 = len(ds) + exp - 1
    s = "-" if sign else ""
    if e10 < -4 or e10 >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{s}{mant}e{'-' if e10 < 0 else '+'}{abs(e10):02d}"
    if e10 < 0:
        return s + "0." + "0" * (-e10 - 1) + ds
    if len(ds) <= e10 + 1:
        return s + ds + "0" * (e10 + 1 - len(ds))
    return s + ds[: e10 + 1] + "." + ds[e10 + 1 :]


def _go_quote(s: str) -> str:
    """Go's %q, near enough for messages."""
    out = ['"']
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(c)])
        elif c.isprintable():
            out.append(c)
        elif ord(c) < 0x80:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "".join(out) + '"'


# --- facts and events --------------------------------------------------------


def resolve(values: dict, spec: Spec) -> dict:
    """Every field of ``values`` with the defaults applied to those absent."""
    return {f.name: values.get(f.name) if values.get(f.name) is not None else f.default for f in spec.fields}


def drop_empty_optional(values: dict, spec: Spec) -> dict:
    """Optional arrays and maps given empty become absent, as in the
    canonical form (after the rules saw them)."""
    for f in spec.fields:
        v = values.get(f.name)
        if f.kind == STRUCT and v is not None:
            drop_empty_optional(v, f.sub)
        elif f.optional and f.kind in _ARRAYS and v is not None and len(v) == 0:
            values[f.name] = None
    return values


def decode_data(spec: Spec, obj) -> dict:
    """Decodes and checks the data of a fact by its schema; raises
    ValidationError with fields under "data"."""
    values = decode_object(obj, spec, "data")
    check_rules(values, spec, "data")
    return drop_empty_optional(values, spec)


def decode_fact(fact_type: str, obj) -> dict:
    """decode_data for the current version of a fact type."""
    return decode_data(FACTS[fact_type], obj)


def decode_envelope(obj) -> tuple[dict, Spec]:
    """Decodes an event's envelope and its rules, then selects the schema of
    its data: (envelope values, data spec). Raises ValidationError."""
    env = decode_object(obj, ENVELOPE, "")
    check_rules(env, ENVELOPE, "")
    versions = CATALOGUE.get(env["type"])
    if versions is None:
        raise _err(E.UNKNOWN_TYPE, "type", f"{env['type'][:64]!r} is not in the catalogue")
    if env["v"] not in versions:
        raise _err(E.UNKNOWN_VERSION, "v", f"{env['type']} has no schema version {env['v']}")
    return env, versions[env["v"]]


# --- canonical encoding ------------------------------------------------------


def _float32_texts(a: np.ndarray) -> list[str]:
    out = a.astype(str).tolist()
    for i, s in enumerate(out):
        if "e" in s:
            out[i] = format_float(float(a[i]), 32)
        elif s.endswith(".0"):
            out[i] = s[:-2]
    return out


def encode_values(values: dict, spec: Spec) -> str:
    """The canonical JSON of decoded values: fields in order, optional ones
    left out when absent or empty."""
    parts = []
    for f in spec.fields:
        v = values.get(f.name)
        if f.optional and (v is None or (f.kind in (STR, *_ARRAYS) and len(v) == 0) or _zero_is_absent(f, v)):
            continue
        parts.append(encode_string(f.name) + ":" + _encode_value(v, f))
    return "{" + ",".join(parts) + "}"


def _encode_value(v, f: Field) -> str:
    kind = f.kind
    if kind == STR:
        return encode_string(v)
    if kind == BOOL:
        return "true" if v else "false"
    if kind == INT:
        return str(int(v))
    if kind == FLOAT:
        return format_float(v, f.bits)
    if kind == INT32S:
        return "[" + ",".join(map(str, v.tolist())) + "]"
    if kind == FLOAT32S:
        return "[" + ",".join(_float32_texts(v)) + "]"
    if kind == FLOATS:
        return "[" + ",".join(format_float(x, 64) for x in v) + "]"
    if kind == FMAP:
        return "{" + ",".join(encode_string(k) + ":" + format_float(v[k], 64) for k in sorted(v)) + "}"
    if kind in (INT32LE, FLOAT32LE):
        return '"' + encode_binary(v, kind) + '"'
    if kind == BYTES:
        return '"' + base64.b64encode(bytes(v)).decode("ascii") + '"'
    if kind == STRS:
        return "[" + ",".join(encode_string(x) for x in v) + "]"
    if kind == STRUCT:
        return encode_values(v, f.sub)
    if kind == STRUCTS:
        return "[" + ",".join(encode_values(x, f.sub) for x in v) + "]"
    raise AssertionError(kind)
