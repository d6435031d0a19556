"""Event ids: UUIDv7 (RFC 9562, section 5.7), made locally.

Layout of the 128 bits, most significant first:

    48 unix_ts_ms | 4 ver (0b0111) | 12 rand_a | 2 var (0b10) | 62 rand_b

rand_a is used as a counter within one millisecond (RFC 9562 section 6.2,
method 1, "fixed bit-length dedicated counter"): it starts at a random value
below 2048 each millisecond and increments for every further id in that
millisecond, so ids made by one process sort in the order they were made.
When the counter runs out, the timestamp moves on by a millisecond ahead of
the clock; a clock that steps back is ignored until it catches up. rand_b is
62 fresh random bits per id.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["uuid7", "uuid7_time_ms", "parse_event_id"]

_lock = threading.Lock()
_last_ms = -1
_counter = 0


def _next_fields() -> tuple[int, int]:
    global _last_ms, _counter
    with _lock:
        now = time.time_ns() // 1_000_000
        if now > _last_ms:
            _last_ms = now
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            _counter += 1
            if _counter > 0xFFF:
                _last_ms += 1
                _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        return _last_ms, _counter


def uuid7() -> str:
    """A fresh UUIDv7 in its lowercase 8-4-4-4-12 form."""
    ms, counter = _next_fields()
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
    h = "%032x" % value
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def uuid7_time_ms(uid: str) -> int:
    """The unix millisecond timestamp of a UUIDv7."""
    return int(uid.replace("-", "")[0:12], 16)


_HEX = frozenset("0123456789abcdefABCDEF")


def parse_event_id(s: str) -> str | None:
    """The canonical (lowercase) form of an event id, or None when the server
    would refuse it: the 36-character hyphenated form of any UUID of the RFC
    9562 variant (the nil and max UUIDs are not)."""
    if len(s) != 36 or not s.isascii():
        return None
    if s[8] != "-" or s[13] != "-" or s[18] != "-" or s[23] != "-":
        return None
    h = s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
    if any(c not in _HEX for c in h):
        return None
    if int(h[16], 16) & 0xC != 0x8:
        return None
    return s.lower()
