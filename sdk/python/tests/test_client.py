"""The client against a live ledger: the server's refusals as exceptions,
retries that reuse the same ids, and the bounded buffer."""

from __future__ import annotations

import json
import queue
import threading
import time

import pytest

import rolloutledger as rl
from helpers import Proxy, small_run_events
from test_vectors import VECTOR_CASES, body_of, verdict

BAD = [v for v in VECTOR_CASES if not v["valid"]]


@pytest.mark.parametrize("case", BAD, ids=[v["name"] for v in BAD])
def test_server_refusal_maps_to_the_same_error(ledger, case):
    """Each bad-input case: the server refuses it with the vector's code,
    index and field, the client raises them, and the local validator agreed
    before sending."""
    want = case["error"]
    assert verdict(body_of(case)) == want
    with pytest.raises(rl.RejectedError) as ei:
        ledger.post_body(body_of(case))
    e = ei.value
    assert e.status == 400
    assert (e.code, e.field) == (want["code"], want["field"])
    # The server names the event except when the body as a whole is at fault.
    if want["code"] in ("malformed", "empty"):
        assert e.index is None
    else:
        assert e.index == want["index"]
    assert e.message


def test_valid_vectors_are_accepted(ledger):
    for v in VECTOR_CASES:
        if v["valid"]:
            acks = ledger.post_body(body_of(v))
            assert [a.id for a in acks] == [ev.id for ev in rl.validate_body(body_of(v))]


def test_other_refusals(ledger, url):
    from rolloutledger._http import error_from_response

    resp = ledger._http.request("POST", "/v1/events", body=b"{}", headers={"Content-Type": "text/plain"})
    e = error_from_response(resp, "POST /v1/events")
    assert isinstance(e, rl.RejectedError) and (e.status, e.code) == (415, "unsupported_media_type")
    with pytest.raises(rl.RejectedError) as ei:
        ledger.next_batch("run", -1)
    assert (ei.value.status, ei.value.code) == (400, "invalid_value")


def test_retry_after_dropped_connection_appends_each_event_once(url, run_id):
    """The first connection is dropped after the ledger applied the request:
    the client sends the same bytes again and every fact counts once."""
    events, _ = small_run_events(run_id, train_groups=2)
    split = next(i for i, e in enumerate(events) if e.type == "group.started" and e.data.group == "train-1")
    first, rest = events[:split], events[split:]
    proxy = Proxy(url, modes=["drop_after_forward"])
    try:
        with rl.Ledger(proxy.url, source="pytest", retry_timeout=20, backoff=0.01) as led:
            acks = led.post(first)
            assert [a.id for a in acks] == [e.id for e in first]
            assert led.retries == 1
    finally:
        proxy.close()
    assert len(proxy.bodies) == 2 and proxy.bodies[0] == proxy.bodies[1], "the retry sends the same bytes"
    with rl.Ledger(url) as led:
        led.post(rest)
        b1, b2 = list(led.batches(run_id, max_batches=2, wait=10))
        # Batch 1 was sealed by the dropped request's copy, which the client
        # never saw acknowledged: the ledger had applied it.
        assert b1.watermark["offset"] < acks[0].offset
        last_reward = max(i for i, e in enumerate(first) if e.type == "reward.computed")
        assert b1.tree["size"] == last_reward + 1
        # Batch 2 comes after both copies: the fact sequence counts the copy,
        # but no fact took effect twice (a copy under new ids would be a
        # duplicate_entity finding, changed bytes a conflicting duplicate).
        assert b2.tree["size"] > len(first) * 2
        assert led.status(run_id)["findings"] == 0
        assert [a["attempt"] for a in b2.groups[0]["attempts"]] == ["train-1/a0", "train-1/a1"]
        assert all(len(a["turns"]) == 3 for a in b1.groups[0]["attempts"] + b2.groups[0]["attempts"])


def test_retry_on_503_and_buffered_retry(url, run_id):
    proxy = Proxy(url, modes=["answer_503", "drop_after_forward"])
    events, _ = small_run_events(run_id, train_groups=1)
    try:
        with rl.Ledger(proxy.url, source="pytest", retry_timeout=20, backoff=0.01, batch_events=1000, linger=5) as led:
            for ev in events:
                led.send(ev)
            led.flush()
            assert led.retries == 2
    finally:
        proxy.close()
    assert len(set(proxy.bodies)) == 1 and len(proxy.bodies) == 3
    with rl.Ledger(url) as led:
        assert [b.seq for b in led.batches(run_id, max_batches=1, wait=10)] == [1]
        assert led.status(run_id)["findings"] == 0


def test_gives_up_after_retry_timeout(url, run_id):
    proxy = Proxy(url, mode="answer_503")
    try:
        led = rl.Ledger(proxy.url, retry_timeout=0.3, backoff=0.01)
        with pytest.raises(rl.UnavailableError) as ei:
            led.post([rl.Event(run_id, rl.GroupClosed(group="g", reason="r"), source="s")])
        assert "gave up" in str(ei.value)
        # Through the buffer: the unacknowledged events come back with the error.
        evs = [led.emit(run_id, rl.GroupClosed(group=f"g{i}", reason="r")) for i in range(3)]
        with pytest.raises(rl.UnavailableError) as ei:
            led.flush()
        assert ei.value.events == [e.encode() for e in evs]
        with pytest.raises(rl.UnavailableError):
            led.emit(run_id, rl.GroupClosed(group="g", reason="r"))
    finally:
        proxy.close()


def test_connection_refused_is_retried_then_reported():
    led = rl.Ledger("http://127.0.0.1:9", retry_timeout=0.2, backoff=0.01)
    with pytest.raises(rl.UnavailableError, match="ConnectionRefusedError"):
        led.post([rl.Event("r", rl.GroupClosed(group="g", reason="r"), source="s")])


def test_bounded_buffer_applies_back_pressure(url, run_id):
    proxy = Proxy(url, mode="stall")
    try:
        led = rl.Ledger(proxy.url, source="pytest", max_buffer=4, batch_events=2, linger=0)
        sent = []
        # The flusher takes one or two events into a request that stalls and
        # four more fill the queue: then emit blocks, and gives up after its
        # timeout.
        for i in range(10):
            t0 = time.monotonic()
            try:
                sent.append(led.emit(run_id, rl.GroupClosed(group=f"g{i}", reason="r"), timeout=0.5))
            except queue.Full:
                assert time.monotonic() - t0 >= 0.45
                break
        assert 5 <= len(sent) <= 6
        blocked = threading.Thread(target=lambda: sent.append(led.emit(run_id, rl.GroupClosed(group="last", reason="r"))))
        blocked.start()
        time.sleep(0.2)
        assert blocked.is_alive(), "emit waits while the buffer is full"
        proxy.release()
        blocked.join(10)
        assert not blocked.is_alive()
        led.flush(timeout=20)
        led.close()
    finally:
        proxy.close()
    acked = [e["id"] for b in proxy.bodies for e in json.loads(b)]
    assert acked == [e.id for e in sent], "every event sent once, in emit order"


def test_refused_event_in_the_buffer_is_reported_and_others_sent(ledger, run_id):
    good = [rl.Event(run_id, rl.GroupClosed(group=f"g{i}", reason="r"), source="s") for i in range(3)]
    ledger.send(good[0])
    # A record the ledger refuses, slipped past the local checks.
    ledger._queue.put(good[1].encode().replace(b'"reason":"r"', b'"reason":""'))
    ledger.send(good[2])
    with pytest.raises(rl.RejectedError) as ei:
        ledger.flush()
    assert (ei.value.code, ei.value.index, ei.value.field) == ("invalid_value", 1, "data.reason")
    assert b'"reason":""' in ei.value.record
    ledger.flush()  # reported once
    # The two good events were appended.
    acks = ledger.post([good[0], good[2]])
    assert len(acks) == 2


def test_emit_validates_in_the_caller(ledger, run_id):
    with pytest.raises(rl.ValidationError) as ei:
        ledger.emit(run_id, rl.AttemptFailed(attempt="a 1", reason="x"))
    assert ei.value.field == "data.attempt"
    with pytest.raises(rl.ValidationError):
        ledger.emit("bad run", rl.AttemptFailed(attempt="a", reason="x"))
