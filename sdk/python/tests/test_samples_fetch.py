"""A trainer's fetch of a batch's samples as Arrow: one body with its
Content-Length, read into one buffer, every array a view of it (token ids
and log-probs only, when the repeated columns come compressed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

TOKEN_COLUMNS = ("token_ids", "loss_mask", "rollout_logprobs", "policy_versions")


def _span(a: np.ndarray) -> tuple[int, int]:
    lo = a.__array_interface__["data"][0]
    return lo, lo + a.nbytes


def test_large_batch_arrives_as_views_of_one_buffer(ledger):
    """A batch of 64,000 tokens (which the server used to stream as
    several record batches, joined by the client into new arrays) comes as
    one record batch with a Content-Length: every token column is a
    read-only view inside the one buffer the body was read into, and the
    arrays equal the NDJSON's."""
    from fetch_samples import make_run

    run = make_run(ledger, groups=1, attempts=2, tokens=32_000, turn_tokens=2_000)
    path = f"/v1/runs/{run}/batches/1/samples"
    resp = ledger._get(path, accept="application/vnd.apache.arrow.stream", large=True)
    assert int(resp.headers["Content-Length"]) == len(resp.body)
    assert resp.headers["ETag"]

    arrow = ledger.samples(run, 1, format="arrow", verify_digest=True, compression="none")
    assert arrow.num_tokens >= 64_000 and not arrow._copied and arrow.body is not None
    body = np.frombuffer(arrow.body, dtype=np.uint8)
    lo, hi = _span(body)
    for name in TOKEN_COLUMNS:
        a = getattr(arrow, name)
        assert not a.flags.owndata and not a.flags.writeable, f"{name} was copied"
        start, end = _span(a)
        assert lo <= start and end <= hi, f"{name} is not inside the response's buffer"

    nd = ledger.samples(run, 1, format="ndjson")
    for name in ("offsets", "segments", "sample_advantages", *TOKEN_COLUMNS):
        assert np.array_equal(getattr(arrow, name), getattr(nd, name)), name
    assert arrow.groups == nd.groups and arrow.attempts == nd.attempts


def test_compressed_fetch_is_the_same_arrays(ledger):
    """The SDK's default asks for the body with the repeated columns
    compressed (LZ4): it is smaller on the wire, every array equals the
    uncompressed body's, the token ids and log-probs are still views of the
    buffer it was read into, and the digest still verifies."""
    from fetch_samples import make_run
    from rolloutledger.samples import arrow_codec_available

    if not arrow_codec_available("lz4"):
        pytest.skip("this pyarrow reads no LZ4")
    run = make_run(ledger, groups=1, attempts=2, tokens=8_000, turn_tokens=2_000)
    path = f"/v1/runs/{run}/batches/1/samples"
    media = "application/vnd.apache.arrow.stream"
    packed = ledger._get(path + "?compression=lz4", accept=media)
    plain = ledger._get(path, accept=media)
    assert packed.headers["ETag"] == plain.headers["ETag"][:-1] + '.lz4"'
    assert len(packed.body) < len(plain.body) * 0.6, (len(packed.body), len(plain.body))

    arrow = ledger.samples(run, 1, format="arrow", verify_digest=True)
    whole = ledger.samples(run, 1, format="arrow", compression="none")
    for name in ("offsets", "segments", "sample_advantages", "temperatures", *TOKEN_COLUMNS):
        assert np.array_equal(getattr(arrow, name), getattr(whole, name)), name
    lo, hi = _span(np.frombuffer(arrow.body, dtype=np.uint8))
    assert len(arrow.body) == len(packed.body)
    for name in ("token_ids", "rollout_logprobs"):
        start, end = _span(getattr(arrow, name))
        assert lo <= start and end <= hi, f"{name} is not inside the response's buffer"
    with pytest.raises(ValueError, match="compression 'zstd'"):
        ledger.samples(run, 1, format="arrow", compression="zstd")


def test_receive_buffer_reused_only_once_released(ledger):
    """A fetch reads into the buffer of the batch fetched before it once
    nothing views that batch any more (memory already faulted in), and
    never while its arrays are alive."""
    from fetch_samples import make_run

    run = make_run(ledger, groups=1, attempts=2, tokens=4_000, turn_tokens=2_000)

    def where(s):
        return _span(np.frombuffer(s.body, dtype=np.uint8))[0]

    first = ledger.samples(run, 1, format="arrow")
    ids = np.array(first.token_ids)
    held = ledger.samples(run, 1, format="arrow")
    assert where(held) != where(first), "a batch still in use was read over"
    assert np.array_equal(first.token_ids, ids)
    released = {where(first), where(held)}
    del first, held
    again = ledger.samples(run, 1, format="arrow")
    assert where(again) in released, "no released buffer was reused"
    assert np.array_equal(again.token_ids, ids)
    # A view taken of the arrays keeps the buffer from being reused.
    view = again.token_ids[:10]
    at = where(again)
    del again
    other = ledger.samples(run, 1, format="arrow")
    assert where(other) != at and np.array_equal(view, ids[:10])


def test_close_lets_go_of_the_receive_buffers(ledger, url):
    """Closing a client lets go of the buffers it kept for its next fetch."""
    import rolloutledger as rl
    from fetch_samples import make_run

    run = make_run(ledger, groups=1, attempts=2, tokens=4_000, turn_tokens=2_000)
    with rl.Ledger(url, source="test") as client:
        client.samples(run, 1, format="arrow")
        assert client._http._local.lent, "no buffer kept for the next fetch"
    assert client._http._local.lent is None


def test_torch_tensors_share_the_body(ledger, run_id):
    """Where torch is installed, to_torch() hands out tensors over the same
    memory as the arrays, the loss mask as a bool view."""
    torch = pytest.importorskip("torch")
    from helpers import small_run_events

    events, _ = small_run_events(run_id, train_groups=1)
    ledger.post(events)
    list(ledger.batches(run_id, max_batches=1, wait=10))
    s = ledger.samples(run_id, 1, format="arrow")
    t = s.to_torch()
    for name in TOKEN_COLUMNS:
        assert t[name].data_ptr() == _span(getattr(s, name))[0], name
    assert t["loss_mask"].dtype == torch.bool
