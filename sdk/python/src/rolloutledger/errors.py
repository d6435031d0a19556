"""Exceptions raised by the SDK.

Two families:

* :class:`ValidationError` is raised before anything leaves the process, when an
  event breaks a rule of the catalogue. It carries the same ``code``, ``index``
  and ``field`` the server would answer with for the same bytes.
* :class:`LedgerError` and its subclasses are raised by the HTTP client. A
  refusal by the server (:class:`RejectedError`) carries the server's error body:
  ``code``, ``message`` and, when one event was at fault, ``index`` and
  ``field``.
"""

from __future__ import annotations

# Wire codes of a refused event, shared with the server and the test vectors
# (events/errors.go).
MALFORMED = "malformed"
TOO_LARGE = "too_large"
UNKNOWN_TYPE = "unknown_type"
UNKNOWN_VERSION = "unknown_version"
UNKNOWN_FIELD = "unknown_field"
DUPLICATE_FIELD = "duplicate_field"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
INVALID_VALUE = "invalid_value"
EMPTY = "empty"

CODES = (
    MALFORMED,
    TOO_LARGE,
    UNKNOWN_TYPE,
    UNKNOWN_VERSION,
    UNKNOWN_FIELD,
    DUPLICATE_FIELD,
    MISSING_FIELD,
    WRONG_TYPE,
    INVALID_VALUE,
    EMPTY,
)


class ValidationError(ValueError):
    """An event (or a request body) the ledger would refuse.

    ``index`` is the event's position in its request (0 for a single event),
    ``field`` the dotted path of the offending field (``"data.token_ids"``,
    ``"data.gates[2].name"``), empty when the whole record is at fault.
    """

    def __init__(self, code: str, field: str = "", detail: str = "", index: int = 0):
        self.code = code
        self.field = field
        self.detail = detail
        self.index = index
        super().__init__(self._text())

    def _text(self) -> str:
        where = f"event {self.index}"
        if self.field:
            where += f" field {self.field}"
        text = f"{where}: {self.code}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def at_index(self, index: int) -> "ValidationError":
        """Returns a copy of the error naming event ``index`` of a request."""
        return ValidationError(self.code, self.field, self.detail, index)

    def __str__(self) -> str:  # index may change after construction
        return self._text()

    def __reduce__(self):
        return (ValidationError, (self.code, self.field, self.detail, self.index))


class LedgerError(Exception):
    """An error talking to the ledger.

    ``status`` is the HTTP status (0 when no answer came), ``code`` and
    ``message`` the server's error (or a client-side description), ``index``
    and ``field`` name the event and field at fault when the server did.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        code: str = "",
        index: int | None = None,
        field: str = "",
    ):
        self.status = status
        self.code = code
        self.message = message
        self.index = index
        self.field = field
        super().__init__(message)

    def __str__(self) -> str:
        parts = []
        if self.status:
            parts.append(f"HTTP {self.status}")
        if self.code:
            parts.append(self.code)
        where = ""
        if self.index is not None:
            where = f"event {self.index}"
        if self.field:
            where = (where + " " if where else "") + f"field {self.field}"
        if where:
            parts.append(where)
        head = " ".join(parts)
        return f"{head}: {self.message}" if head else self.message


class RejectedError(LedgerError):
    """The server refused a request (4xx): nothing of it was appended."""


class AuthenticationError(RejectedError):
    """The ledger does not know the caller (401): no bearer token was sent,
    or the token is not one of the ledger's. Pass ``token=`` to
    :class:`~rolloutledger.Ledger` or set ``ROLLOUTLEDGER_TOKEN``. Nothing of
    the request was appended; retrying with the same token cannot help."""


class PermissionDeniedError(RejectedError):
    """The caller's token may not do this (403): its role does not allow
    the route, or one event of an append is of a type the role may not write
    (``field == "type"``) or of a run outside the token's scope
    (``field == "run"``); ``index`` names that event. Nothing of the request
    was appended."""


class NotFoundError(LedgerError):
    """The server has no such resource (404): an unknown batch, say."""


class UnavailableError(LedgerError):
    """The ledger did not acknowledge a request within the retry budget.

    Some of its events may have been appended; sending them again with the
    same ids is safe. ``events`` holds the events that were not acknowledged
    when the error comes from the background flusher.
    """

    def __init__(self, message: str, *, events=None, **kw):
        super().__init__(message, **kw)
        self.events = list(events or [])


class DigestMismatchError(LedgerError):
    """A batch's manifest and samples do not hash to the digest it names."""


class ResumeError(LedgerError):
    """A trainer's saved state does not match what the ledger holds."""


class InfrastructureError(Exception):
    """Raise (or subclass) inside an attempt when the infrastructure failed.

    The attempt context manager records ``attempt.failed`` with the
    exception's message as the reason: the failure is attributed to the
    infrastructure, not to the model. Any exception with a true attribute
    ``infrastructure`` is treated the same way.
    """

    infrastructure = True
