"""The ledger client: :class:`Ledger`.

Writing. :meth:`Ledger.post` sends events now and returns where each landed.
:meth:`Ledger.emit` validates a fact in the caller's thread (a bad fact
raises ValidationError there) and queues its canonical record for a
background flusher, which sends the queue in order, a batch per request.
The queue is bounded: when the ledger is slow or away, ``emit`` blocks
(back-pressure) instead of buffering without limit. :meth:`Ledger.flush`
waits until everything emitted so far is acknowledged; :meth:`Ledger.close`
(or leaving a ``with`` block) flushes and stops the flusher.

Retries. A request whose connection fails, or that the ledger answers with
503 (Kafka did not acknowledge), 502, 504 or 429, is sent again with the
same bytes — the same event ids — after an exponential backoff, until
``retry_timeout`` runs out. The ledger drops a repeated id with identical
bytes as a duplicate, so a retry never appends a fact twice. A refusal
(400, 413, ...) is not retried: it raises RejectedError with the server's
code, message, event index and field.

Reading. :meth:`Ledger.batches` long-polls for sealed batches;
:meth:`Ledger.samples` fetches a batch's samples as NumPy arrays (from
Apache Arrow IPC without copying when pyarrow is installed, else NDJSON).
"""

from __future__ import annotations

import atexit
import os
import queue
import random
import threading
import time
import urllib.parse
import weakref
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from . import errors as E
from ._http import TRANSIENT_STATUSES, TRANSPORT_ERRORS, Transport, error_from_response
from ._schema import valid_entity_id, valid_run_id
from .facts import Event, Fact, GradientApplied, PolicyPublished
from .samples import (
    ARROW_MEDIA_TYPE,
    NDJSON_MEDIA_TYPE,
    Batch,
    SampleBatch,
    arrow_codec_available,
    have_pyarrow,
    parse_arrow_samples,
    parse_samples,
)
from .trainer import TrainerState
from .worker import Attempt

__all__ = ["Ledger", "Ack"]

_MAX_WAIT = 300.0  # the server's bound on a long poll


@dataclass(frozen=True)
class Ack:
    """Where the ledger appended one event."""

    id: str
    partition: int
    offset: int


class _Flush:
    """A marker in the queue: set once everything before it was handled."""

    __slots__ = ("done",)

    def __init__(self):
        self.done = threading.Event()


_STOP = object()


class Ledger:
    """A client of one ledger.

    ``source`` is the producer identity written into events (an entity id:
    [A-Za-z0-9._:/-]{1,200}). ``timeout`` bounds one HTTP exchange,
    ``retry_timeout`` the time spent retrying one request. ``max_buffer``
    bounds the events queued by :meth:`emit`; ``batch_events`` and
    ``batch_bytes`` bound one request; ``linger`` is how long the flusher
    waits for more events before sending a small batch.

    ``fact_version`` caps the schema version events are written at: 1 keeps
    version 1 facts (token arrays as JSON arrays, one policy version per
    turn, no text) for consumers that read nothing newer. None takes
    ``$ROLLOUTLEDGER_FACT_VERSION`` when set, and otherwise each type's
    newest version.

    ``samples_format`` is how :meth:`samples` fetches a batch's samples:
    "arrow" (Apache Arrow IPC, needs pyarrow), "ndjson", or "auto" (Arrow
    when pyarrow is installed).

    ``token`` is the bearer token sent with every request; when it is None,
    ``$ROLLOUTLEDGER_TOKEN`` is used if set. A ledger that does not know the
    token answers 401 (:class:`~rolloutledger.AuthenticationError`); one whose
    role or run scope does not allow a request answers 403
    (:class:`~rolloutledger.PermissionDeniedError`).
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:7070",
        *,
        source: str = "python-sdk",
        token: str | None = None,
        timeout: float = 30.0,
        retry_timeout: float = 300.0,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        max_buffer: int = 10_000,
        batch_events: int = 256,
        batch_bytes: int = 8 << 20,
        linger: float = 0.02,
        fact_version: int | None = None,
        samples_format: str = "auto",
    ):
        if not valid_entity_id(source):
            raise ValueError(f"source {source!r} is not an id ([A-Za-z0-9._:/-]{{1,200}})")
        self.url = url.rstrip("/")
        self.source = source
        self.timeout = timeout
        self.retry_timeout = retry_timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.batch_events = batch_events
        self.batch_bytes = batch_bytes
        self.linger = linger
        if fact_version is not None and (isinstance(fact_version, bool) or not isinstance(fact_version, int) or fact_version < 1):
            raise ValueError(f"fact_version {fact_version!r}: want a schema version, 1 or more")
        self.fact_version = fact_version
        if samples_format not in ("auto", "arrow", "ndjson"):
            raise ValueError(f"samples_format {samples_format!r}: want 'auto', 'arrow' or 'ndjson'")
        self.samples_format = samples_format
        if token is None:
            token = os.environ.get("ROLLOUTLEDGER_TOKEN") or None
        self._http = Transport(self.url, token=token)
        self._queue: queue.Queue = queue.Queue(maxsize=max_buffer)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        # The flusher's failures: a fatal one stops it sending (raised by
        # every later call); a refused event is reported once.
        self._fatal: E.LedgerError | None = None
        self._refused: list[E.RejectedError] = []
        self.retries = 0  # requests sent again after a transient failure
        self._atexit = None

    # --- context manager -------------------------------------------------------

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    # --- sending now -------------------------------------------------------------

    def event(self, run: str, fact: Fact, *, source: str | None = None, at=None, id: str | None = None) -> Event:
        """An event of ``fact`` in ``run`` from this client's source, at the
        newest schema version up to the client's ``fact_version``."""
        return Event(run, fact, source=source or self.source, at=at, id=id, fact_version=self.fact_version)

    def post(self, events: Iterable[Event | bytes]) -> list[Ack]:
        """Validates, sends and waits for the acknowledgment of ``events``
        (Events, or canonical records as bytes). Up to ``batch_events``
        events go in one request, which the ledger accepts or refuses as a
        whole; more are split over several requests, in order. Returns each
        event's position."""
        records = [ev if isinstance(ev, bytes) else ev.encode() for ev in events]
        acks: list[Ack] = []
        for chunk in self._chunks(records):
            acks.extend(self._send(chunk))
        return acks

    def _chunks(self, records: list[bytes]) -> Iterator[list[bytes]]:
        chunk: list[bytes] = []
        size = 2
        for r in records:
            if chunk and (len(chunk) >= self.batch_events or size + len(r) + 1 > self.batch_bytes):
                yield chunk
                chunk, size = [], 2
            chunk.append(r)
            size += len(r) + 1
        if chunk:
            yield chunk

    def _sleep_backoff(self, attempt: int, deadline: float, what: str, last: str):
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        delay *= 0.5 + random.random() / 2
        if time.monotonic() + delay > deadline:
            raise E.UnavailableError(f"{what}: gave up after {attempt + 1} tries: {last}")
        time.sleep(delay)

    def post_body(self, body: bytes) -> list[Ack]:
        """Sends a request body as it is (one event object or an array of
        them, built elsewhere), with the same retries as :meth:`post`."""
        return self._send_body(body, None)

    def _send(self, records: list[bytes]) -> list[Ack]:
        return self._send_body(b"[" + b",".join(records) + b"]", len(records))

    def _send_body(self, body: bytes, n: int | None) -> list[Ack]:
        """One request, retried with the same bytes until acknowledged or
        refused."""
        deadline = time.monotonic() + self.retry_timeout
        attempt = 0
        while True:
            try:
                resp = self._http.request(
                    "POST",
                    "/v1/events",
                    body=body,
                    headers={"Content-Type": "application/json"},
                    timeout=self.timeout,
                )
            except TRANSPORT_ERRORS as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if resp.status == 200:
                    return self._acks(resp.json(), n)
                if resp.status not in TRANSIENT_STATUSES:
                    raise error_from_response(resp, "POST /v1/events")
                last = f"HTTP {resp.status}: {resp.body[:200].decode('utf-8', 'replace')}"
            self._sleep_backoff(attempt, deadline, "POST /v1/events", last)
            attempt += 1
            with self._lock:
                self.retries += 1

    @staticmethod
    def _acks(doc, n: int | None) -> list[Ack]:
        evs = doc.get("events") or []
        if n is not None and len(evs) != n:
            raise E.LedgerError(f"the ledger acknowledged {len(evs)} events of {n}")
        return [Ack(e["id"], int(e["partition"]), int(e["offset"])) for e in evs]

    # --- buffered sending ------------------------------------------------------

    def emit(
        self,
        run: str,
        fact: Fact,
        *,
        source: str | None = None,
        at=None,
        id: str | None = None,
        timeout: float | None = None,
    ) -> Event:
        """Validates ``fact`` now and queues it for the flusher. Blocks while
        the queue is full (up to ``timeout``, then raises queue.Full). Raises
        the flusher's error if it had one."""
        ev = self.event(run, fact, source=source, at=at, id=id)
        self.send(ev, timeout=timeout)
        return ev

    def send(self, event: Event, *, timeout: float | None = None) -> Event:
        """Queues an already built event (validated here)."""
        record = event.encode()
        self._raise_error()
        if self._closed:
            raise RuntimeError("the ledger client is closed")
        self._ensure_flusher()
        self._queue.put(record, timeout=timeout)
        return event

    def flush(self, timeout: float | None = None):
        """Waits until every event emitted before the call was acknowledged.
        Raises the flusher's error (UnavailableError with the events not
        sent, or RejectedError) if there was one."""
        if self._thread is not None and self._thread.is_alive():
            marker = _Flush()
            self._queue.put(marker, timeout=timeout)
            if not marker.done.wait(timeout):
                raise TimeoutError(f"flush: events still unacknowledged after {timeout}s")
        self._raise_error()

    def close(self, timeout: float | None = None):
        """Flushes, stops the flusher and closes the connection."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            if self._thread is not None and self._thread.is_alive():
                self._queue.put(_STOP)
                self._thread.join(timeout)
            if self._atexit is not None:
                atexit.unregister(self._atexit)
                self._atexit = None
            self._http.close()

    def _raise_error(self):
        if self._fatal is not None:
            raise self._fatal
        with self._lock:
            refused, self._refused = self._refused, []
        if refused:
            raise refused[0]

    def _ensure_flusher(self):
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._flusher, name="rolloutledger-flusher", daemon=True)
                self._thread.start()
                if self._atexit is None:
                    ref = weakref.ref(self)

                    def flush_at_exit():
                        c = ref()
                        if c is not None and not c._closed:
                            try:
                                c.close(timeout=30)
                            except Exception:
                                pass

                    self._atexit = flush_at_exit
                    atexit.register(flush_at_exit)

    def _flusher(self):
        stop = False
        while not stop:
            item = self._queue.get()
            if item is _STOP:
                return
            pending: list = [item]  # records and flush markers, in order
            deadline = time.monotonic() + self.linger
            n = 0 if isinstance(item, _Flush) else 1
            size = 0 if isinstance(item, _Flush) else len(item)
            # Gather a batch: up to the limits, until a flush marker, or until
            # the linger time passes with nothing new.
            while not isinstance(pending[-1], _Flush) and n < self.batch_events and size < self.batch_bytes:
                left = deadline - time.monotonic()
                try:
                    nxt = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                pending.append(nxt)
                if not isinstance(nxt, _Flush):
                    n += 1
                    size += len(nxt)
            self._send_pending(pending)

    def _send_pending(self, items: list):
        records = [x for x in items if not isinstance(x, _Flush)]
        if records and self._fatal is None:
            chunks = list(self._chunks(records))
            for n, chunk in enumerate(chunks):
                try:
                    self._send_refusing(chunk)
                except E.LedgerError as e:
                    # Nothing more is sent: keep what was not acknowledged.
                    # An unknown token stays an AuthenticationError: it
                    # is not the ledger being unavailable.
                    if not isinstance(e, (E.UnavailableError, E.AuthenticationError)):
                        e = E.UnavailableError(str(e), status=e.status, code=e.code, index=e.index, field=e.field)
                    e.events = [r for c in chunks[n:] for r in c]
                    self._fatal = e
                    break
        elif records:
            self._fatal.events.extend(records)
        for x in items:
            if isinstance(x, _Flush):
                x.done.set()

    def _send_refusing(self, chunk: list[bytes]):
        """Sends a chunk; when the ledger refuses one event of it, sends the
        others and reports the refused one (``record`` on the error)."""
        while chunk:
            try:
                self._send(chunk)
                return
            except E.RejectedError as e:
                i = e.index
                if i is None or not 0 <= i < len(chunk):
                    raise
                e.record = chunk[i]
                with self._lock:
                    self._refused.append(e)
                chunk = chunk[:i] + chunk[i + 1 :]

    # --- rollout workers ---------------------------------------------------------

    def attempt(self, run: str, **kw) -> Attempt:
        """A context manager recording one attempt (see
        :class:`rolloutledger.worker.Attempt`)."""
        return Attempt(self, run, **kw)

    # --- reading -------------------------------------------------------------------

    def _get(self, path: str, *, timeout: float | None = None, ok=(200,), accept: str | None = None, large: bool = False):
        """A GET, retried on transport errors and transient answers; with
        ``large``, the body is read into one buffer (a memoryview)."""
        deadline = time.monotonic() + self.retry_timeout
        attempt = 0
        headers = {"Accept": accept} if accept else None
        while True:
            try:
                resp = self._http.request("GET", path, timeout=timeout or self.timeout, headers=headers, large=large)
            except TRANSPORT_ERRORS as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if resp.status in ok:
                    return resp
                if resp.status not in TRANSIENT_STATUSES:
                    raise error_from_response(resp, "GET " + path)
                last = f"HTTP {resp.status}"
            self._sleep_backoff(attempt, deadline, "GET " + path, last)
            attempt += 1

    @staticmethod
    def _run_path(run: str) -> str:
        if not valid_run_id(run):
            raise ValueError(f"{run!r} is not a run id")
        return "/v1/runs/" + run

    def healthz(self) -> dict:
        return self._get("/healthz").json()

    def runs(self) -> list[dict]:
        """Runs known to the ledger, newest first."""
        return self._get("/v1/runs").json()["runs"]

    def status(self, run: str) -> dict:
        """{"run", "facts_folded", "batches_sealed", "tasks_admitted",
        "tasks_rejected", "findings"}: the facts the projector has folded,
        and the highest sequence number of each kind of decision."""
        return self._get(self._run_path(run) + "/status").json()

    def task(self, run: str, task: str) -> dict:
        """{"task", "decision": "admitted"|"rejected"|"pending", "probes",
        "passes", "pass_rate"}."""
        if not valid_entity_id(task):
            raise ValueError(f"{task!r} is not a task id")
        return self._get(self._run_path(run) + "/tasks/" + urllib.parse.quote(task, safe="/:")).json()

    def attempt_status(self, run: str, attempt: str, wait: float = 10.0) -> dict | None:
        """What the ledger knows of an attempt: {"attempt", "started",
        "group", "task", "retry_of", "turns", "finished", "failed",
        "rewarded", "done"}, or None when no fact names it. Read after every
        fact the ledger acknowledged before the call: the ledger waits up to
        ``wait`` seconds (at most 300) for its projector to fold that far,
        and the client retries while it has not (503 projector_behind)."""
        if not valid_entity_id(attempt):
            raise ValueError(f"{attempt!r} is not an attempt id")
        wait = max(0.0, min(float(wait), _MAX_WAIT))
        path = f"{self._run_path(run)}/attempts/{urllib.parse.quote(attempt, safe='/:')}?wait={int(wait * 1000)}ms"
        resp = self._get(path, timeout=wait + self.timeout, ok=(200, 404))
        if resp.status == 404:
            return None
        return resp.json()

    def batch(self, run: str, seq: int) -> Batch:
        """Sealed batch ``seq`` (NotFoundError if not sealed yet)."""
        return Batch.from_json(self._get(f"{self._run_path(run)}/batches/{int(seq)}").body, self)

    def next_batch(self, run: str, after: int, wait: float = 30.0) -> Batch | None:
        """Long-polls for batch ``after + 1`` for up to ``wait`` seconds
        (at most 300); None if it was not sealed by then."""
        wait = max(0.0, min(float(wait), _MAX_WAIT))
        path = f"{self._run_path(run)}/batches/next?after={int(after)}&wait={int(wait * 1000)}ms"
        resp = self._get(path, timeout=wait + self.timeout, ok=(200, 204))
        if resp.status == 204:
            return None
        return Batch.from_json(resp.body, self)

    def samples(
        self, run: str, seq: int, *, format: str | None = None, verify_digest: bool = False, compression: str = "auto"
    ) -> SampleBatch:
        """The materialized samples of batch ``seq`` as NumPy arrays.

        ``format``: "arrow" (Apache Arrow IPC, read without copying the
        token ids and log-probs; needs pyarrow), "ndjson", or None for the
        client's ``samples_format`` ("auto": Arrow when pyarrow is
        installed). ``compression`` applies to Arrow: "lz4" asks for the
        body with its repeated columns (loss mask, policy versions,
        temperatures) compressed, about 8 bytes a token on the wire instead
        of 21; "none" for the body as it is; "auto" (the default) for lz4 when
        pyarrow can read it. A ledger that predates compression answers the
        body as it is, which reads the same. With ``verify_digest``, the
        batch's manifest is fetched and the digest recomputed from it and
        the arrays (DigestMismatchError when they disagree)."""
        fmt = format or self.samples_format
        if fmt == "auto":
            fmt = "arrow" if have_pyarrow() else "ndjson"
        path = f"{self._run_path(run)}/batches/{int(seq)}/samples"
        if fmt == "arrow":
            if not have_pyarrow():
                raise ImportError("Arrow samples need pyarrow: pip install rolloutledger[arrow] (or format='ndjson')")
            if compression == "auto":
                compression = "lz4" if arrow_codec_available("lz4") else "none"
            if compression not in ("lz4", "none"):
                raise ValueError(f"compression {compression!r}: want 'lz4', 'none' or 'auto'")
            if compression != "none":
                path += f"?compression={compression}"
            resp = self._get(path, accept=ARROW_MEDIA_TYPE, large=True)
            samples, meta = parse_arrow_samples(resp.body)
            if getattr(samples, "_copied", False):
                self._http.reuse(resp)
            else:
                self._http.lend(resp)
            if meta.get("run", run) != run or meta.get("seq", str(int(seq))) != str(int(seq)):
                raise E.LedgerError(f"asked for the samples of batch {seq} of {run}, got those of batch {meta.get('seq')} of {meta.get('run')}")
        elif fmt == "ndjson":
            resp = self._get(path, accept=NDJSON_MEDIA_TYPE)
            samples = parse_samples(resp.body)
            samples.raw_ndjson = resp.body
        else:
            raise ValueError(f"format {format!r}: want 'arrow', 'ndjson' or None")
        if verify_digest:
            self.batch(run, seq).verify(samples)
        return samples

    def batches(
        self,
        run: str,
        *,
        start_after: int | None = None,
        state: TrainerState | None = None,
        wait: float = 30.0,
        idle_timeout: float | None = None,
        max_batches: int | None = None,
        until: int | None = None,
    ) -> Iterator[Batch]:
        """Yields sealed batches start_after+1, start_after+2, ... as they
        are sealed, long-polling for each; stops after batch ``until``, after
        ``max_batches`` batches, or when no batch came for ``idle_timeout``
        seconds (None: waits forever).

        With ``state``, the start is the state's last applied step, after
        re-sending any report a crash left unacknowledged and checking the
        state against the ledger (see rolloutledger.trainer)."""
        if state is not None:
            self.resume(state)
            if start_after is not None and start_after != state.step:
                raise ValueError(f"start_after={start_after} disagrees with the state's step {state.step}")
            start_after = state.step
        k = start_after or 0
        yielded = 0
        idle_since = time.monotonic()
        while (max_batches is None or yielded < max_batches) and (until is None or k < until):
            w = wait
            if idle_timeout is not None:
                left = idle_timeout - (time.monotonic() - idle_since)
                if left <= 0:
                    return
                w = min(wait, left)
            b = self.next_batch(run, k, wait=w)
            if b is None:
                continue
            if b.seq != k + 1:
                raise E.LedgerError(f"asked for batch {k + 1} of run {run}, got {b.seq}")
            idle_since = time.monotonic()
            k = b.seq
            yielded += 1
            yield b

    # --- trainers --------------------------------------------------------------

    def resume(self, state: TrainerState) -> TrainerState:
        """Re-sends the records a crash left pending in ``state`` (same ids,
        same bytes: duplicates for the ledger) and commits them, then checks
        the last applied step against the ledger's batch."""
        if state.pending is not None:
            self.post(state.pending_records())
            state.commit()
        if state.step > 0:
            b = self.batch(state.run, state.step)
            if b.digest != state.digest:
                raise E.ResumeError(
                    f"{state.path}: step {state.step} trained a batch with digest {state.digest}, "
                    f"but the ledger's batch {state.step} of run {state.run} has {b.digest}"
                )
        return state

    def _report(self, events: list[Event], state: TrainerState | None, commit: dict) -> list[Event]:
        records = [ev.encode() for ev in events]
        if state is not None:
            if state.run != events[0].run:
                raise ValueError(f"the state is of run {state.run!r}, the events of {events[0].run!r}")
            state.begin(records, commit)
        self.post(records)
        if state is not None:
            state.commit()
        return events

    def gradient_applied(
        self,
        batch: Batch,
        *,
        loss: float,
        trained_tokens: int,
        truncated_fraction: float,
        logprob_gap: Mapping[str | int, float],
        grad_norm: float,
        step: int | None = None,
        from_version: int | None = None,
        to_version: int | None = None,
        publish: Mapping | PolicyPublished | None = None,
        state: TrainerState | None = None,
        extra: Mapping | None = None,
        source: str | None = None,
    ) -> list[Event]:
        """Reports the optimizer step on ``batch`` — step, batch and digest
        from the batch, versions seq-1 to seq unless given — and waits for
        the ledger's acknowledgment.

        ``publish`` (a PolicyPublished, or a mapping of its checkpoint,
        digest and precision) adds the ``policy.published`` of the new
        version to the same request. With ``state``, the report is recorded
        in the trainer's state file first and the step committed after (see
        rolloutledger.trainer); ``extra`` is committed with it."""
        k = batch.seq
        step = k if step is None else step
        from_version = k - 1 if from_version is None else from_version
        to_version = from_version + 1 if to_version is None else to_version
        fact = GradientApplied(
            step=step,
            batch=k,
            batch_digest=batch.digest,
            from_version=from_version,
            to_version=to_version,
            loss=loss,
            trained_tokens=trained_tokens,
            truncated_fraction=truncated_fraction,
            logprob_gap=logprob_gap,
            grad_norm=grad_norm,
        )
        events = [self.event(batch.run, fact, source=source)]
        commit = {"step": step, "digest": batch.digest}
        if publish is not None:
            if not isinstance(publish, PolicyPublished):
                publish = PolicyPublished(version=to_version, **dict(publish))
            events.append(self.event(batch.run, publish, source=source))
            commit["version"] = publish.version
        if extra is not None:
            commit["extra"] = dict(extra)
        return self._report(events, state, commit)

    def policy_published(
        self,
        run: str,
        *,
        version: int,
        checkpoint: str,
        digest: str,
        precision: str,
        state: TrainerState | None = None,
        source: str | None = None,
    ) -> Event:
        """Reports a new policy weight version and waits for the
        acknowledgment (recorded in ``state`` when given)."""
        fact = PolicyPublished(version=version, checkpoint=checkpoint, digest=digest, precision=precision)
        ev = self.event(run, fact, source=source)
        self._report([ev], state, {"version": version})
        return ev

