"""Request bodies as the server judges them.

:func:`validate_body` is the SDK's copy of the server's events.DecodeBatch
followed by events.EncodeBatch: the same body gets the same verdict — the
events it holds, or a ValidationError with the same code, event index and
field. The shared cases in testdata/vectors/events.json check this.
"""

from __future__ import annotations

import re

from . import _schema as S
from . import errors as E
from ._json import JSONSyntaxError, parse_value, skip_ws
from .facts import Event, decode_event, encode_canonical

__all__ = ["validate_body", "encode_events", "trim_space"]

# Go's unicode.IsSpace beyond ASCII, which bytes.TrimSpace also trims.
_UNICODE_SPACE = frozenset("\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_ASCII_SPACE = frozenset("\t\n\v\f\r ")
_BAD_UTF8 = re.compile("[\udc80-\udcff]")


def trim_space(text: str) -> str:
    """bytes.TrimSpace on a body decoded with surrogateescape (an invalid
    byte is never a space)."""
    i, j = 0, len(text)
    while i < j and (text[i] in _ASCII_SPACE or text[i] in _UNICODE_SPACE):
        i += 1
    while j > i and (text[j - 1] in _ASCII_SPACE or text[j - 1] in _UNICODE_SPACE):
        j -= 1
    return text[i:j]


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


def _decode_one(record: str, index: int) -> Event:
    """events.decodeOne on one record (already known to be JSON when it
    comes from an array)."""
    try:
        if _nbytes(record) > 2 * S.MAX_RECORD_BYTES:
            raise E.ValidationError(E.TOO_LARGE, "", f"more than {S.MAX_RECORD_BYTES} bytes")
        try:
            value, end = parse_value(record, 0)
        except JSONSyntaxError as e:
            raise E.ValidationError(E.MALFORMED, "", str(e)) from None
        if end != len(record):
            raise E.ValidationError(E.MALFORMED, "", f"invalid character after the value at character {end}")
        if _BAD_UTF8.search(record):
            raise E.ValidationError(E.MALFORMED, "", "invalid UTF-8")
        return decode_event(value)
    except E.ValidationError as e:
        e.index = index
        raise


_STRUCTURE = re.compile(r'["\\\[\]{}]')


def _check_depth(text: str) -> None:
    """events.checkDepth: refuses a body whose arrays and objects nest deeper
    than MAX_DEPTH, counting brackets outside strings."""
    if text.count("[") + text.count("{") <= S.MAX_DEPTH:
        return
    depth, in_string, skip = 0, False, -1
    for m in _STRUCTURE.finditer(text):
        i, c = m.start(), m.group()
        if i == skip:
            continue  # the character after a backslash
        if in_string:
            if c == "\\":
                skip = i + 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > S.MAX_DEPTH:
                raise E.ValidationError(
                    E.MALFORMED, "", f"arrays and objects nest deeper than {S.MAX_DEPTH} levels at character {i}"
                )
        elif c in "]}":
            depth -= 1


def decode_body(body: bytes | str) -> list[Event]:
    """events.DecodeBatch: the events of a body holding one event object or an
    array of them, normalized. Stops at the first bad event."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    text = trim_space(body.decode("utf-8", "surrogateescape"))
    if not text:
        raise E.ValidationError(E.EMPTY, "", "the body is empty")
    # Before any parser sees the body, as the server does.
    _check_depth(text)
    if text[0] != "[":
        return [_decode_one(text, 0)]
    spans = []
    try:
        i = skip_ws(text, 1)
        if i < len(text) and text[i] == "]":
            i += 1
        else:
            while True:
                _, end = parse_value(text, i)
                spans.append((i, end))
                i = skip_ws(text, end)
                if i < len(text) and text[i] == ",":
                    i = skip_ws(text, i + 1)
                    continue
                if i < len(text) and text[i] == "]":
                    i += 1
                    break
                raise JSONSyntaxError(f"expected ',' or ']' at character {i}")
        if skip_ws(text, i) != len(text):
            raise JSONSyntaxError(f"invalid character after the array at character {i}")
    except JSONSyntaxError as e:
        raise E.ValidationError(E.MALFORMED, "", str(e)) from None
    if not spans:
        raise E.ValidationError(E.EMPTY, "", "the array holds no events")
    return [_decode_one(text[a:b], n) for n, (a, b) in enumerate(spans)]


def encode_events(events: list[Event]) -> list[bytes]:
    """events.EncodeBatch over normalized events: their canonical records;
    one over 1 MiB fails the batch with its index."""
    out = []
    for n, ev in enumerate(events):
        try:
            out.append(encode_canonical(ev))
        except E.ValidationError as e:
            e.index = n
            raise
    return out


def validate_body(body: bytes | str) -> list[Event]:
    """The server's verdict on a request body: its normalized events, or a
    ValidationError naming the code, event index and field it would answer
    with."""
    events = decode_body(body)
    encode_events(events)
    return events
