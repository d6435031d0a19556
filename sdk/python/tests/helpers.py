"""Shared test helpers: a small, fully specified run, polling with a
deadline, and a TCP proxy that can misbehave on purpose."""

from __future__ import annotations

import socket
import threading
import time

import rolloutledger as rl

# A config that seals a batch per completed train group, admits any task
# after two probes, and keeps every turn trainable.
SMALL_CONFIG = rl.RunConfig(
    group_size=2,
    batch_groups=1,
    min_group=2,
    max_staleness=6,
    pass_band=[0.0, 1.0],
    min_probes=2,
    efficiency_weight=0.1,
    advantage="grpo",
)


def check_for(fn, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    """Polls fn until it returns a true value; returns it, or fails after
    timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


def tokens(seed: int, n: int, vocab: int = 1000) -> list[int]:
    return [(seed * 7919 + i * 104729) % vocab for i in range(n)]


def logprobs(seed: int, n: int) -> list[float]:
    # Multiples of 1/64 are exact in float32, so they read back unchanged.
    return [-((seed + i) % 64) / 64.0 for i in range(n)]


def small_run_events(run: str, *, task: str = "t-1", train_groups: int = 1, source: str = "pytest"):
    """Every fact type of a small run in a valid order: run.started, the
    task, a probe group of two (one pass), and train groups of two attempts
    (one solve, one partial) with turns, tool calls and a compaction; one
    attempt fails on the infrastructure and is retried. Ends with a closed
    empty group. Returns (events, expected) where expected describes the
    train attempts' turns."""
    ev = lambda fact: rl.Event(run, fact, source=source)  # noqa: E731
    out = [
        ev(rl.RunStarted(config=SMALL_CONFIG, model="toy-1", harness="unit", notes="sdk round trip")),
        ev(rl.TaskRegistered(task=task, source="unit-tests", kind="swe", tier=1, gates=[rl.Gate(name="builds", passed=True)])),
        ev(rl.VocabularyRegistered(engine="e-0", model="toy-1", size=8, chunk=0, chunks=1, first=0,
                                   pieces=b"abcdefgh", offsets=[1, 2, 3, 4, 5, 6, 7, 8])),
        ev(rl.GroupStarted(group="probe-1", task=task, size=2, purpose="probe")),
    ]
    for i, passed in enumerate([True, False]):
        a = f"probe-1/a{i}"
        out += [
            ev(rl.AttemptStarted(attempt=a, group="probe-1", task=task, engine="e-0", vm=f"vm-p{i}", fork_ms=10)),
            ev(rl.TurnGenerated(attempt=a, turn=0, policy_version=0, prompt_tokens=20, completion_tokens=5, cached_tokens=0, finish="stop", latency_ms=3)),
            ev(rl.AttemptFinished(attempt=a, outcome="submitted")),
            ev(rl.RewardComputed(attempt=a, passed=passed, tests_passed=1 if passed else 0, tests_total=1, verifier="unit")),
        ]
    expected = {}
    for g in range(train_groups):
        group = f"train-{g}"
        out.append(ev(rl.GroupStarted(group=group, task=task, size=2, purpose="train")))
        for i in range(2):
            a = f"{group}/a{i}"
            if i == 1:
                # Lost to the infrastructure, then retried in its slot.
                out += [
                    ev(rl.AttemptStarted(attempt=a + "-lost", group=group, task=task, engine="e-1", vm="vm-x", fork_ms=40)),
                    ev(rl.AttemptFailed(attempt=a + "-lost", reason="microVM lost its host")),
                ]
            out.append(
                ev(
                    rl.AttemptStarted(
                        attempt=a, group=group, task=task, engine="e-1", vm=f"vm-{g}-{i}", fork_ms=35,
                        retry_of=(a + "-lost") if i == 1 else None,
                    )
                )
            )
            turns = []
            for t in range(3):
                seed = 100 * g + 10 * i + t
                obs = tokens(seed + 500, 2) if t > 0 else None
                ids, lps = tokens(seed, 4), logprobs(seed, 4)
                out.append(
                    ev(
                        rl.TurnGenerated(
                            attempt=a, turn=t, policy_version=0, prompt_tokens=50 + t, completion_tokens=4,
                            cached_tokens=10, observation_token_ids=obs, token_ids=ids, logprobs=lps,
                            finish="tool_call" if t < 2 else "stop", latency_ms=7,
                        )
                    )
                )
                turns.append({"obs": obs or [], "ids": ids, "lps": lps, "version": 0, "segment": 0 if t < 2 else 1})
                if t < 2:
                    out.append(ev(rl.ToolCalled(attempt=a, turn=t, call=0, tool="bash", exit_code=0, duration_ms=30, output_bytes=100, to_file=t == 1, background=False, timed_out=False)))
                if t == 1:
                    out.append(ev(rl.ContextCompacted(attempt=a, turn=1, tokens_before=1000, tokens_after=200)))
            out.append(ev(rl.AttemptFinished(attempt=a, outcome="submitted")))
            out.append(ev(rl.RewardComputed(attempt=a, passed=i == 0, tests_passed=2 if i == 0 else 1, tests_total=2, verifier="unit")))
            expected[a] = turns
    out.append(ev(rl.GroupStarted(group="abandoned", task=task, size=2, purpose="eval")))
    out.append(ev(rl.GroupClosed(group="abandoned", reason="retries exhausted")))
    return out, expected


class Proxy:
    """A loopback TCP proxy in front of the ledger.

    ``mode`` decides what happens to each new client connection:
    "pass" forwards both ways; "drop_after_forward" forwards the request,
    waits for the ledger's answer, then closes the client's connection
    without answering (the request was applied but the client cannot know);
    "answer_503" answers 503 without forwarding; "stall" holds the request
    until ``release()``. ``modes`` is a list consumed one per connection,
    then ``mode`` applies. Each request body seen is kept in ``bodies``.
    """

    def __init__(self, upstream: str, mode: str = "pass", modes=()):
        host, port = upstream.replace("http://", "").split(":")
        self.upstream = (host, int(port))
        self.mode = mode
        self.modes = list(modes)
        self.bodies: list[bytes] = []
        self.connections = 0
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def release(self):
        self._released.set()

    def close(self):
        self._stop = True
        self._released.set()
        self.sock.close()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                mode = self.modes.pop(0) if self.modes else self.mode
            threading.Thread(target=self._serve, args=(c, mode), daemon=True).start()

    @staticmethod
    def _read_request(c: socket.socket) -> bytes | None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = c.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while len(rest) < length:
            chunk = c.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return head + b"\r\n\r\n" + rest

    @staticmethod
    def _read_response(u: socket.socket) -> bytes:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = u.recv(65536)
            if not chunk:
                return buf
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        length, chunked = None, False
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v.strip())
            elif k == b"transfer-encoding" and b"chunked" in v.lower():
                chunked = True
        status = int(head.split(b" ")[1])
        if chunked:
            # Read until the last (empty) chunk and its trailing CRLF.
            while not rest.endswith(b"0\r\n\r\n"):
                chunk = u.recv(65536)
                if not chunk:
                    break
                rest += chunk
            return head + b"\r\n\r\n" + rest
        if length is None and status in (204, 304):
            length = 0
        while length is None or len(rest) < length:
            chunk = u.recv(65536)
            if not chunk:
                break
            rest += chunk
        return head + b"\r\n\r\n" + rest

    def _serve(self, c: socket.socket, mode: str):
        u = None
        try:
            while True:
                req = self._read_request(c)
                if req is None:
                    return
                body = req.partition(b"\r\n\r\n")[2]
                if req.startswith(b"POST"):
                    with self._lock:
                        self.bodies.append(body)
                if mode == "answer_503":
                    msg = b'{"error":{"code":"not_acknowledged","message":"try again"}}\n'
                    c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(msg), msg))
                    return
                if mode == "stall":
                    self._released.wait()
                if u is None:
                    u = socket.create_connection(self.upstream)
                u.sendall(req)
                resp = self._read_response(u)
                if mode == "drop_after_forward":
                    return  # the ledger answered; the client never hears it
                c.sendall(resp)
        except OSError:
            return
        finally:
            c.close()
            if u is not None:
                u.close()
