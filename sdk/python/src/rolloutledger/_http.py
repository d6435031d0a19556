"""A small HTTP/1.1 transport over http.client: one keep-alive connection per
thread, rebuilt after any error."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
import weakref

from . import errors as E

__all__ = ["Transport", "Response", "TRANSIENT_STATUSES", "TRANSPORT_ERRORS", "error_from_response"]

# Answers after which the same request may simply be sent again.
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
# Failures of the connection itself: the request may or may not have arrived.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


class Response:
    __slots__ = ("status", "headers", "body", "buffer")

    def __init__(self, status: int, headers, body: bytes, buffer=None):
        self.status = status
        self.headers = headers
        self.body = body
        # The whole buffer a large body was read into (see Transport.reuse).
        self.buffer = buffer

    def json(self):
        return json.loads(self.body)


class Transport:
    def __init__(self, url: str, *, token: str | None = None, user_agent: str = "rolloutledger-python"):
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"ledger URL {url!r}: want http://host:port or https://host:port")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.user_agent = user_agent
        self._local = threading.local()

    def _conn(self, timeout: float) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = cls(self.host, self.port, timeout=timeout)
            self._local.conn = conn
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def close(self):
        """Closes this thread's connection and lets go of the receive
        buffers it kept for the next large body (see lend and reuse)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self._local.spare = self._local.lent = None

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict | None = None,
        timeout: float = 30.0,
        large: bool = False,
    ) -> Response:
        """Sends one request and reads the whole answer. Raises one of
        TRANSPORT_ERRORS when the connection fails; the connection is then
        dropped and the next request opens a new one.

        With ``large``, a 200's body is read with readinto into one
        preallocated buffer (the Content-Length, else grown as it comes) and
        returned as a memoryview of it: ``HTTPResponse.read()`` of a chunked
        body joins its pieces in a list and copies them again, about a third
        the speed for a 100 MB body."""
        h = {"User-Agent": self.user_agent, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if headers:
            h.update(headers)
        conn = self._conn(timeout)
        try:
            conn.request(method, self.prefix + path, body=body, headers=h)
            resp = conn.getresponse()
            buffer = None
            if large and resp.status == 200:
                data, buffer = _read_into(resp, self._spare())
                self._local.spare = None
            else:
                data = resp.read()
        except BaseException:
            conn.close()
            self._local.conn = None
            raise
        if resp.will_close:
            conn.close()
            self._local.conn = None
        return Response(resp.status, resp.headers, data, buffer)

    def _spare(self):
        """The buffer this thread's next large body may be read into: the
        one given back with reuse, or one of those lent out (see lend)
        whose body nothing views any more."""
        spare = getattr(self._local, "spare", None)
        lent = getattr(self._local, "lent", None)
        for i, (alive, buf) in enumerate(lent or ()):
            if alive() is None:
                del lent[i]
                if spare is None or len(buf) > len(spare):
                    spare = buf
                break
        return spare

    def lend(self, resp: Response):
        """Keeps the buffer resp's large body was read into, whose views the
        caller hands out, with a weak reference to the array the body is a
        memoryview of: every view of the body (a NumPy array, a pyarrow
        buffer, a torch tensor, a memoryview) refers to that array, so once
        it is gone nothing reads the buffer, and a later large body of this
        thread is read into the same memory, already faulted in, instead of
        fresh memory. Two are kept, so that a trainer that still holds
        batch k while it fetches batch k+1 (``s = batch.samples()`` in a
        loop) reads k+1 into k-1's buffer."""
        if resp.buffer is not None and isinstance(resp.body, memoryview):
            lent = getattr(self._local, "lent", None)
            if lent is None:
                lent = self._local.lent = []
            lent.append((weakref.ref(resp.body.obj), resp.buffer))
            del lent[:-2]
            resp.buffer = None

    def reuse(self, resp: Response):
        """Keeps the buffer resp's large body was read into for this
        thread's next large body, once nothing refers to the body any more
        (the caller copied what it needed out of it). Fresh memory costs a
        page fault per 4 KiB, as much as the copy into it on a busy machine:
        a trainer fetching batch after batch reads each into warm pages."""
        if resp.buffer is not None:
            spare = getattr(self._local, "spare", None)
            if spare is None or len(resp.buffer) > len(spare):
                self._local.spare = resp.buffer
            resp.buffer = resp.body = None


# The most bytes one readinto call asks for, and the room first set aside
# for a body of unknown length (address space only: pages the body never
# reaches are never touched).
_READ_STEP = 16 << 20
_UNKNOWN_LENGTH_ROOM = 256 << 20


def _read_into(resp, spare=None):
    """The whole body of resp, read with readinto into one buffer, and the
    buffer: a uint8 NumPy array (spare, when it is large enough) of at least
    the Content-Length, or, for a chunked body, of generous room that
    doubles (one copy) when the body outgrows it. NumPy's empty arrays are
    not zeroed, so room the body does not use costs nothing; bytearray(n)
    would write every page first."""
    import numpy as np  # noqa: PLC0415 - only bodies that need it

    length = resp.length  # None when chunked
    want = length if length is not None else _UNKNOWN_LENGTH_ROOM
    buf = spare if spare is not None and (len(spare) >= want or length is None) else np.empty(want, dtype=np.uint8)
    n = 0
    while True:
        if n == len(buf) or (length is not None and n == length):
            if length is not None:
                break
            grown = np.empty(2 * len(buf), dtype=np.uint8)
            grown[:n] = buf
            buf = grown
        step = _READ_STEP if length is None else min(_READ_STEP, length - n)
        k = resp.readinto(memoryview(buf[n : n + step]))
        if not k:
            break
        n += k
    if length is not None and n < length:
        raise http.client.IncompleteRead(b"", length - n)
    return memoryview(buf[:n]), buf


def error_from_response(resp: Response, what: str) -> E.LedgerError:
    """The exception for a non-success answer, carrying the server's error
    body {"error": {"code", "message", "index"?, "field"?}} when there is
    one."""
    code, message, index, field = "", "", None, ""
    try:
        detail = json.loads(resp.body)["error"]
        code = str(detail.get("code", ""))
        message = str(detail.get("message", ""))
        index = detail.get("index")
        field = str(detail.get("field", "") or "")
    except (ValueError, KeyError, TypeError, AttributeError):
        message = resp.body[:500].decode("utf-8", "replace").strip()
    message = message or f"{what}: HTTP {resp.status}"
    kw = dict(status=resp.status, code=code, index=index, field=field)
    if resp.status == 401:
        return E.AuthenticationError(
            f"{message} (send a token the ledger knows: Ledger(token=...) or $ROLLOUTLEDGER_TOKEN)", **kw
        )
    if resp.status == 403:
        return E.PermissionDeniedError(message, **kw)
    if resp.status == 404:
        return E.NotFoundError(message, **kw)
    if resp.status in TRANSIENT_STATUSES:
        return E.UnavailableError(message, **kw)
    if 400 <= resp.status < 500:
        return E.RejectedError(message, **kw)
    return E.LedgerError(message, **kw)
