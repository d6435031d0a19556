"""Every fact type through a live ledger and back: a small run posted with
the SDK seals batches whose manifests and samples show what was posted, at
the positions the ledger acknowledged."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

import rolloutledger as rl
from helpers import check_for, small_run_events


def test_every_fact_type_round_trip(ledger, run_id):
    events, expected = small_run_events(run_id, train_groups=2)
    assert {e.type for e in events} == set(rl.FACT_TYPES) - {"gradient.applied", "policy.published"}
    acks = ledger.post(events)
    assert [a.id for a in acks] == [e.id for e in events]
    assert len({(a.partition, a.offset) for a in acks}) == len(acks)
    assert len({a.partition for a in acks}) == 1, "one run's facts share a partition"
    offsets = [a.offset for a in acks]
    assert offsets == sorted(offsets), "a request's events are appended in order"
    pos = {e.id: (a.partition, a.offset) for e, a in zip(events, acks)}

    assert check_for(lambda: ledger.status(run_id)["batches_sealed"] >= 2, what="two sealed batches")
    assert ledger.task(run_id, "t-1")["decision"] == "admitted"
    # Read after every acknowledged fact: the projector has folded them all.
    a0 = ledger.attempt_status(run_id, "train-0/a0")
    assert a0["started"] and a0["group"] == "train-0" and a0["rewarded"] and a0["done"]
    assert ledger.attempt_status(run_id, "train-0/a-never") is None

    batches = list(ledger.batches(run_id, start_after=0, max_batches=2, wait=5))
    assert [b.seq for b in batches] == [1, 2]
    for b, group in zip(batches, ["train-0", "train-1"]):
        assert b.run == run_id and b.digest.startswith("sha256:")
        assert [g["group"] for g in b.groups] == [group]
        attempts = b.groups[0]["attempts"]
        assert [a["attempt"] for a in attempts] == [f"{group}/a0", f"{group}/a1"]
        assert attempts[0]["score"] == 1 and attempts[1]["score"] == 0.25
        # The manifest's turn positions are the acknowledged ones.
        turn_events = {(e.data.attempt, e.data.turn): e.id for e in events if e.type == "turn.generated"}
        for a in attempts:
            assert [t["policy_version"] for t in a["turns"]] == [0, 0, 0]
            for t in a["turns"]:
                assert (t["partition"], t["offset"]) == pos[turn_events[(a["attempt"], t["turn"])]]
                assert t["trained"] and t["staleness"] == b.seq - 1

        samples = b.samples()
        # One line per attempt and segment: the compaction after turn 1
        # starts segment 1.
        assert [(s.attempt, s.segment) for s in samples] == [
            (f"{group}/a0", 0), (f"{group}/a0", 1), (f"{group}/a1", 0), (f"{group}/a1", 1)]
        for s in samples:
            turns = [t for t in expected[s.attempt] if t["segment"] == s.segment]
            want_ids = [x for t in turns for x in t["obs"] + t["ids"]]
            want_mask = [m for t in turns for m in [0] * len(t["obs"]) + [1] * len(t["ids"])]
            want_lps = [x for t in turns for x in [0.0] * len(t["obs"]) + t["lps"]]
            assert s.token_ids.dtype == np.int32 and s.token_ids.tolist() == want_ids
            assert s.loss_mask.dtype == np.uint8 and s.loss_mask.tolist() == want_mask
            assert s.rollout_logprobs.dtype == np.float32 and s.rollout_logprobs.tolist() == want_lps
            assert s.policy_versions.dtype == np.int64 and set(s.policy_versions.tolist()) == {0}
            adv = next(a["advantage"] for a in attempts if a["attempt"] == s.attempt)
            assert s.advantage == adv
            assert np.allclose(s.advantages, np.array(want_mask) * adv)

        p = samples.padded()
        assert p["token_ids"].shape == (4, max(len(s) for s in samples))
        assert p["lengths"].tolist() == [len(s) for s in samples]
        assert (p["attention_mask"].sum(axis=1) == p["lengths"]).all()
        k = samples.packed()
        assert k["cu_seqlens"].tolist()[-1] == samples.num_tokens == len(k["token_ids"])

    # The trainer's reports: a correct digest leaves no finding, a wrong one
    # is caught by the ledger's audit.
    before = ledger.status(run_id)["findings"]
    ledger.gradient_applied(batches[0], loss=0.1, trained_tokens=24, truncated_fraction=0.0,
                            logprob_gap={0: 0.01}, grad_norm=0.5,
                            publish={"checkpoint": "ckpt/1", "digest": "sha256:aa", "precision": "fp32"})
    ledger.policy_published(run_id, version=2, checkpoint="ckpt/2", digest="sha256:bb", precision="fp32")
    wrong = rl.Batch(dict(batches[1].manifest, digest="sha256:" + "0" * 64))
    ledger.gradient_applied(wrong, loss=0.1, trained_tokens=24, truncated_fraction=0.0, logprob_gap={}, grad_norm=0.5)
    assert check_for(lambda: ledger.status(run_id)["findings"] == before + 1, what="a digest mismatch finding")


def test_batches_long_poll(ledger, run_id):
    events, _ = small_run_events(run_id, train_groups=1)
    assert ledger.next_batch(run_id, 0, wait=0.2) is None  # 204 before the run exists
    ledger.post(events[:-6])  # the second train attempt's reward is missing
    assert ledger.next_batch(run_id, 0, wait=0.3) is None
    got = []
    import threading

    t = threading.Thread(target=lambda: got.extend(ledger.batches(run_id, max_batches=1, wait=10)))
    t.start()
    ledger.post(events[-6:])
    t.join(20)
    assert [b.seq for b in got] == [1]
    assert list(ledger.batches(run_id, start_after=1, idle_timeout=0.3, wait=0.1)) == []
    with pytest.raises(rl.NotFoundError) as ei:
        ledger.batch(run_id, 9)
    assert ei.value.status == 404 and ei.value.code == "not_found"


def test_to_torch(ledger, run_id, monkeypatch):
    events, _ = small_run_events(run_id, train_groups=1)
    ledger.post(events)
    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))
    samples = b.samples()
    try:
        import torch
    except ImportError:
        monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
        with pytest.raises(ImportError, match="pip install torch"):
            samples.to_torch()
        # A stand-in with torch's from_numpy, view and to exercises the
        # conversion: tensors share the arrays' memory.
        class Tensor:
            def __init__(self, a, device=None):
                self.a, self.device = a, device

            def view(self, dtype):
                assert dtype == "torch.bool"
                return Tensor(self.a.view(bool), self.device)

            def to(self, device):
                return Tensor(self.a.copy(), device)

        stub = types.ModuleType("torch")
        stub.from_numpy = Tensor
        stub.bool = "torch.bool"
        monkeypatch.setitem(sys.modules, "torch", stub)
        t = samples.to_torch()
        assert t["token_ids"].a.dtype == np.int32 and np.shares_memory(t["token_ids"].a, samples.token_ids)
        assert t["loss_mask"].a.dtype == bool and np.shares_memory(t["loss_mask"].a, samples.loss_mask)
        assert np.shares_memory(t["rollout_logprobs"].a, samples.rollout_logprobs)
        assert t["cu_seqlens"].a.tolist() == samples.offsets.tolist()
        on = samples.to_torch(device="cuda:0")
        assert on["token_ids"].device == "cuda:0" and not np.shares_memory(on["token_ids"].a, samples.token_ids)
        padded = samples.to_torch(layout="padded")
        assert padded["token_ids"].a.shape == samples.padded()["token_ids"].shape
        one = samples[0].to_torch()
        assert one["advantages"].a.dtype == np.float32 and one["loss_mask"].a.dtype == bool
        with pytest.raises(ValueError, match="layout"):
            samples.to_torch(layout="ragged")
        return
    t = samples.to_torch()
    assert t["loss_mask"].dtype == torch.bool and t["token_ids"].dtype == torch.int32
    assert t["token_ids"].data_ptr() == samples.token_ids.ctypes.data
    p = samples.to_torch(layout="padded")
    assert tuple(p["token_ids"].shape) == samples.padded()["token_ids"].shape


def test_canonical_bytes_are_what_the_ledger_stores(ledger, run_id):
    """The same fact sent as the SDK encodes it and spaced otherwise is one
    fact to the ledger: the server stores canonical bytes, so the copies
    are plain duplicates, not conflicting ones."""
    events, _ = small_run_events(run_id, train_groups=1)
    rec = events[0].encode()
    spaced = json.dumps(json.loads(rec), indent=2, ensure_ascii=True).encode()
    assert spaced != rec
    ledger.post_body(rec)
    ledger.post_body(spaced)
    acks = ledger.post(events)
    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))  # everything before it was applied
    sealed_by = [(a.partition, a.offset) for a in acks].index((b.watermark["partition"], b.watermark["offset"]))
    assert b.tree["size"] == 2 + sealed_by + 1, "the fact sequence counts the two copies"
    assert ledger.status(run_id)["findings"] == 0


def test_arrow_and_ndjson_samples_agree(ledger, run_id):
    """Both renderings carry the same arrays; the Arrow ones are views of
    the response (no copy, read-only); either recomputes the digest."""
    events, _ = small_run_events(run_id, train_groups=1)
    ledger.post(events)
    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))
    arrow = ledger.samples(run_id, 1, format="arrow", verify_digest=True)
    nd = ledger.samples(run_id, 1, format="ndjson", verify_digest=True)
    assert arrow.source == "arrow" and nd.source == "ndjson"
    assert arrow.groups == nd.groups and arrow.attempts == nd.attempts
    for name in ("segments", "sample_advantages", "offsets", "token_ids", "loss_mask", "rollout_logprobs", "policy_versions"):
        x, y = getattr(arrow, name), getattr(nd, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    for name in ("token_ids", "loss_mask", "rollout_logprobs", "policy_versions"):
        a = getattr(arrow, name)
        assert not a.flags.owndata and not a.flags.writeable, f"{name} was copied"
    assert arrow.packed()["token_ids"] is arrow.token_ids
    assert b.samples(verify_digest=True) is b.samples()
    assert b.verify(arrow) == b.digest == b.verify(nd)
    # One token changed, or one advantage, and the digest no longer holds.
    for tamper in ("token_ids", "sample_advantages"):
        cols = {k: getattr(nd, k) for k in ("groups", "attempts", "segments", "sample_advantages", "offsets",
                                            "token_ids", "loss_mask", "rollout_logprobs", "policy_versions")}
        cols[tamper] = cols[tamper].copy()
        cols[tamper][0] += 1
        with pytest.raises(rl.DigestMismatchError):
            b.verify(rl.SampleBatch(columns=cols))
    with pytest.raises(ValueError, match="format"):
        ledger.samples(run_id, 1, format="csv")


def test_samples_route_negotiates(ledger, run_id):
    events, _ = small_run_events(run_id, train_groups=1)
    ledger.post(events)
    list(ledger.batches(run_id, max_batches=1, wait=10))
    path = f"/v1/runs/{run_id}/batches/1/samples"
    r = ledger._http.request("GET", path, headers={"Accept": "text/csv"})
    assert r.status == 406 and r.json()["error"]["code"] == "not_acceptable"
    assert "application/x-ndjson, application/vnd.apache.arrow.stream" in r.json()["error"]["message"]
    assert r.headers["Vary"] == "Accept"
    r = ledger._http.request("GET", path, headers={"Accept": "application/vnd.apache.arrow.stream;q=0.5, application/x-ndjson;q=0.4"})
    assert r.status == 200 and r.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
    r = ledger._http.request("GET", path, headers={"Accept": "*/*"})
    assert r.status == 200 and r.headers["Content-Type"] == "application/x-ndjson"


def test_partly_trained_turn(ledger, run_id):
    """A turn whose weights changed mid-generation: batch 1 trains from
    version 0, so the tokens version 1 generated are masked, the others
    train, and each token carries its own version."""
    events, _ = small_run_events(run_id, train_groups=1)
    for i, e in enumerate(events):
        d = e.data
        if e.type == "turn.generated" and d.attempt == "train-0/a0" and d.turn == 0:
            events[i] = rl.Event(run_id, rl.TurnGenerated(
                attempt=d.attempt, turn=0, version_segments=[(0, 0), (2, 1)], prompt_tokens=d.prompt_tokens,
                completion_tokens=4, cached_tokens=d.cached_tokens, token_ids=d.token_ids, logprobs=d.logprobs,
                finish=d.finish, latency_ms=d.latency_ms), source="pytest")
    ledger.post(events)
    (b,) = list(ledger.batches(run_id, max_batches=1, wait=10))
    turn = b.groups[0]["attempts"][0]["turns"][0]
    assert turn["trained"] and turn["segments"] == [
        {"start": 0, "policy_version": 0, "staleness": 0, "trained": True},
        {"start": 2, "policy_version": 1, "staleness": -1, "trained": False}]
    assert "segments" not in b.groups[0]["attempts"][0]["turns"][1]
    assert b.stats["masked_tokens"] == 2
    s = b.samples(verify_digest=True)[0]
    assert s.attempt == "train-0/a0" and s.segment == 0
    # Turn 0 has no observation tokens; turn 1's two follow its completion.
    assert s.loss_mask[:4].tolist() == [1, 1, 0, 0]
    assert s.policy_versions[:4].tolist() == [0, 0, 1, 1]


def test_arrow_samples_of_several_record_batches(ledger, run_id, monkeypatch):
    """The server streams a large batch as several record batches, in a
    chunked body: the client reads it into one buffer (growing it when the
    body outgrows the room set aside) and joins each column once, to the
    same arrays as one record batch gives."""
    import pyarrow as pa

    from rolloutledger import _http
    from rolloutledger.samples import parse_arrow_samples

    events, _ = small_run_events(run_id, train_groups=1)
    ledger.post(events)
    list(ledger.batches(run_id, max_batches=1, wait=10))
    whole = ledger.samples(run_id, 1, format="arrow")
    monkeypatch.setattr(_http, "_UNKNOWN_LENGTH_ROOM", 64)  # grows several times
    monkeypatch.setattr(_http, "_READ_STEP", 100)
    body = ledger._get(f"/v1/runs/{run_id}/batches/1/samples", accept="application/vnd.apache.arrow.stream", large=True).body
    table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=1)
    stream = np.frombuffer(sink.getvalue(), dtype=np.uint8).copy()
    split, meta = parse_arrow_samples(memoryview(stream))
    # Joined from several record batches, every array is a copy: the body's
    # buffer may serve the next fetch (Transport.reuse) without changing them.
    assert split._copied and not whole._copied
    before = {name: np.array(getattr(split, name)) for name in ("token_ids", "loss_mask", "rollout_logprobs", "policy_versions", "sample_advantages")}
    stream[:] = 0xAB
    for name, want in before.items():
        assert np.array_equal(getattr(split, name), want), f"{name} aliases the body"
    assert table.column("token_ids").num_chunks == 1 and len(whole) > 1
    assert meta["run"] == run_id
    for name in ("segments", "sample_advantages", "offsets", "token_ids", "loss_mask", "rollout_logprobs", "policy_versions"):
        x, y = getattr(split, name), getattr(whole, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert split.groups == whole.groups
