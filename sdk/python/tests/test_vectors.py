"""The shared cases of testdata/vectors/events.json: the Python validator
must reach the server's verdict on every body (valid, or the same code,
event index and field), and write the server's canonical bytes."""

from __future__ import annotations

import base64
import json

import pytest

import rolloutledger as rl
from rolloutledger import errors as E
from rolloutledger.validation import encode_events

from conftest import REPO

VECTORS = REPO / "testdata" / "vectors" / "events.json"
GOLDEN = REPO / "events" / "testdata" / "golden"


def load_vectors():
    return json.loads(VECTORS.read_text())


def body_of(v) -> bytes:
    if "body" in v:
        return v["body"].encode("utf-8")
    return base64.b64decode(v["body_base64"])


def verdict(body: bytes):
    try:
        rl.validate_body(body)
    except rl.ValidationError as e:
        return {"code": e.code, "index": e.index, "field": e.field}
    return None


VECTOR_CASES = load_vectors()


def test_vectors_file_is_complete():
    names = [v["name"] for v in VECTOR_CASES]
    assert len(names) == len(set(names))
    assert len(VECTOR_CASES) >= 150
    assert sum("body_base64" in v for v in VECTOR_CASES) >= 2
    types, codes = set(), set()
    for v in VECTOR_CASES:
        if v["valid"]:
            types.update(ev.type for ev in rl.validate_body(body_of(v)))
        else:
            codes.add(v["error"]["code"])
    assert types == set(rl.FACT_TYPES)
    assert codes == set(E.CODES) - {E.TOO_LARGE}


@pytest.mark.parametrize("case", VECTOR_CASES, ids=[v["name"] for v in VECTOR_CASES])
def test_vector(case):
    assert case["valid"] == (case.get("error") is None)
    assert verdict(body_of(case)) == case.get("error")


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.json")), ids=lambda p: p.stem)
def test_golden_canonical_bytes(path):
    """The server's golden canonical records encode to themselves."""
    want = path.read_bytes().strip()
    events = rl.validate_body(want)
    assert encode_events(events) == [want]
    # And the typed builders rebuild the same bytes from the decoded fact.
    ev = events[0]
    rebuilt = rl.Event(ev.run, ev.data, source=ev.source, id=ev.id, at=ev.at, v=ev.v)
    assert rebuilt.encode() == want


@pytest.mark.parametrize("v, n", [(1, 120_000), (2, 300_000)])
def test_too_large_canonical_record(v, n):
    fact = rl.TurnGenerated(
        attempt="a", turn=0, policy_version=0, prompt_tokens=1, completion_tokens=n,
        token_ids=[1234567] * n, logprobs=[-0.12345678] * n, finish="stop", latency_ms=1,
    )
    with pytest.raises(rl.ValidationError) as ei:
        rl.Event("r", fact, source="s", v=v).encode()
    assert (ei.value.code, ei.value.field) == ("too_large", "")
    body = b"[" + rl.Event("r", rl.GroupClosed(group="g", reason="x"), source="s").encode() + b"," + json.dumps(
        rl.Event("r", fact, source="s", v=v).to_wire()
    ).encode() + b"]"
    assert verdict(body) == {"code": "too_large", "index": 1, "field": ""}
